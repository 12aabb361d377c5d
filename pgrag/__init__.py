"""pgrag: multi-hop retrieval inside PostgreSQL + pgvector.

    import pgrag
    db = pgrag.connect()                    # embedded server in the user data dir
    kb = db.corpus("wiki")                  # created on first use
    kb.ingest([{"id": "d1", "title": "...", "text": "..."}])
    hits = kb.retrieve("question", method="bm25", k=5)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

# config first: in a server backend it sets the thread environment before numpy loads.
from .config import Settings
from .exceptions import (
    AttachError,
    ConfigError,
    ConnectionFailed,
    CorpusNotFound,
    EmbeddingMismatch,
    ExtensionMissing,
    InputError,
    MethodNotBuilt,
    ModelRuntimeUnavailable,
    OptionError,
    PgragError,
    QueryCanceled,
    RuntimeMissing,
    SchemaOutdated,
    ServerError,
    UnknownMethod,
    UnsupportedServer,
)

if TYPE_CHECKING:
    from .context import Context
    from .corpus import Corpus
    from .database import Database
    from .ingest import IngestReport
    from .results import Answer, Hit, Hits, Provenance, Trace

# The client classes load on first use, not with the package: a server backend
# imports pgrag.inserver and must not pay for psycopg and SQLAlchemy (13 MB and
# more per backend) that only a client process uses.
_LAZY = {"Context": "context", "Corpus": "corpus", "Database": "database", "open_database": "database",
         "IngestReport": "ingest", "Answer": "results", "Hit": "results", "Hits": "results",
         "Provenance": "results", "Trace": "results"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pgrag' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "connect", "Database", "Corpus", "Context", "Settings", "Answer", "Hit", "Hits", "Provenance", "Trace",
    "IngestReport", "PgragError", "AttachError", "ConfigError", "ConnectionFailed", "CorpusNotFound",
    "EmbeddingMismatch", "ExtensionMissing", "InputError", "MethodNotBuilt", "ModelRuntimeUnavailable", "QueryCanceled",
    "OptionError", "RuntimeMissing", "SchemaOutdated",
    "ServerError", "UnknownMethod", "UnsupportedServer",
]


def connect(dsn: str | None = None, *, settings: Settings | None = None, migrate: bool = True,
            models: bool | None = None) -> Database:
    """Open a pgrag database and bring its schema to head.

    ``dsn`` (or ``PGRAG_DSN``) names an existing PostgreSQL with pgvector; without
    one, the embedded server in ``PGRAG_DATA_DIR`` (default: a per-user data
    directory) is started or reused, and with it the shared model runtime that
    its backends embed through (``pgrag.embedded.start``), unless
    ``models`` is False (default: ``PGRAG_START_MODELS``, else yes). An existing
    PostgreSQL gets its runtime from ``pgrag models serve``."""
    from . import embedded as embedded_server
    from .database import open_database

    settings = settings or Settings.from_env()
    dsn = dsn or settings.dsn
    embedded = dsn is None
    if dsn is None:
        dsn = embedded_server.start(settings.data_dir, models=models, embedding_model=settings.embedding_model)
    return open_database(dsn, embedded=embedded, migrate=migrate, settings=settings)
