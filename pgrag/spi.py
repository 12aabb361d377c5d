"""The named queries over SPI: the ``Database`` of code running inside PostgreSQL.

Inside a PL/Python function there is no connection to open: statements run in
the caller's transaction, as the caller's role, through ``plpy``. ``SpiDatabase``
offers what methods use of ``pgrag.db.Connector`` (``fetchall``/``fetchone``/
``fetch_row`` by query name, ``transaction()``), running the very statements of
``sql/queries_*.sql``:

- ``%(name)s`` placeholders become ``$n``; their types are the ones PostgreSQL
  itself infers (``PREPARE`` without types, read back from
  ``pg_prepared_statements``), so no second list of types is kept;
- each plan is prepared once per backend and kept in PL/Python's ``GD``;
- values go in as psycopg would send them (vectors as pgvector text, json as
  text) and rows come back as tuples, vectors as numpy arrays, json decoded.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import numpy as np

from . import bulk
from .queries import query

T = TypeVar("T")
_PLACEHOLDER = re.compile(r"%\((\w+)\)s|%%")
_VECTOR_TYPES = ("vector", "halfvec")


def positional(sql: str) -> tuple[str, list[str]]:
    """psycopg's ``%(name)s`` style as PostgreSQL's ``$n``, with the names in order."""
    names: list[str] = []

    def swap(m: re.Match[str]) -> str:
        if m.group(0) == "%%":
            return "%"
        if m.group(1) not in names:
            names.append(m.group(1))
        return f"${names.index(m.group(1)) + 1}"

    return _PLACEHOLDER.sub(swap, sql), names


class _Plan:
    def __init__(self, plan: Any, names: list[str], types: list[str]) -> None:
        self.plan, self.names, self.types = plan, names, types


class SpiDatabase:
    """Named queries through ``plpy`` in the current transaction."""

    def __init__(self, plpy: Any, cache: dict[str, Any]) -> None:
        self.plpy = plpy
        self._plans: dict[str, _Plan] = cache.setdefault("pgrag.plans", {})
        facts = cache.get("pgrag.facts")
        if facts is None:
            row = plpy.execute("SELECT current_database() AS db, "
                               "to_regtype('vector')::oid AS vector, to_regtype('vector[]')::oid AS vectors, "
                               "to_regtype('halfvec')::oid AS halfvec")[0]
            facts = cache["pgrag.facts"] = {
                "db": row["db"],
                "vector_oids": {o for o in (row["vector"], row["halfvec"]) if o is not None},
                "vector_array_oids": {row["vectors"]} if row["vectors"] is not None else set()}
        self._facts = facts
        # Graph caches key on it, as they key on the DSN in a client process.
        self.dsn = f"spi:{facts['db']}"

    # -- the Database interface ---------------------------------------------------

    def fetchall(self, name: str, params: dict[str, Any] | None = None) -> list[tuple]:
        return self.execute(query(name), params)

    def fetchone(self, name: str, params: dict[str, Any] | None = None) -> tuple | None:
        rows = self.execute(query(name), params)
        return rows[0] if rows else None

    def fetch_row(self, name: str, params: dict[str, Any] | None = None) -> tuple:
        row = self.fetchone(name, params)
        if row is None:
            from .exceptions import PgragError

            raise PgragError(f"query {name!r} returned no row")
        return row

    def wait(self, work: Callable[[], T], poll: float = 0.05) -> T:
        """``work()`` in a thread, while this one runs a trivial statement every
        ``poll`` seconds: PostgreSQL checks for interrupts in each, so a
        ``pg_cancel_backend`` or ``statement_timeout`` during a blocking wait (an
        LLM request) ends the call now, not when the request gives up. The thread
        must not touch ``plpy``; after a cancel it is left to finish on its own
        timeout, its result unused."""
        done: dict[str, Any] = {}

        def run() -> None:
            try:
                done["value"] = work()
            except BaseException as exc:  # handed to the caller's thread below
                done["error"] = exc

        thread = threading.Thread(target=run, name="pgrag-wait", daemon=True)
        thread.start()
        probe = self._plans.get("SELECT 1")
        if probe is None:
            probe = self._plans["SELECT 1"] = _Plan(self.plpy.prepare("SELECT 1"), [], [])
        while thread.is_alive():
            thread.join(poll)
            self.plpy.execute(probe.plan)
        if "error" in done:
            raise done["error"]
        return done["value"]

    @contextlib.contextmanager
    def transaction(self) -> Iterator["SpiConnection"]:
        """A subtransaction of the caller's: all or nothing, like a client transaction."""
        with self.plpy.subtransaction():
            yield SpiConnection(self)

    # -- statements -------------------------------------------------------------

    def execute(self, sql: str, params: dict[str, Any] | None = None) -> list[tuple]:
        plan = self._plan(sql)
        values = [_to_sql(params[n] if params else None, t) for n, t in zip(plan.names, plan.types)]
        result = self.plpy.execute(plan.plan, values) if plan.names else self.plpy.execute(plan.plan)
        if not _has_columns(result):
            return []
        names, types = result.colnames(), result.coltypes()
        if len(set(names)) < len(names):
            # PL/Python hands rows over as dicts: a repeated name would lose a column.
            from .exceptions import PgragError

            raise PgragError(f"a query run in the server repeats a column name ({', '.join(names)}): {sql[:120]}")
        return [tuple(self._from_sql(row[c], t) for c, t in zip(names, types)) for row in result]

    def _plan(self, sql: str) -> _Plan:
        plan = self._plans.get(sql)
        if plan is None:
            text, names = positional(sql)
            types = self._infer_types(text) if names else []
            plan = self._plans[sql] = _Plan(self.plpy.prepare(text, types), names, types)
        return plan

    def _infer_types(self, text: str) -> list[str]:
        """The parameter types PostgreSQL infers for ``text``."""
        self.plpy.execute("PREPARE pgrag_infer AS " + text)
        try:
            row = self.plpy.execute("SELECT parameter_types::text[] AS t FROM pg_prepared_statements "
                                    "WHERE name = 'pgrag_infer'")[0]
        finally:
            self.plpy.execute("DEALLOCATE pgrag_infer")
        return list(row["t"])

    def _from_sql(self, value: Any, oid: int) -> Any:
        if value is None:
            return None
        if oid in self._facts["vector_oids"]:
            return _parse_vector(value)
        if oid in self._facts["vector_array_oids"]:
            return [_parse_vector(v) if v is not None else None for v in value]
        if oid in (114, 3802) and isinstance(value, str):   # json, jsonb
            return json.loads(value)
        return value


class SpiConnection:
    """What ``with db.transaction() as conn`` gives inside the server
    (``pgrag.context.Connection``)."""

    def __init__(self, db: SpiDatabase) -> None:
        self._db = db

    def execute(self, sql: str, params: dict[str, Any] | None = None, *, binary: bool = False) -> "SpiResult":
        """``binary`` (psycopg's wire format for the results) means nothing to SPI, which gives values."""
        return SpiResult(self._db.execute(sql, params))

    def write_rows(self, table: str, rows: Sequence[Sequence[Any]]) -> None:
        bulk.insert_rows(self, table, rows)

    def read_triples(self, name: str, params: dict[str, Any]) -> bulk.Triples:
        return bulk.array_triples(self, name, params)


class SpiResult:
    def __init__(self, rows: list[tuple]) -> None:
        self._rows = rows
        self.rowcount = len(rows)

    def fetchall(self) -> list[tuple]:
        return self._rows

    def fetchone(self) -> tuple | None:
        return self._rows[0] if self._rows else None

    def __iter__(self) -> Iterator[tuple]:
        return iter(self._rows)


def _has_columns(result: Any) -> bool:
    try:
        return bool(result.colnames())
    except Exception:   # plpy raises for a result without columns (a utility statement)
        return False


def _parse_vector(text: str) -> np.ndarray:
    return np.array(json.loads(text), dtype=np.float32)


def vector_text(value: Any) -> str:
    """A vector as pgvector's text form: what SPI passes for a ``vector`` parameter."""
    return "[" + ",".join(repr(float(x)) for x in np.asarray(value, dtype=np.float64).ravel()) + "]"


def _to_sql(value: Any, type_name: str) -> Any:
    """A Python value as PL/Python should pass it for a parameter of ``type_name``."""
    if value is None:
        return None
    base = type_name.removesuffix("[]")
    if base in _VECTOR_TYPES:
        return [vector_text(v) for v in value] if type_name.endswith("[]") else vector_text(value)
    if base in ("json", "jsonb"):   # unwrap psycopg's Jsonb
        if type_name.endswith("[]"):
            return [json.dumps(getattr(v, "obj", v)) for v in value]
        return json.dumps(getattr(value, "obj", value))
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [v.item() if isinstance(v, np.generic) else v for v in value]
    return value
