"""pgrag.filters: a filter means in PostgreSQL what docs/filters.md says it means
(a reference evaluator in Python, written from the docs, against the compiled
path run by the server), hostile keys and values stay data, and each bad filter
gets its error."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.types.json import Jsonb

from pgrag.filters import EXTERNAL_ID, FilterError, compile_filter

KEYS = ["type", "year", "tags", 'q"uote', "back\\slash", "a || b", "$.x"]
SCALARS = st.one_of(st.sampled_from(["film", "series", "", "a\" || true || \"", "1990", "2000-01-01"]),
                    st.integers(1989, 1992), st.sampled_from([1.5, -0.25]), st.booleans(), st.none())


def _keys() -> st.SearchStrategy[str]:
    return st.sampled_from([k for k in KEYS if not k.startswith("$")])


def _metadata() -> st.SearchStrategy[dict[str, Any]]:
    value = st.one_of(SCALARS, st.lists(SCALARS, max_size=3))
    return st.dictionaries(_keys(), value, max_size=4)


def _condition() -> st.SearchStrategy[Any]:
    ranged = st.one_of(st.integers(1989, 1992), st.sampled_from(["1990", "2000-01-01", "m"]))
    ops = st.one_of(
        st.tuples(st.sampled_from(["$eq", "$ne"]), SCALARS),
        st.tuples(st.sampled_from(["$gt", "$gte", "$lt", "$lte"]), ranged),
        st.tuples(st.sampled_from(["$in", "$nin"]), st.lists(SCALARS, max_size=3)),
        st.tuples(st.just("$exists"), st.booleans()))
    return st.one_of(SCALARS, st.lists(ops, min_size=1, max_size=2).map(dict))


def _filters() -> st.SearchStrategy[dict[str, Any]]:
    leaf = st.dictionaries(st.one_of(_keys(), st.just(EXTERNAL_ID)), _condition(), min_size=1, max_size=2)
    return st.recursive(leaf, _combined, max_leaves=5)


def _combined(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(st.lists(children, min_size=1, max_size=3).map(_and),
                     st.lists(children, min_size=1, max_size=3).map(_or), children.map(_not))


def _and(parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"$and": parts}


def _or(parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"$or": parts}


def _not(part: dict[str, Any]) -> dict[str, Any]:
    return {"$not": part}


# -- the reference: docs/filters.md, in Python --------------------------------

def matches(spec: dict[str, Any], doc: dict[str, Any]) -> bool:
    return all(_clause(key, value, doc) for key, value in spec.items())


def _clause(key: str, value: Any, doc: dict[str, Any]) -> bool:
    if key == "$and":
        return all(matches(v, doc) for v in value)
    if key == "$or":
        return any(matches(v, doc) for v in value)
    if key == "$not":
        return not matches(value, doc)
    ops = value if isinstance(value, dict) else {"$eq": value}
    return all(_holds(op, operand, key, doc) for op, operand in ops.items())


def _holds(op: str, operand: Any, key: str, doc: dict[str, Any]) -> bool:
    if op == "$exists":
        return (key in doc) == operand
    # a list value matches where any of its items does; a missing key matches nothing
    items = doc[key] if isinstance(doc.get(key), list) else [doc[key]] if key in doc else []
    if op == "$ne":
        return not _holds("$eq", operand, key, doc)
    if op in ("$in", "$nin"):
        found = any(_holds("$eq", v, key, doc) for v in operand)
        return found if op == "$in" else not found
    return any(_compare(op, item, operand) for item in items)


def _compare(op: str, item: Any, operand: Any) -> bool:
    if op == "$eq":
        return type(item) is type(operand) or _numbers(item, operand) if item == operand else False
    if not (_numbers(item, operand) or (isinstance(item, str) and isinstance(operand, str))):
        return False
    return {"$gt": item > operand, "$gte": item >= operand, "$lt": item < operand, "$lte": item <= operand}[op]


def _numbers(a: Any, b: Any) -> bool:
    return all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, b))


# -- the server ---------------------------------------------------------------

@pytest.fixture(scope="module")
def conn(pg_uri):
    with psycopg.connect(pg_uri, autocommit=True) as c:
        yield c


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=_filters(), metadata=_metadata(), external_id=st.sampled_from(["doc-7", "x\"y"]))
def test_the_server_agrees_with_the_documented_meaning(conn, spec, metadata, external_id):
    compiled = compile_filter(spec)
    assert compiled is not None
    doc = {**metadata, EXTERNAL_ID: external_id}
    got = conn.execute("SELECT (%s::jsonb || jsonb_build_object('$external_id', %s::text)) @@ %s::jsonpath",
                       (Jsonb(metadata), external_id, compiled.path)).fetchone()[0]
    assert bool(got) is matches(spec, doc), compiled.path


DOC = {"type": "film", "year": 1990, "tags": ["war", "drama"], "date": "1990-05-01", "none": None}


@pytest.mark.parametrize(("spec", "expected"), [
    ({"type": "film"}, True), ({"type": "Film"}, False), ({"type": {"$ne": "film"}}, False),
    ({"missing": {"$ne": "film"}}, True), ({"year": "1990"}, False), ({"year": 1990.0}, True),
    ({"year": {"$gte": 1990}}, True), ({"year": {"$gt": 1990}}, False),
    ({"year": {"$lte": 1990}}, True), ({"year": {"$lt": 1990}}, False),
    ({"year": {"$gt": "1000"}}, False),   # a number is not compared with a string
    ({"date": {"$gte": "1990-01-01", "$lt": "1991-01-01"}}, True), ({"date": {"$lt": "1990-05-01"}}, False),
    ({"tags": "war"}, True), ({"tags": {"$in": ["comedy", "drama"]}}, True), ({"tags": {"$nin": ["drama"]}}, False),
    ({"type": {"$in": []}}, False), ({"type": {"$nin": []}}, True),
    ({"none": None}, True), ({"none": {"$exists": True}}, True), ({"missing": {"$exists": False}}, True),
    ({"$external_id": "doc-7"}, True), ({"$external_id": {"$in": ["doc-8"]}}, False),
    ({"$or": [{"type": "series"}, {"year": 1990}]}, True), ({"$and": [{"type": "film"}, {"year": 1991}]}, False),
    ({"$not": {"type": "film"}}, False), ({"type": "film", "year": 1991}, False),
])
def test_each_operator_at_its_boundary(conn, spec, expected):
    assert matches(spec, {**DOC, EXTERNAL_ID: "doc-7"}) is expected   # the reference reads the docs so
    path = compile_filter(spec).path
    got = conn.execute("SELECT (%s::jsonb || jsonb_build_object('$external_id', 'doc-7')) @@ %s::jsonpath",
                       (Jsonb(DOC), path)).fetchone()[0]
    assert got is expected, path


def test_no_filter_is_none():
    assert compile_filter(None) is None and compile_filter({}) is None


@pytest.mark.parametrize(("spec", "message"), [
    ("type = 'film'", "a filter is a JSON object, not a string"),
    ({"type": {"$like": "f%"}}, "unknown filter operator '$like' on 'type'"),
    ({"$where": "1"}, "unknown filter operator '$where' where a key is expected"),
    ({"year": {"$gt": [1990]}}, "$gt on 'year' compares with a number or a string"),
    ({"year": {"$gt": True}}, "$gt on 'year' compares with a number or a string"),
    ({"type": {"$in": "film"}}, "$in on 'type' takes a list of values, not a string"),
    ({"type": {"$exists": "yes"}}, "$exists on 'type' takes true or false, not a string"),
    ({"type": ["film", "series"]}, "for several values use"),
    ({"type": {}}, "the condition on 'type' is an empty object"),
    ({"$or": []}, "$or takes a non-empty list of filters"),
    ({"$and": [{}]}, "each filter in $and, $or and $not is a non-empty JSON object"),
    ({"year": float("nan")}, "not a finite number"),
    ({"": 1}, "a filter key is a metadata key"),
])
def test_each_bad_filter_names_its_problem(spec, message):
    with pytest.raises(FilterError, match=None) as caught:
        compile_filter(spec)
    assert message in str(caught.value)


def test_a_filter_nested_too_deep_is_refused():
    spec: dict[str, Any] = {"type": "film"}
    for _ in range(20):
        spec = {"$not": spec}
    with pytest.raises(FilterError, match="nests at most"):
        compile_filter(spec)
