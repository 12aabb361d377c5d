"""A filter's limits (pgrag.filters, docs/filters.md), checked before the part
they limit is read further: no filter exhausts Python's stack or PostgreSQL's
jsonpath stack, and no message repeats a huge key."""

from __future__ import annotations

from typing import Any

import pytest

from pgrag.filters import MAX_CONDITIONS, MAX_DEPTH, MAX_VALUES, FilterError, compile_filter

BIG = "k" * 10_000_000


def nested(levels: int, operator: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"type": "film"}
    for _ in range(levels):
        spec = {operator: [spec, {"year": 1990}]} if operator in ("$and", "$or") else {operator: spec}
    return spec


def refused(spec: Any) -> str:
    with pytest.raises(FilterError) as caught:
        compile_filter(spec)
    message = str(caught.value)
    assert len(message) < 300, message[:400]
    return message


def jsonpath_depth(path: str) -> int:
    """How deep PostgreSQL's jsonpath evaluation recurses over ``path``'s && and
    ||: a group "(a && b && c)" is a chain, one level an operator, nested in the
    levels of the groups around it."""
    chains = [0]            # operators met so far in each open group
    deepest = 0
    depths = [0]            # the depth each open group starts at
    i = 0
    while i < len(path):
        if path[i] == "(":
            depths.append(depths[-1] + chains[-1] + 1)
            chains.append(0)
        elif path[i] == ")":
            deepest = max(deepest, depths.pop() + chains.pop())
        elif path.startswith((" && ", " || "), i):
            chains[-1] += 1
        i += 1
    return deepest


@pytest.mark.parametrize("operator", ["$and", "$or", "$not"])
@pytest.mark.parametrize("levels", [MAX_DEPTH + 1, 1_000, 100_000])
def test_deep_nesting_is_the_filters_depth_error_not_a_recursion_error(operator, levels):
    assert refused(nested(levels, operator)) == f"a filter nests at most {MAX_DEPTH} levels deep"


def test_the_deepest_filter_allowed_compiles():
    assert compile_filter(nested(MAX_DEPTH, "$not")) is not None


@pytest.mark.parametrize("operator", ["$and", "$or"])
def test_every_condition_counts_exists_too(operator):
    def exists(n: int) -> dict[str, Any]:
        return {operator: [{f"k{i}": {"$exists": True}} for i in range(n)]}

    assert compile_filter(exists(MAX_CONDITIONS)) is not None
    assert refused(exists(MAX_CONDITIONS + 1)) == f"a filter has at most {MAX_CONDITIONS:,} conditions"
    assert refused(exists(20_000)) == f"a filter has at most {MAX_CONDITIONS:,} conditions"
    mixed = {operator: [{"k": {"$in": list(range(MAX_CONDITIONS // 2))}},
                        *exists(MAX_CONDITIONS // 2 + 1)[operator]]}
    assert "conditions" in refused(mixed)


def test_in_takes_at_most_max_values():
    assert compile_filter({"k": {"$in": list(range(MAX_VALUES))}}) is not None
    assert f"takes at most {MAX_VALUES:,} values" in refused({"k": {"$nin": list(range(MAX_VALUES + 1))}})


def test_many_conditions_make_a_shallow_path():
    """PostgreSQL evaluates a jsonpath's && and || one stack frame a level: a
    chain of 10,060 conditions ran out of stack (54001), a balanced tree of them
    is log2 deep."""
    for spec in ({"$and": [{f"k{i}": {"$exists": True}} for i in range(MAX_CONDITIONS)]},
                 {"k": {"$in": list(range(MAX_VALUES))}},
                 {f"k{i}": i for i in range(MAX_CONDITIONS)}):
        checked = compile_filter(spec)
        assert checked is not None and jsonpath_depth(checked.path) <= 50


def test_the_same_filter_keeps_the_same_documents_shape():
    # Three conditions: a balanced pair inside a pair, the same predicate as the chain.
    checked = compile_filter({"a": 1, "b": 2, "c": 3})
    assert checked is not None
    assert checked.path == ('(exists($."a" ? (@ == 1)) && (exists($."b" ? (@ == 2)) && exists($."c" ? (@ == 3))))')


@pytest.mark.parametrize("spec", [
    {BIG: 1}, {"type": {BIG: 1}}, {"$" + BIG: 1}, {BIG: {}},
])
def test_a_huge_key_is_not_repeated_whole(spec):
    message = refused(spec)
    assert "kkkk…'" in message and len(message) < 300
