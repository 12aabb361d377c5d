"""One ``pgrag.retrieve`` call over an application's connection, shared by the
framework retrievers: the call's parameters, the rows, and each row's metadata.

A connection may be a psycopg ``Connection`` or ``ConnectionPool`` (sync), an
``AsyncConnection`` or ``AsyncConnectionPool`` (async). The call runs in a
transaction block of its own: on a connection already in a transaction that is a
savepoint, so pgrag never commits or rolls back the application's work."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from ..queries import query

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
    connection or pool."""
    with _sync(connection) as conn, conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        cur.execute(query("retrieve_hits"), call.params(question, filter=filter))
        return list(cur.fetchall())


async def arows(connection: Any, call: RetrieveCall, question: str,
                filter: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """``rows`` over an async connection or pool."""
    async with _async(connection) as conn, conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(query("retrieve_hits"), call.params(question, filter=filter))
        return list(await cur.fetchall())


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

