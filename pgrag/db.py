"""The connector: the only module that creates engines and connections, runs
migrations and translates driver errors. Everything else takes a ``Database``."""

from __future__ import annotations

import contextlib
import os
import select
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

import psycopg
from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from . import distribute as citus
from . import exceptions as exc
from . import sqlscript
from .config import Settings
from .queries import binary_results, query
from .resources import resource_dir, sql_file

T = TypeVar("T")

if TYPE_CHECKING:
    from .config import ChunkingSettings
    from .corpus import Corpus

MIN_SERVER_VERSION = 170000  # pg_c_utf8 collation (token pipeline) needs PostgreSQL 17
MIGRATION_LOCK = 7_414_247_100  # advisory lock key: one migrator at a time


def sqlalchemy_url(dsn: str) -> str:
    scheme, sep, rest = dsn.partition("://")
    if not sep:
        # the DSN itself is not echoed: it may hold a password
        raise exc.ConfigError("the DSN is not a PostgreSQL URI (expected postgresql://user:password@host:port/dbname)")
    if scheme in ("postgresql", "postgres", "postgresql+psycopg"):
        return "postgresql+psycopg://" + rest
    raise exc.ConfigError(f"unsupported DSN scheme {scheme!r}: use postgresql://")


def redact(dsn: str) -> str:
    parts = urlsplit(dsn)
    if parts.password:
        return dsn.replace(":" + parts.password + "@", ":***@")
    return dsn


def translate(error: psycopg.Error) -> exc.PgragError:
    """Map a driver error to the public exception tree (message kept)."""
    state = getattr(error, "sqlstate", None)
    message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    known = exc.by_sqlstate(state)
    if known is not None:
        return known(message.removeprefix("pgrag: "))
    if state in ("57014", "55P03"):  # query_canceled (timeout, pg_cancel_backend), lock_not_available
        return exc.QueryCanceled(message)
    if isinstance(error, psycopg.OperationalError):
        return exc.ConnectionFailed(message)
    return exc.PgragError(message)


@contextlib.contextmanager
def _translated() -> Iterator[None]:
    """Re-raise driver errors (bare, or wrapped by SQLAlchemy) as ``PgragError``."""
    try:
        yield
    except psycopg.Error as error:
        raise translate(error) from error
    except Exception as error:
        orig = getattr(error, "orig", None)
        if isinstance(orig, psycopg.Error):
            raise translate(orig) from error
        raise


class Database:
    """A pgrag database: an engine over one PostgreSQL database with the schema at head."""

    def __init__(self, dsn: str, *, embedded: bool = False, settings: Settings | None = None) -> None:
        self.dsn = dsn
        self.embedded = embedded
        self.settings = settings or Settings.from_env()
        self.engine: Engine = create_engine(sqlalchemy_url(dsn), pool_pre_ping=True, pool_size=5)
        event.listen(self.engine, "connect", _register_vector)
        self._local = threading.local()        # this thread's _Reader (see _reader)
        self._readers: weakref.WeakSet[_Reader] = weakref.WeakSet()   # every thread's, for close()
        self._readers_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Database({redact(self.dsn)!r})"

    # -- connections -------------------------------------------------------

    @contextlib.contextmanager
    def transaction(self) -> Iterator[psycopg.Connection]:
        """A psycopg connection inside one transaction: committed on success,
        rolled back on any error, which is re-raised as a ``PgragError``."""
        with _translated(), self.engine.begin() as sa_conn:
            raw = sa_conn.connection.driver_connection
            assert isinstance(raw, psycopg.Connection)
            yield raw

    def session(self) -> Session:
        """An ORM session for applications (``pgrag.models``)."""
        return Session(self.engine)

    def fetchall(self, name: str, params: dict[str, Any] | None = None) -> list[tuple]:
        """The rows of one named statement, run (and committed) on its own."""
        with self._reader() as conn:
            return conn.execute(query(name), params or {}, binary=binary_results(name)).fetchall()

    def fetchone(self, name: str, params: dict[str, Any] | None = None) -> tuple | None:
        with self._reader() as conn:
            return conn.execute(query(name), params or {}, binary=binary_results(name)).fetchone()

    @contextlib.contextmanager
    def _reader(self) -> Iterator[psycopg.Connection]:
        """This thread's autocommit connection, for statements that stand alone.

        A method's query runs a dozen of them. Through the pool each paid a
        ping, a BEGIN and a COMMIT (four round trips, about 1 ms against
        0.25 ms here); in autocommit each is its own transaction, as it was.
        Liveness costs no round trip (``_alive``): a connection the server
        closed is replaced before the statement is sent."""
        reader: _Reader | None = getattr(self._local, "reader", None)
        if reader is not None and (reader.pid != os.getpid() or not _alive(reader.conn)):
            self._forget(reader)
            reader = None
        with _translated():
            current = self._connect_reader() if reader is None else reader
            try:
                yield current.conn
            finally:
                if getattr(self._local, "reader", None) is not current:
                    current.close()    # no vector type yet (before the first upgrade): not kept
                elif current.conn.broken:
                    self._forget(current)

    def _connect_reader(self) -> "_Reader":
        reader = _Reader(psycopg.connect(self.dsn, autocommit=True))
        if _register_vector(reader.conn, None):
            self._local.reader = reader
            with self._readers_lock:
                self._readers.add(reader)
        return reader

    def _forget(self, reader: "_Reader") -> None:
        with self._readers_lock:
            self._readers.discard(reader)
        if getattr(self._local, "reader", None) is reader:
            self._local.reader = None
        reader.close()

    def _close_readers(self) -> None:
        """Close every thread's reader (a thread finds its own closed and opens another)."""
        with self._readers_lock:
            readers = list(self._readers)
            self._readers.clear()
        for reader in readers:
            reader.close()

    def fetch_row(self, name: str, params: dict[str, Any] | None = None) -> tuple:
        """The single row a query always returns (aggregates, scalar functions)."""
        row = self.fetchone(name, params)
        if row is None:
            raise exc.PgragError(f"query {name!r} returned no row")
        return row

    def wait(self, work: Callable[[], T]) -> T:
        """``work()``: a client process is interrupted by its own signals."""
        return work()

    def close(self) -> None:
        self._close_readers()
        self.engine.dispose()

    # -- corpora -----------------------------------------------------------

    def corpus(self, name: str, *, create: bool = True, embedding_model: str | None = None,
               chunking: "ChunkingSettings | None" = None, methods: Sequence[str] = ()) -> "Corpus":
        """The corpus ``name``, created on first use (``create=False`` raises
        ``CorpusNotFound`` instead). ``embedding_model`` applies at creation.
        ``methods`` (e.g. ``["threadrag"]``): enable, and backfill, the method
        families they need that the corpus does not maintain yet (``pgrag.families``)."""
        from .corpus import open_corpus
        from .families import for_methods

        kb = open_corpus(self, name, self.settings, create=create,
                         embedding_model=embedding_model, chunking=chunking)
        for family in for_methods(methods):
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

    def attach(self, corpus: str, source: str, **options: Any) -> int:
        """Make ``corpus`` follow table ``source`` (``"schema.table"``): see
        ``pgrag.follow.attach``. Returns the number of rows enqueued."""
        from . import follow

        return follow.attach(self, corpus, source, **options)

    def detach(self, corpus: str, *, drop_corpus: bool = False) -> None:
        """Stop following (``pgrag.follow.detach``)."""
        from . import follow

        follow.detach(self, corpus, drop_corpus=drop_corpus)

    def sync_status(self, corpus: str | None = None) -> list[Any]:
        """Rows of ``pgrag.sync_status`` (``pgrag.follow.SyncStatus``)."""
        from . import follow

        return follow.sync_status(self, corpus)

    # -- schema ------------------------------------------------------------

    def check_server(self) -> None:
        """Fail early, with a clear message, on a server pgrag cannot use."""
        version, encoding, vector = self.fetch_row("server_facts")
        if not vector:
            raise exc.ExtensionMissing(
                "the pgvector extension ('vector') is not available on this PostgreSQL server; "
                "install pgvector (see docker/README.md) or use the embedded server (unset PGRAG_DSN)")
        if int(version) < MIN_SERVER_VERSION:
            raise exc.UnsupportedServer(
                f"PostgreSQL {int(version) // 10000} is too old: pgrag needs PostgreSQL 17 or newer "
                "(its token pipeline uses the builtin pg_c_utf8 collation)")
        if encoding != "UTF8":
            raise exc.UnsupportedServer(f"database encoding is {encoding}; pgrag needs a UTF8 database")

    def upgrade(self) -> None:
        """Bring the schema to head (idempotent; safe to run concurrently), then
        re-apply the SQL function definitions."""
        self.check_server()
        cfg = Config()
        cfg.set_main_option("script_location", str(resource_dir("migrations")))
        with _translated(), self.engine.begin() as sa_conn:
            raw = sa_conn.connection.driver_connection
            assert isinstance(raw, psycopg.Connection)
            raw.execute(query("migration_lock"), {"key": MIGRATION_LOCK})
            # On Citus (after `pgrag db distribute`) the same migrations run, then
            # tables they added are distributed like the others (pgrag.distribute).
            distributed = citus.is_distributed(raw)
            if distributed:
                citus.prepare(raw)
            cfg.attributes["connection"] = sa_conn
            command.upgrade(cfg, "head")
            sqlscript.run(raw, sql_file("functions.sql"))  # no parameters: % stays literal
            sqlscript.run(raw, sql_file("follow.sql"))
            _install_runtime(raw)
            if distributed:
                citus.after_upgrade(raw)
        # Connections opened before the extension existed lack the vector adapters.
        self.engine.dispose()
        self._close_readers()

    # -- roles and tenant isolation (README "Security and operations") -----------

    def runtime(self) -> tuple[str | None, list[str]]:
        """The in-server runtime's language ('plpython3u', or None where the server has
        none) and the paths its pgrag is imported from (see sql/runtime_plpython.sql)."""
        language, path = self.fetch_row("runtime_facts")
        return language, list(path or [])

    def can_migrate(self) -> bool:
        """Whether the connected role may run migrations: it owns schema pgrag
        (or there is none yet, so it would create it)."""
        _exists, may = self.fetch_row("schema_access")
        return bool(may)

    def check_schema(self) -> None:
        """Raise ``SchemaOutdated`` unless the schema is at this pgrag's head
        revision (the check for roles that read but cannot migrate)."""
        from alembic.script import ScriptDirectory

        cfg = Config()
        cfg.set_main_option("script_location", str(resource_dir("migrations")))
        head = ScriptDirectory.from_config(cfg).get_current_head()
        exists, _may = self.fetch_row("schema_access")
        current = self.fetchone("schema_revision") if exists else None
        if current is None or current[0] != head:
            found = f"at revision {current[0]}" if current else "missing"
            raise exc.SchemaOutdated(
                f"the pgrag schema is {found}, this pgrag needs {head}: "
                "run `pgrag db upgrade` as the role that owns schema pgrag")

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


def _install_runtime(conn: psycopg.Connection) -> None:
    """The in-server runtime (PL/Python) where the server has it and this role may
    create it, else the stand-ins that say what to do; then the SQL entry points."""
    from .config import server_python_path

    installed = False
    if conn.execute(query("has_plpython")).fetchone() == (True,):
        try:
            with conn.transaction():   # a savepoint: a refusal leaves the rest of the upgrade intact
                sqlscript.run(conn, sql_file("runtime_plpython.sql"))
                conn.execute(query("record_python_path"), {"paths": server_python_path()})
            installed = True
        except psycopg.errors.InsufficientPrivilege:
            installed = False   # plpython3u is untrusted: only a superuser creates its functions
    if not installed:
        sqlscript.run(conn, sql_file("runtime_missing.sql"))
    sqlscript.run(conn, sql_file("inserver.sql"))


def _register_vector(dbapi_conn: Any, _record: Any) -> bool:
    """Whether the connection now adapts pgvector's types (False before the first upgrade)."""
    from pgvector.psycopg import register_vector

    try:
        register_vector(dbapi_conn)
    except psycopg.ProgrammingError:
        dbapi_conn.rollback()  # extension not created yet (before the first upgrade)
        return False
    dbapi_conn.commit()
    return True


class _Reader:
    """One thread's connection for statements that stand alone. It closes when
    the thread ends (its thread-local reference is the only strong one)."""

    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn, self.pid = conn, os.getpid()

    def close(self) -> None:
        if self.pid == os.getpid():    # a forked child must not close its parent's socket
            self.conn.close()

    def __del__(self) -> None:
        self.close()


def _alive(conn: psycopg.Connection) -> bool:
    """Whether ``conn`` is still usable, judged without a round trip: an idle
    reader is sent nothing, so a socket with something to read holds the
    server's goodbye (restart, pg_terminate_backend) or its end of file. A
    rare notice read this way costs only a new connection."""
    if conn.closed or conn.broken:
        return False
    poller = select.poll()
    poller.register(conn.fileno(), select.POLLIN | select.POLLPRI)
    return not poller.poll(0)


def open_database(dsn: str, *, embedded: bool = False, migrate: bool = True,
                  settings: Settings | None = None) -> Database:
    """Open ``dsn``, check that it is reachable, and migrate it to head (or, for a
    role that does not own the schema, check that it is at head)."""
    sqlalchemy_url(dsn)  # reject non-URI forms before trying to connect
    try:
        with psycopg.connect(dsn, connect_timeout=10) as probe:
            probe.execute("SELECT 1")
    except psycopg.Error as error:
        raise exc.ConnectionFailed(f"cannot connect to {redact(dsn)}: {str(error).strip()}") from error
    db = Database(dsn, embedded=embedded, settings=settings)
    if migrate:
        # A reader or writer role cannot migrate (DDL needs the owner): it gets a
        # database that is already at head, or a clear SchemaOutdated.
        if db.can_migrate():
            db.upgrade()
        else:
            db.check_schema()
    return db
