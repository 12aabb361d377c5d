"""Method families: data that a corpus maintains at ingest only when asked.

A family is the stored data some methods need beyond what every method uses
(chunks, postings, token graph). Today there is one: ``threadrag``, ThreadRAG's
semantic nodes, narrative edges and name vectors (``pgrag.semantic``), which
roughly double an ingest's embedding time. A method names the family it needs
(``MethodSpec.family``; ``pgrag.methods.families_for``). ``pgrag.corpus.families`` lists the families a corpus
maintains; ingest (client, in-server, follow worker) builds a family's rows,
through the hook the family registers (``pgrag.ingest.hooks``), only for the
corpora that list it, and a method whose family is missing refuses to run with
the command that builds it (``MethodNotBuilt``).

Enabling takes the corpus write lock, so every ingest that writes after it sees
the family (``pgrag.ingest.write_prepared`` re-reads it under the same lock) and
the backfill that follows covers every document written before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .exceptions import InputError, MethodNotBuilt
from .queries import query

if TYPE_CHECKING:
    from .context import Context, QueryRunner

FAMILIES = ("threadrag",)


def check(family: str) -> str:
    if family not in FAMILIES:
        raise InputError(f"unknown method family {family!r}; families: {', '.join(FAMILIES)}")
    return family


def current(db: "QueryRunner", corpus_id: int) -> tuple[str, ...]:
    """The families a corpus maintains now, read from the table (not a cached CorpusInfo)."""
    row = db.fetchone("corpus_families", {"corpus_id": corpus_id})
    return tuple(row[0] or ()) if row else ()


def locked_families(conn: Any, corpus_id: int) -> tuple[str, ...]:
    """The families, read in a transaction that holds the corpus write lock."""
    row = conn.execute(query("corpus_families"), {"corpus_id": corpus_id}).fetchone()
    return tuple(row[0] or ()) if row else ()


def missing_message(corpus: str, family: str) -> str:
    # Only threadrag exists; a second family adds its own wording here.
    return (f"corpus {corpus!r} has no ThreadRAG semantic nodes: run `pgrag threadrag-index --corpus {corpus}` "
            f"(or SELECT pgrag.threadrag_index({_sql_literal(corpus)}))")


def _sql_literal(text: str) -> str:
    """For the message only (never run): the name as a SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def require(ctx: "Context", family: str) -> None:
    """Raise ``MethodNotBuilt`` unless the corpus maintains ``family``. The cached
    CorpusInfo may predate an enable by another process, so a miss is re-read."""
    if ctx.info.maintains(family) or family in current(ctx.db, ctx.id):
        return
    raise MethodNotBuilt(missing_message(ctx.name, family))


def enable(db: "QueryRunner", corpus_id: int, family: str) -> tuple[str, ...]:
    """Record that the corpus maintains ``family`` (committed; no backfill)."""
    check(family)
    with db.transaction() as conn:
        conn.execute(query("corpus_write_lock"), {"corpus_id": corpus_id})
        conn.execute(query("add_corpus_family"), {"corpus_id": corpus_id, "family": family})
        return locked_families(conn, corpus_id)


def disable(db: "QueryRunner", corpus_id: int, family: str, *, drop: bool = False) -> int:
    """Stop maintaining ``family``; with ``drop`` also delete its rows (semantic
    nodes and name vectors). Returns the number of semantic nodes dropped."""
    check(family)
    with db.transaction() as conn:
        conn.execute(query("corpus_write_lock"), {"corpus_id": corpus_id})
        conn.execute(query("remove_corpus_family"), {"corpus_id": corpus_id, "family": family})
        if not drop:
            return 0
        conn.execute(query("drop_entity_vectors"), {"corpus_id": corpus_id})
        return int(conn.execute(query("drop_semantic_nodes"), {"corpus_id": corpus_id}).fetchone()[0])
