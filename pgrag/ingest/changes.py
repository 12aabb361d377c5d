"""The change check: is a document's content already what the corpus holds?

One rule for every way documents arrive (client ingest, ``pgrag.index`` /
``index_pending``, the follow worker): compare the content hash of the incoming
title and body with the stored row's ``content_hash`` (what the row holds) and
``indexed_hash`` (what its chunks, postings and edges were built from). Only
when both equal it is the document unchanged; metadata may still differ, and is
refreshed without re-indexing.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..context import QueryRunner
from ..queries import query
from ..sources import DocumentIn
from ..text import content_hash


class Change(enum.Enum):
    """What a document needs, against its stored row."""

    NEW = "new"            # no row: insert and index
    CURRENT = "current"    # stored and indexed at this content: metadata only
    REINDEX = "reindex"    # stored at this content, but indexed at another (an edit in the tables)
    CONTENT = "content"    # stored with other content: replace the row and re-index


@dataclass(frozen=True, slots=True)
class Stored:
    """A document's row, as far as the change check reads it."""

    document_id: int
    content_hash: str | None
    indexed_hash: str | None


def change_of(stored: Stored | None, doc: DocumentIn) -> Change:
    """The one change check: what ``doc`` needs, given its stored row (or none)."""
    if stored is None:
        return Change.NEW
    new_hash = content_hash(doc.title, doc.body)
    if stored.content_hash != new_hash:
        return Change.CONTENT
    return Change.CURRENT if stored.indexed_hash == new_hash else Change.REINDEX


def unchanged(states: Mapping[str, Stored], docs: Iterable[DocumentIn]) -> set[str]:
    """External ids of the documents already indexed at their content."""
    return {d.external_id for d in docs if change_of(states.get(d.external_id), d) is Change.CURRENT}


def read_states(db: QueryRunner, corpus_id: int, ids: Sequence[str]) -> dict[str, Stored]:
    """The stored rows of ``ids`` (a statement of its own)."""
    return _by_id(db.fetchall("document_states", {"corpus_id": corpus_id, "ids": list(ids)}))


def states_in(conn: Any, corpus_id: int, ids: Sequence[str], *, for_update: bool = False) -> dict[str, Stored]:
    """The stored rows of ``ids`` in the caller's transaction (``for_update``: locked)."""
    statement = query("document_states_for_update") if for_update else query("document_states")
    return _by_id(conn.execute(statement, {"corpus_id": corpus_id, "ids": list(ids)}))


def _by_id(rows: Iterable[Sequence[Any]]) -> dict[str, Stored]:
    return {ext: Stored(doc_id, content, indexed) for ext, doc_id, content, indexed in rows}
