"""Metadata filters: which documents a retrieval may use.

A filter is data (JSON), never SQL text, in the shape LangChain's PGVector
takes (docs/filters.md)::

    {"type": "film", "year": {"$gte": 1990, "$lt": 2000}}
    {"$or": [{"type": {"$in": ["film", "series"]}}, {"$external_id": {"$in": ["doc-7"]}}]}

A key is a top-level key of a document's ``metadata`` (or ``$external_id``, the
application's id of the document); its condition is a value (equality) or an
object of operators, all of which must hold. ``$and``/``$or`` take a list of
filters, ``$not`` one. Ranges compare numbers with numbers and strings with
strings (ISO dates compare in date order).

``compile_filter`` checks a filter and turns it into a SQL/JSON path predicate
over ``metadata || {"$external_id": external_id}`` (the expression a GIN index
covers): keys and values are written as JSON string and number literals, so no
input can change the predicate's structure, and the path goes to PostgreSQL as
a bound parameter. Methods then rank only inside the documents it selects
(``Scope``), so nothing outside the filter is a candidate, a seed or a hop.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .exceptions import InputError, quoted

if TYPE_CHECKING:
    from .context import QueryRunner

EXTERNAL_ID = "$external_id"
_COMPARE = {"$eq": "==", "$ne": "!=", "$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}
_OPERATORS = (*_COMPARE, "$in", "$nin", "$exists")
# The limits of a filter (docs/filters.md). Each is checked before the part it
# limits is read further, so that no filter can exhaust Python's stack or
# PostgreSQL's: nesting before descending, conditions as they are counted.
MAX_DEPTH = 16            # levels of $and, $or and $not
MAX_CONDITIONS = 10_000   # comparisons and $exists in one filter, each value of an $in or $nin one
MAX_VALUES = MAX_CONDITIONS   # values in one $in or $nin
MAX_KEY = 200             # characters in a metadata key


class FilterError(InputError):
    """A filter that is not one: an unknown operator, a value of the wrong type."""


@dataclass(frozen=True)
class Filter:
    """A checked filter: the caller's JSON and its path predicate."""

    spec: Mapping[str, Any]
    path: str


def compile_filter(spec: Any) -> Filter | None:
    """The checked filter, or None for no filter (None or ``{}``); a
    ``FilterError`` naming the problem for a bad one."""
    if spec is None:
        return None
    if not isinstance(spec, Mapping):
        raise FilterError(f"a filter is a JSON object, not {_kind(spec)}")
    if not spec:
        return None
    counter = [0]
    return Filter(spec=spec, path=_all(spec, 0, counter))


def _all(spec: Any, depth: int, counter: list[int]) -> str:
    if not isinstance(spec, Mapping) or not spec:
        raise FilterError(f"each filter in $and, $or and $not is a non-empty JSON object, not {_kind(spec)}")
    if depth > MAX_DEPTH:
        raise FilterError(f"a filter nests at most {MAX_DEPTH} levels deep")
    return _joined([_clause(key, value, depth, counter) for key, value in spec.items()], "&&")


def _clause(key: Any, value: Any, depth: int, counter: list[int]) -> str:
    if key in ("$and", "$or"):
        if not isinstance(value, list) or not value:
            raise FilterError(f"{key} takes a non-empty list of filters, not {_kind(value)}")
        return _joined([_all(v, depth + 1, counter) for v in value], "&&" if key == "$and" else "||")
    if key == "$not":
        return f"!({_all(value, depth + 1, counter)})"
    if not isinstance(key, str) or not key or len(key) > MAX_KEY or "\x00" in key:
        raise FilterError(f"a filter key is a metadata key of 1 to {MAX_KEY} characters, "
                          f"not {quoted(key) if isinstance(key, str) else _kind(key)}")
    if key.startswith("$") and key != EXTERNAL_ID:
        raise FilterError(f"unknown filter operator {quoted(key)} where a key is expected "
                          f"(keys: metadata keys, {EXTERNAL_ID}; operators there: $and, $or, $not)")
    field = "$." + _string(key)
    if not isinstance(value, Mapping):
        return _compare(field, "$eq", value, key, counter)
    if not value:
        raise FilterError(f"the condition on {quoted(key)} is an empty object")
    return _joined([_condition(field, op, operand, key, counter) for op, operand in value.items()], "&&")


def _condition(field: str, op: Any, operand: Any, key: str, counter: list[int]) -> str:
    if op in _COMPARE:
        return _compare(field, op, operand, key, counter)
    if op in ("$in", "$nin"):
        if not isinstance(operand, list):
            raise FilterError(f"{op} on {quoted(key)} takes a list of values, not {_kind(operand)}")
        if len(operand) > MAX_VALUES:
            raise FilterError(f"{op} on {quoted(key)} takes at most {MAX_VALUES:,} values")
        if not operand:
            _counted(counter)
            return "1 == 0" if op == "$in" else "1 == 1"
        anyof = _any(field, _joined([_test("$eq", v, key, counter) for v in operand], "||"))
        return anyof if op == "$in" else f"!{anyof}"
    if op == "$exists":
        if not isinstance(operand, bool):
            raise FilterError(f"$exists on {quoted(key)} takes true or false, not {_kind(operand)}")
        _counted(counter)
        return f"exists({field})" if operand else f"!exists({field})"
    raise FilterError(f"unknown filter operator {quoted(str(op))} on {quoted(key)}; operators: {', '.join(_OPERATORS)}")


def _compare(field: str, op: str, value: Any, key: str, counter: list[int]) -> str:
    if op == "$ne":   # true where the key is missing too, as in LangChain's and MongoDB's $ne
        return "!" + _any(field, _test("$eq", value, key, counter))
    return _any(field, _test(op, value, key, counter))


def _any(field: str, test: str) -> str:
    # exists(... ? (...)) is true or false, never unknown: a comparison of a number
    # with a string is unknown in SQL/JSON paths, and "!" of unknown stays unknown.
    # Over a list value the test holds where any of its items passes it.
    return f"exists({field} ? ({test}))"


def _test(op: str, value: Any, key: str, counter: list[int]) -> str:
    _counted(counter)
    if op not in ("$eq", "$ne") and (isinstance(value, bool) or not isinstance(value, (int, float, str))):
        raise FilterError(f"{op} on {quoted(key)} compares with a number or a string (an ISO date), not {_kind(value)}")
    return f"@ {_COMPARE[op]} {_literal(value, key)}"


def _literal(value: Any, key: str) -> str:
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise FilterError(f"the value for {quoted(key)} is not a finite number")
        return repr(value)
    if isinstance(value, str):
        if "\x00" in value:
            raise FilterError(f"the value for {quoted(key)} contains a NUL character")
        return _string(value)
    raise FilterError(f"the value for {quoted(key)} is a string, a number, true, false or null, not {_kind(value)} "
                      f"(for several values use {{\"$in\": [...]}})")


def _string(text: str) -> str:
    # A JSON string literal is a SQL/JSON path string literal: '"' and '\' are
    # escaped, so the text cannot end the literal.
    return json.dumps(text, ensure_ascii=False)


def _counted(counter: list[int]) -> None:
    counter[0] += 1
    if counter[0] > MAX_CONDITIONS:
        raise FilterError(f"a filter has at most {MAX_CONDITIONS:,} conditions")


def _joined(parts: list[str], op: str) -> str:
    # A balanced tree, not a chain: PostgreSQL's jsonpath reads "a && b && c" as
    # ((a && b) && c) and evaluates it one stack frame a condition, and a chain of
    # about 10,060 ran out of stack (SQLSTATE 54001, docs/filters.md); balanced, the
    # depth is log2 of their number.
    if len(parts) == 1:
        return parts[0]
    half = len(parts) // 2
    return f"({_joined(parts[:half], op)} {op} {_joined(parts[half:], op)})"


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__)


@dataclass(frozen=True)
class Scope:
    """The documents of one corpus that a filter allows, for one retrieval."""

    filter: Filter
    documents: np.ndarray    # document ids, ascending

    def allows(self, document_id: int) -> bool:
        at = int(np.searchsorted(self.documents, document_id))
        return at < len(self.documents) and int(self.documents[at]) == document_id


def scope(db: "QueryRunner", corpus_id: int, checked: Filter) -> Scope:
    """The documents of the corpus that the filter allows."""
    rows = db.fetchall("filter_documents", {"corpus_id": corpus_id, "path": checked.path})
    return Scope(filter=checked, documents=np.fromiter((r[0] for r in rows), np.int64, len(rows)))
