"""Many rows into one table: COPY over psycopg, one INSERT ... unnest over SPI.

Ingest writes sentences, chunks, entities, semantic nodes and name vectors in bulk. A client
process streams them with COPY (binary); inside the server (``pgrag.spi``) there
is no COPY, so the same rows go in as one array per column through the named
``bulk_<table>`` query. Both statements live in ``sql/queries.sql``. Semantic nodes
always take the INSERT, which stores each node's terms (``pgrag.tokenize``) with it.
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

# Tables whose INSERT computes a column in SQL (bulk_<table>), which COPY cannot:
# their rows take the INSERT in a client process too.
COMPUTED = frozenset({"semantic_node"})


def write(conn: Any, table: str, rows: Sequence[Sequence[Any]]) -> int:
    """Insert ``rows`` (tuples in ``TABLES[table]`` order) into ``pgrag.<table>``."""
    if not rows:
        return 0
    columns = TABLES[table]
    if hasattr(conn, "cursor") and table not in COMPUTED:   # psycopg
        with conn.cursor() as cur, cur.copy(query(f"copy_{table}")) as copy:
            copy.set_types([t for _, t in columns])
            for row in rows:
                copy.write_row(row)
    else:                         # SPI (no COPY inside the server), or a computed column
        arrays = [list(col) for col in zip(*rows)]
        conn.execute(query(f"bulk_{table}"), {name: values for (name, _), values in zip(columns, arrays)})
    return len(rows)
