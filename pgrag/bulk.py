"""Bulk rows in and out: COPY over psycopg, arrays over SPI.

Ingest writes sentences, chunks, entities, semantic nodes and name vectors in bulk. A client
process streams them with COPY (binary); inside the server (``pgrag.spi``) there
is no COPY, so the same rows go in as one array per column through an
``INSERT ... SELECT * FROM unnest(...)``. Both statements are built here from one
column list per table (``TABLES``), so a table's columns are written once. A semantic
node's row also stores its terms, ``pgrag.tokenize`` of its text: the INSERT applies
the function itself; COPY cannot, so a client asks the server for them first.

Reading runs the other way: the token graph's edges and the postings, three
bigint columns each, come out by binary COPY in a client and as three arrays over
SPI. Each connection kind calls its own functions here (``write_rows`` and
``read_triples`` of ``pgrag.db.ClientConnection`` and ``pgrag.spi.SpiConnection``),
so no caller asks which kind it holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

import numpy as np

from .queries import query

# Column names and COPY binary types, in the order of each table's rows: the one
# list both bulk statements of a table are built from. Names come from this code
# only, never from input.
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


# A column the server computes from the row rather than the caller sending it:
# its name, its COPY binary type (a client asks the server for the values first,
# _with_terms) and the INSERT's expression over the unnested row x.
DERIVED: dict[str, tuple[str, str, str]] = {
    "semantic_node": ("terms", "text[]", "pgrag.tokenize(x.text)"),
}

# The SQL spelling of the COPY types, as arrays in the INSERT (int8[] is bigint[]).
_SQL_TYPES = {"int8": "bigint", "int4": "integer"}


@cache
def copy_statement(table: str) -> str:
    """A client's bulk write of ``pgrag.<table>``: one binary COPY."""
    columns = [name for name, _ in TABLES[table]]
    if table in DERIVED:
        columns.append(DERIVED[table][0])
    return f"COPY pgrag.{table} ({', '.join(columns)}) FROM STDIN (FORMAT BINARY)"


@cache
def insert_statement(table: str) -> str:
    """The server's bulk write of ``pgrag.<table>`` (SPI has no COPY): one bound
    array a column, unnested into rows."""
    names = [name for name, _ in TABLES[table]]
    arrays = ", ".join(f"%({name})s::{_SQL_TYPES.get(kind, kind)}[]" for name, kind in TABLES[table])
    if table not in DERIVED:
        return f"INSERT INTO pgrag.{table} ({', '.join(names)}) SELECT * FROM unnest({arrays})"
    column, _kind, expression = DERIVED[table]
    return (f"INSERT INTO pgrag.{table} ({', '.join(names + [column])}) SELECT x.*, {expression} "
            f"FROM unnest({arrays}) AS x({', '.join(names)})")


def write(conn: Any, table: str, rows: Sequence[Sequence[Any]]) -> int:
    """Insert ``rows`` (tuples in ``TABLES[table]`` order) into ``pgrag.<table>``
    through the transaction's connection (``pgrag.context.Connection``)."""
    if not rows:
        return 0
    conn.write_rows(table, rows)
    return len(rows)


def copy_rows(conn: Any, table: str, rows: Sequence[Sequence[Any]]) -> None:
    """A psycopg connection's ``write_rows``: one binary COPY."""
    types = [t for _, t in TABLES[table]]
    if table == "semantic_node":
        rows, types = _with_terms(conn, rows), types + [DERIVED[table][1]]
    with conn.cursor() as cur, cur.copy(copy_statement(table)) as copy:
        copy.set_types(types)
        for row in rows:
            copy.write_row(row)


def insert_rows(conn: Any, table: str, rows: Sequence[Sequence[Any]]) -> None:
    """An SPI connection's ``write_rows``: no COPY inside the server, so one array a
    column through ``insert_statement``'s INSERT ... unnest."""
    arrays = [list(col) for col in zip(*rows)]
    conn.execute(insert_statement(table), {name: values for (name, _), values in zip(TABLES[table], arrays)})


def _with_terms(conn: Any, rows: Sequence[Sequence[Any]]) -> list[tuple[Any, ...]]:
    """Semantic node rows with their terms appended, asked of ``pgrag.tokenize`` in
    one round trip. (Sending the rows through the INSERT instead, which tokenizes
    them itself, was measured more than ten times slower than COPY: its arrays of vectors.)"""
    text = [name for name, _ in TABLES["semantic_node"]].index("text")
    terms = conn.execute(query("tokenize_many"), {"texts": [r[text] for r in rows]}).fetchall()
    return [(*row, list(t)) for row, (t,) in zip(rows, terms)]


Triples = tuple[np.ndarray, np.ndarray, np.ndarray]

# Binary COPY of (bigint, bigint, bigint) rows: a 16-bit field count, then for
# each field a 32-bit length and an 8-byte big-endian value.
_TRIPLE_ROW = np.dtype([("n", ">i2"), ("la", ">i4"), ("a", ">i8"), ("lb", ">i4"), ("b", ">i8"),
                        ("lw", ">i4"), ("w", ">i8")])
_COPY_HEADER = 19  # signature (11) + flags (4) + header extension length (4)


def copy_triples(conn: Any, name: str, params: dict[str, Any]) -> Triples:
    """A psycopg connection's ``read_triples``: the binary COPY ``<name>_copy``."""
    buffer = bytearray()
    with conn.cursor().copy(query(f"{name}_copy"), params) as copy:
        for block in copy:
            buffer += block
    return parse_triples(bytes(buffer))


def array_triples(conn: Any, name: str, params: dict[str, Any]) -> Triples:
    """An SPI connection's ``read_triples``: the three arrays of ``<name>_arrays``."""
    a, b, w = conn.execute(query(f"{name}_arrays"), params).fetchone()
    return np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64), np.asarray(w, dtype=np.float64)


def parse_triples(data: bytes) -> Triples:
    """Three bigint columns of a binary COPY (edges, postings) as int64 arrays (the
    third as float64: edge weights are summed as floats)."""
    if not data:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    body = memoryview(data)[_COPY_HEADER:len(data) - 2]  # trailer: int16 -1
    rows = np.frombuffer(body, dtype=_TRIPLE_ROW)
    return rows["a"].astype(np.int64), rows["b"].astype(np.int64), rows["w"].astype(np.float64)
