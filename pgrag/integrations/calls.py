"""One ``pgrag.retrieve`` call over an application's connection, shared by the
framework retrievers: the call's parameters, the rows, and each row's metadata.

A connection may be a psycopg ``Connection`` or ``ConnectionPool`` (sync), an
``AsyncConnection`` or ``AsyncConnectionPool`` (async). The call runs in a
transaction block of its own: on a connection already in a transaction that is a
savepoint, so pgrag never commits or rolls back the application's work.

Where the method runs (``RetrieveCall.run_in``): ``"server"`` asks SQL's
``pgrag.retrieve`` (the in-server runtime, PL/Python); ``"client"`` runs the same
method in this process through ``pgrag.connect`` on the connection's own
parameters (a managed service has no PL/Python); ``"auto"``, the default, asks
the server and moves to the client for good once the server answers that it has
no runtime (SQLSTATE PR003). Both give the same rows."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, get_args
from urllib.parse import urlencode

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from ..exceptions import InputError
from ..queries import query

if TYPE_CHECKING:
    from ..database import Database

RunIn = Literal["auto", "server", "client"]
RUN_IN: tuple[str, ...] = get_args(RunIn)   # the choices, from the type itself
RUNTIME_MISSING = "PR003"

# The metadata a framework document carries: where the text is (provenance: some
# of pgrag.hit's columns), and how it ranked. ``hop`` is TIGRAG's hop that found
# the chunk (None for the other methods).
PROVENANCE = ("document_id", "external_id", "title", "chunk_id", "chunk_ordinal",
              "first_sentence", "last_sentence", "char_start", "char_end")


@dataclass(frozen=True)
class RetrieveCall:
    """What to ask ``pgrag.retrieve``: the corpus, the method, ``k``, the
    method's options and a metadata filter (docs/filters.md)."""

    corpus: str
    method: str = "tigrag"
    k: int = 5
    options: Mapping[str, Any] = field(default_factory=dict)
    filter: Mapping[str, Any] | None = None
    run_in: RunIn = "auto"

    def __post_init__(self) -> None:
        if self.run_in not in RUN_IN:
            raise InputError(f"run_in is one of {', '.join(RUN_IN)}, not {str(self.run_in)[:40]!r}")

    def params(self, question: str, *, filter: Mapping[str, Any] | None = None) -> dict[str, Any]:
        options = dict(self.options)
        chosen = filter if filter is not None else self.filter
        if chosen is not None:
            options["filter"] = dict(chosen)
        return {"corpus": self.corpus, "question": question, "method": self.method, "k": self.k,
                "options": Jsonb(options)}


def metadata(row: Mapping[str, Any], call: RetrieveCall) -> dict[str, Any]:
    """A hit's provenance and ranking, as a framework document's metadata."""
    details = row.get("details") or {}
    return {**{name: row[name] for name in PROVENANCE}, "rank": row["rank"], "score": float(row["score"]),
            "hop": details.get("hop"), "corpus": call.corpus, "method": call.method}


def rows(connection: Any, call: RetrieveCall, question: str,
         filter: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """The hits of one call, as dicts of pgrag.retrieve's columns, over a sync
    connection or pool: in the server or in this process (``call.run_in``)."""
    if _in_client(connection, call):
        return _client_rows(_conninfo_of(connection), call, question, filter)
    try:
        with _sync(connection) as conn, conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
            cur.execute(query("retrieve_hits"), call.params(question, filter=filter))
            return list(cur.fetchall())
    except psycopg.Error as error:
        if not _moves_to_client(connection, call, error):
            raise
    return _client_rows(_conninfo_of(connection), call, question, filter)


async def arows(connection: Any, call: RetrieveCall, question: str,
                filter: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """``rows`` over an async connection or pool (in this process, the method
    runs in a worker thread)."""
    if not _in_client(connection, call):
        try:
            async with _async(connection) as conn, conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
                await cur.execute(query("retrieve_hits"), call.params(question, filter=filter))
                return list(await cur.fetchall())
        except psycopg.Error as error:
            if not _moves_to_client(connection, call, error):
                raise
    return await asyncio.to_thread(_client_rows, _conninfo_of(connection), call, question, filter)


# Connections and pools whose server answered that it has no runtime: "auto" asks
# it no more. Keyed by id(): the objects are the application's and may not be hashable.
_NO_RUNTIME: set[int] = set()


def _in_client(connection: Any, call: RetrieveCall) -> bool:
    return call.run_in == "client" or (call.run_in == "auto" and id(connection) in _NO_RUNTIME)


def _moves_to_client(connection: Any, call: RetrieveCall, error: psycopg.Error) -> bool:
    if call.run_in == "auto" and error.sqlstate == RUNTIME_MISSING:
        _NO_RUNTIME.add(id(connection))
        return True
    return False


def _client_rows(conninfo: str, call: RetrieveCall, question: str,
                 filter: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The call run by ``kb.retrieve`` in this process: pgrag.retrieve's rows."""
    options = dict(call.options)
    chosen = filter if filter is not None else call.filter
    if chosen is not None:
        options["filter"] = dict(chosen)
    kb = _database(conninfo).corpus(call.corpus, create=False)
    hits = kb.retrieve(question, method=call.method, k=call.k, **options)
    return [hit.row() for hit in hits]


_DATABASES: dict[str, "Database"] = {}
_DATABASES_LOCK = threading.Lock()


def _database(conninfo: str) -> "Database":
    """One pgrag database a connection string, for the life of the process (its
    caches are what make the second call fast)."""
    from .. import connect

    with _DATABASES_LOCK:
        if conninfo not in _DATABASES:
            _DATABASES[conninfo] = connect(conninfo)
        return _DATABASES[conninfo]


def _conninfo_of(connection: Any) -> str:
    """A ``postgresql://`` URI for the server and role of an application's
    connection or pool (every parameter in the query string, so a socket folder
    or a password needs no quoting rules of its own)."""
    if hasattr(connection, "conninfo"):   # a pool: its connection string and keyword arguments
        params = {**psycopg.conninfo.conninfo_to_dict(connection.conninfo), **(connection.kwargs or {})}
    else:
        params = {**connection.info.get_parameters()}
        if connection.info.password:
            params["password"] = connection.info.password
    wanted = {k: str(v) for k, v in params.items() if v is not None and k in _URI_PARAMETERS}
    return "postgresql:///?" + urlencode(sorted(wanted.items()))


# What identifies the server and role; a pool's other settings (autocommit, row
# factories, prepare thresholds) are the application's, not pgrag's.
_URI_PARAMETERS = frozenset({"host", "hostaddr", "port", "dbname", "user", "password", "passfile", "sslmode",
                             "sslrootcert", "sslcert", "sslkey", "options", "application_name",
                             "target_session_attrs", "connect_timeout", "service"})


@contextlib.contextmanager
def _sync(connection: Any) -> Iterator[Any]:
    if hasattr(connection, "getconn"):   # a pool: borrow a connection for the call
        with connection.connection() as conn:
            yield conn
    else:
        yield connection


@contextlib.asynccontextmanager
async def _async(connection: Any) -> AsyncIterator[Any]:
    if hasattr(connection, "getconn"):
        async with connection.connection() as conn:
            yield conn
    else:
        yield connection

