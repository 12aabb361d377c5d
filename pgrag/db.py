"""The connector: the only module that creates engines and connections and
translates driver errors. ``Connector`` is the client-process ``QueryRunner``
(``pgrag.context``); ``pgrag.spi.SpiDatabase`` is the other, inside the server.
The schema (migrations, the in-server runtime) is ``pgrag.schema``; what users
call (corpora, attachments, roles) is the façade, ``pgrag.database``."""

from __future__ import annotations

import contextlib
import os
import re
import select
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit

import psycopg
from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from . import bulk
from . import exceptions as exc
from .queries import binary_results, query

T = TypeVar("T")


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
        dsn = dsn.replace(":" + parts.password + "@", ":***@")
    # a password may also travel as a parameter (postgresql:///?password=...)
    return _QUERY_PASSWORD.sub(r"\1***", dsn)


_QUERY_PASSWORD = re.compile(r"([?&]password=)[^&]*")


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
def translated() -> Iterator[None]:
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


class Connector:
    """Named queries and transactions over one PostgreSQL database (an engine for
    transactions, a connection per thread for statements that stand alone)."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.engine: Engine = create_engine(sqlalchemy_url(dsn), pool_pre_ping=True, pool_size=5)
        event.listen(self.engine, "connect", _register_vector)
        self._local = threading.local()        # this thread's _Reader (see _reader)
        self._readers: weakref.WeakSet[_Reader] = weakref.WeakSet()   # every thread's, for close()
        self._readers_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Connector({redact(self.dsn)!r})"

    # -- connections -------------------------------------------------------

    @contextlib.contextmanager
    def transaction(self) -> Iterator["ClientConnection"]:
        """A psycopg connection inside one transaction: committed on success,
        rolled back on any error, which is re-raised as a ``PgragError``."""
        with translated(), self.engine.begin() as sa_conn:
            raw = sa_conn.connection.driver_connection
            assert isinstance(raw, psycopg.Connection)
            yield ClientConnection(raw)

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
        with translated():
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

    def reset(self) -> None:
        """Drop every open connection: after the first upgrade, connections opened
        before the vector extension existed lack its adapters."""
        self.engine.dispose()
        self._close_readers()

    def close(self) -> None:
        self._close_readers()
        self.engine.dispose()


class ClientConnection:
    """What ``with db.transaction() as conn`` gives in a client process
    (``pgrag.context.Connection``): the psycopg connection, whose every attribute
    it passes through, with bulk rows by binary COPY."""

    def __init__(self, raw: psycopg.Connection) -> None:
        self.raw = raw

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)

    def execute(self, sql: Any, params: Any = None, *, binary: bool = False) -> psycopg.Cursor[Any]:
        return self.raw.execute(sql, params, binary=binary)

    def write_rows(self, table: str, rows: Sequence[Sequence[Any]]) -> None:
        bulk.copy_rows(self.raw, table, rows)

    def read_triples(self, name: str, params: dict[str, Any]) -> bulk.Triples:
        return bulk.copy_triples(self.raw, name, params)


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


def connect(dsn: str) -> Connector:
    """A connector for ``dsn``, after checking that the server answers (a clear
    ``ConnectionFailed`` naming the redacted DSN otherwise)."""
    sqlalchemy_url(dsn)  # reject non-URI forms before trying to connect
    try:
        with psycopg.connect(dsn, connect_timeout=10) as probe:
            probe.execute("SELECT 1")
    except psycopg.Error as error:
        raise exc.ConnectionFailed(f"cannot connect to {redact(dsn)}: {str(error).strip()}") from error
    return Connector(dsn)
