"""pgrag: multi-hop retrieval inside PostgreSQL + pgvector.

    import pgrag
    db = pgrag.connect()                    # embedded server in the user data dir
    kb = db.corpus("wiki")                  # created on first use
    kb.ingest([{"id": "d1", "title": "...", "text": "..."}])
    hits = kb.retrieve("question", method="bm25", k=5)
"""

from __future__ import annotations

from .config import Settings
from .context import Context
from .corpus import Corpus
from .database import Database, open_database
from .exceptions import (
    AttachError,
    ConfigError,
    ConnectionFailed,
    CorpusNotFound,
    EmbeddingMismatch,
    ExtensionMissing,
    InputError,
    MethodNotBuilt,
    PgragError,
    QueryCanceled,
    RuntimeMissing,
    SchemaOutdated,
    ServerError,
    UnknownMethod,
    UnsupportedServer,
)
from .ingest import IngestReport
from .results import Answer, Hit, Hits, Provenance, Trace

__all__ = [
    "connect", "Database", "Corpus", "Context", "Settings", "Answer", "Hit", "Hits", "Provenance", "Trace",
    "IngestReport", "PgragError", "AttachError", "ConfigError", "ConnectionFailed", "CorpusNotFound",
    "EmbeddingMismatch", "ExtensionMissing", "InputError", "MethodNotBuilt", "QueryCanceled", "RuntimeMissing", "SchemaOutdated",
    "ServerError", "UnknownMethod", "UnsupportedServer",
]


def connect(dsn: str | None = None, *, settings: Settings | None = None, migrate: bool = True) -> Database:
    """Open a pgrag database and bring its schema to head.

    ``dsn`` (or ``PGRAG_DSN``) names an existing PostgreSQL with pgvector; without
    one, the embedded server in ``PGRAG_DATA_DIR`` (default: a per-user data
    directory) is started or reused."""
    from . import server

    settings = settings or Settings.from_env()
    dsn = dsn or settings.dsn
    embedded = dsn is None
    if dsn is None:
        dsn = server.start(settings.data_dir)
    return open_database(dsn, embedded=embedded, migrate=migrate, settings=settings)
