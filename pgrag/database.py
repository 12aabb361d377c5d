"""The façade: what ``pgrag.connect()`` returns.

``Database`` composes the connector (``pgrag.db.Connector``: connections, named
queries, transactions) with what users call: corpora, attachments of application
tables (``pgrag.follow``), the schema (``pgrag.schema``) and roles. Nothing
below this module imports it; the layers are drawn in docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from . import exceptions as exc
from . import follow, schema
from .config import ChunkingSettings, Settings
from .corpus import Corpus, open_corpus
from .db import Connector, connect, redact
from .queries import query

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine
    from sqlalchemy.orm import Session

    from .db import ClientConnection

T = TypeVar("T")


class Database:
    """A pgrag database: one PostgreSQL database with the schema at head."""

    def __init__(self, connector_or_dsn: "Connector | str", *, embedded: bool = False,
                 settings: Settings | None = None) -> None:
        """Over a connector, or a DSN (no check, no migration: ``open_database``
        and ``pgrag.connect`` do both)."""
        self.connector = (Connector(connector_or_dsn) if isinstance(connector_or_dsn, str)
                          else connector_or_dsn)
        self.embedded = embedded
        self.settings = settings or Settings.from_env()

    def __repr__(self) -> str:
        return f"Database({redact(self.dsn)!r})"

    # -- the connector's QueryRunner, for applications and tools ---------------

    @property
    def dsn(self) -> str:
        return self.connector.dsn

    @property
    def engine(self) -> "Engine":
        return self.connector.engine

    def transaction(self) -> contextlib.AbstractContextManager["ClientConnection"]:
        """A connection inside one transaction: committed on success, rolled back
        on any error, which is re-raised as a ``PgragError``."""
        return self.connector.transaction()

    def session(self) -> "Session":
        """An ORM session for applications (``pgrag.models``)."""
        return self.connector.session()

    def fetchall(self, name: str, params: dict[str, Any] | None = None) -> list[tuple]:
        """The rows of one named statement (``sql/queries_*.sql``), run on its own."""
        return self.connector.fetchall(name, params)

    def fetchone(self, name: str, params: dict[str, Any] | None = None) -> tuple | None:
        return self.connector.fetchone(name, params)

    def fetch_row(self, name: str, params: dict[str, Any] | None = None) -> tuple:
        return self.connector.fetch_row(name, params)

    def wait(self, work: Callable[[], T]) -> T:
        return self.connector.wait(work)

    def close(self) -> None:
        self.connector.close()

    # -- corpora -----------------------------------------------------------

    def corpus(self, name: str, *, create: bool = True, embedding_model: str | None = None,
               chunking: ChunkingSettings | None = None, methods: Sequence[str] = ()) -> Corpus:
        """The corpus ``name``, created on first use (``create=False`` raises
        ``CorpusNotFound`` instead). ``embedding_model`` applies at creation.
        ``methods`` (e.g. ``["threadrag"]``): enable, and backfill, the method
        families they need that the corpus does not maintain yet (``pgrag.families``)."""
        from .methods import families_for

        kb = open_corpus(self.connector, name, self.settings, create=create,
                         embedding_model=embedding_model, chunking=chunking)
        for family in families_for(methods):
            if family not in kb.families:
                kb.enable(family, progress=False)
        return kb

    def corpora(self) -> list[dict[str, Any]]:
        """Every corpus with its model, size and the method families it maintains."""
        cols = ("name", "embedding_model", "embedding_dim", "documents", "chunks", "tokens", "edges", "pending",
                "families")
        return [{**dict(zip(cols, row)), "families": list(row[8] or ())} for row in self.fetchall("list_corpora")]

    def drop_corpus(self, name: str) -> None:
        """Delete a corpus and everything derived from it."""
        with self.transaction() as conn:
            conn.execute(query("drop_corpus"), {"name": name})

    # -- corpora that follow an application table (pgrag.follow) ------------

    def attach(self, corpus: str, source: str, *, embedding_model: str | None = None, **options: Any) -> int:
        """Make ``corpus`` follow table ``source`` (``"schema.table"``): see
        ``pgrag.follow.attach``. Returns the number of rows enqueued."""
        return follow.attach(self.connector, corpus, source,
                             embedding_model=embedding_model or self.settings.embedding_model, **options)

    def detach(self, corpus: str, *, drop_corpus: bool = False) -> None:
        """Stop following (``pgrag.follow.detach``)."""
        follow.detach(self.connector, corpus, drop_corpus=drop_corpus)

    def sync_status(self, corpus: str | None = None) -> list[follow.SyncStatus]:
        """Rows of ``pgrag.sync_status`` (``pgrag.follow.SyncStatus``)."""
        return follow.sync_status(self.connector, corpus)


    # -- schema (pgrag.schema) ---------------------------------------------

    def check_server(self) -> None:
        schema.check_server(self.connector)

    def upgrade(self) -> None:
        """Bring the schema to head (idempotent; safe to run concurrently), then
        re-apply the SQL function definitions."""
        schema.upgrade(self.connector)

    def runtime(self) -> tuple[str | None, list[str]]:
        return schema.runtime(self.connector)

    def can_migrate(self) -> bool:
        return schema.can_migrate(self.connector)

    def check_schema(self) -> None:
        schema.check_schema(self.connector)

    # -- roles and tenant isolation (README "Security and operations") -----------

    def _admin(self, name: str, params: dict[str, Any] | None = None) -> Any:
        with self.transaction() as conn:
            row = conn.execute(query(name), params or {}).fetchone()
        return row[0] if row else None

    def grant_reader(self, role: str) -> None:
        """Let an existing role read every pgrag table and call the retrieval
        functions (it still cannot write; see ``grant_writer``)."""
        self._admin("grant_reader", {"role": role})

    def grant_writer(self, role: str) -> None:
        """Reader privileges plus ingest: insert, update and delete rows, reserve
        ids, build a corpus's HNSW index. Dropping corpora stays with the owner."""
        self._admin("grant_writer", {"role": role})

    def revoke_role(self, role: str) -> None:
        """Take back everything ``grant_reader``/``grant_writer``/``grant_corpus`` gave."""
        self._admin("revoke_role", {"role": role})

    def grant_corpus(self, role: str, corpus: str) -> None:
        """Under tenant isolation, let ``role`` (and its members) see ``corpus``."""
        self._admin("grant_corpus", {"role": role, "corpus": corpus})

    def revoke_corpus(self, role: str, corpus: str) -> None:
        self._admin("revoke_corpus", {"role": role, "corpus": corpus})

    def enable_tenant_isolation(self) -> int:
        """Row-level security by corpus on every table: a role sees only the
        corpora granted to it with ``grant_corpus``. Returns the number of tables."""
        return int(self._admin("enable_tenant_isolation"))

    def disable_tenant_isolation(self) -> int:
        return int(self._admin("disable_tenant_isolation"))

    def corpus_access(self) -> list[tuple[str, str]]:
        """(corpus, role) pairs of the access list that the caller can see."""
        return [(name, role) for name, role in self.fetchall("corpus_access")]


def open_database(dsn: str, *, embedded: bool = False, migrate: bool = True,
                  settings: Settings | None = None) -> Database:
    """Open ``dsn``, check that it is reachable, and migrate it to head (or, for a
    role that does not own the schema, check that it is at head)."""
    db = Database(connect(dsn), embedded=embedded, settings=settings)
    try:
        _prepare(db, migrate)
    except BaseException:
        db.close()   # a refused migration leaves no connection open behind it
        raise
    return db


def _prepare(db: Database, migrate: bool) -> None:
    if migrate:
        # A reader or writer role cannot migrate (DDL needs the owner): it gets a
        # database that is already at head, or a clear SchemaOutdated.
        if db.can_migrate():
            db.upgrade()
        else:
            db.check_schema()
        if db.runtime()[0] is None:
            warnings.warn(exc.RuntimeNotice(runtime_notice(db)), stacklevel=4)


def runtime_notice(db: Database) -> str:
    """What a database without the in-server runtime lacks, why, and what still works."""
    on_server, created = db.fetch_row("plpython_facts")
    why = ("this server has no PL/Python (plpython3u), as managed services have none" if not on_server else
           "only a superuser may create PL/Python (plpython3u, an untrusted language) functions: "
           "run `pgrag db upgrade` once as one" + ("" if created else ", after CREATE EXTENSION plpython3u"))
    return (f"pgrag: no in-server runtime in this database ({why}). SQL's pgrag.retrieve, answer, embed and "
            "index raise PR003; kb.retrieve, the CLI, `pgrag serve` and the framework retrievers run every "
            "method in their own process (loading the models there), and the plain SQL functions "
            "(pgrag.bm25, dense, hybrid, the single-hop tigrag) work (docs/managed.md)")
