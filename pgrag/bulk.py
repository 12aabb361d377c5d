"""Many rows into one table: COPY over psycopg, one INSERT ... unnest over SPI.

Ingest writes sentences, chunks, entities, semantic nodes and name vectors in bulk. A client
process streams them with COPY (binary); inside the server (``pgrag.spi``) there
is no COPY, so the same rows go in as one array per column through the named
``bulk_<table>`` query. Both statements live in ``sql/queries.sql``. A semantic
node's row also stores its terms, ``pgrag.tokenize`` of its text: the INSERT applies
the function itself; COPY cannot, so a client asks the server for them first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .queries import query

# Column names and COPY binary types, in the order of each table's rows.
TABLES: dict[str, tuple[tuple[str, str], ...]] = {
    "sentence": (("corpus_id", "int8"), ("document_id", "int8"), ("ordinal", "int4"), ("text", "text"),
                 ("char_start", "int4"), ("char_end", "int4")),
    "chunk": (("corpus_id", "int8"), ("chunk_id", "int8"), ("document_id", "int8"), ("ordinal", "int4"),
              ("first_sentence", "int4"), ("last_sentence", "int4"), ("char_start", "int4"),
              ("char_end", "int4"), ("text", "text"), ("embedding", "vector")),
    "chunk_entity": (("corpus_id", "int8"), ("chunk_id", "int8"), ("entity", "text"), ("label", "text"),
                     ("char_start", "int4"), ("char_end", "int4")),
    "semantic_node": (("corpus_id", "int8"), ("document_id", "int8"), ("ordinal", "int4"),
                      ("first_sentence", "int4"), ("last_sentence", "int4"), ("char_start", "int4"),
                      ("char_end", "int4"), ("text", "text"), ("embedding", "vector")),
    "entity_vector": (("corpus_id", "int8"), ("document_id", "int8"), ("key", "text"), ("sentence", "int4"),
                      ("embedding", "vector")),
}


def write(conn: Any, table: str, rows: Sequence[Sequence[Any]]) -> int:
    """Insert ``rows`` (tuples in ``TABLES[table]`` order) into ``pgrag.<table>``."""
    if not rows:
        return 0
    columns = TABLES[table]
    if hasattr(conn, "cursor"):   # psycopg
        types = [t for _, t in columns]
        if table == "semantic_node":
            rows, types = _with_terms(conn, rows), types + ["text[]"]
        with conn.cursor() as cur, cur.copy(query(f"copy_{table}")) as copy:
            copy.set_types(types)
            for row in rows:
                copy.write_row(row)
    else:                         # SPI: no COPY inside the server
        arrays = [list(col) for col in zip(*rows)]
        conn.execute(query(f"bulk_{table}"), {name: values for (name, _), values in zip(columns, arrays)})
    return len(rows)


def _with_terms(conn: Any, rows: Sequence[Sequence[Any]]) -> list[tuple[Any, ...]]:
    """Semantic node rows with their terms appended, asked of ``pgrag.tokenize`` in
    one round trip. (Sending the rows through the INSERT instead, which tokenizes
    them itself, was measured more than ten times slower than COPY: its arrays of vectors.)"""
    text = [name for name, _ in TABLES["semantic_node"]].index("text")
    terms = conn.execute(query("tokenize_many"), {"texts": [r[text] for r in rows]}).fetchall()
    return [(*row, list(t)) for row, (t,) in zip(rows, terms)]
