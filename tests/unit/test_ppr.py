"""Personalized PageRank on small graphs with known answers."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pgrag.index.graph import build_graph
from pgrag.index.pagerank import personalized_pagerank, top_nodes


def graph(edges: list[tuple[int, int, float]], n: int):
    a = np.array([e[0] for e in edges], dtype=np.int64)
    b = np.array([e[1] for e in edges], dtype=np.int64)
    w = np.array([e[2] for e in edges], dtype=float)
    return build_graph(1, np.arange(n, dtype=np.int64), [f"t{i}" for i in range(n)], a, b, w)


def exact(g, seeds: list[int], d: float) -> np.ndarray:
    """Solve r = (1-d) v + d (T r + (dangling . r) v) directly."""
    n = g.nodes
    v = np.zeros(n)
    v[seeds] = 1 / len(seeds)
    T = g.transition.toarray()
    A = np.eye(n) - d * T - d * np.outer(v, g.dangling.astype(float))
    return np.linalg.solve(A, (1 - d) * v)


@pytest.mark.parametrize("d", [0.15, 0.5, 0.85])
def test_two_nodes_by_hand(d):
    # r0 = (1-d) + d r1 and r1 = d r0  =>  r0 = 1/(1+d), r1 = d/(1+d)
    pr = personalized_pagerank(graph([(0, 1, 3.0)], 2), [0], damping=d, tolerance=1e-12, max_iterations=1000)
    assert pr.scores == pytest.approx([1 / (1 + d), d / (1 + d)], abs=1e-9)
    assert pr.residual < 1e-12


def test_weights_steer_the_walk():
    # a star: node 0 linked to 1 (weight 3) and 2 (weight 1); rank flows 3:1
    pr = personalized_pagerank(graph([(0, 1, 3.0), (0, 2, 1.0)], 3), [0], damping=0.5, tolerance=1e-12)
    assert pr.scores[1] == pytest.approx(3 * pr.scores[2])
    assert pr.scores.sum() == pytest.approx(1.0)


def test_dangling_seed_keeps_its_mass_and_matches_the_exact_solution():
    g = graph([(0, 1, 1.0), (1, 2, 2.0)], 4)   # node 3 has no edges
    assert g.dangling.tolist() == [False, False, False, True]
    pr = personalized_pagerank(g, [0, 3], damping=0.5, tolerance=1e-12)
    assert pr.scores == pytest.approx(exact(g, [0, 3], 0.5), abs=1e-9)
    assert pr.scores.sum() == pytest.approx(1.0)
    alone = personalized_pagerank(g, [3], damping=0.5)
    assert alone.scores.tolist() == [0.0, 0.0, 0.0, 1.0]


def test_iteration_cap_and_no_seeds():
    g = graph([(0, 1, 1.0), (1, 2, 1.0)], 3)
    capped = personalized_pagerank(g, [0], damping=0.85, tolerance=0.0, max_iterations=3)
    assert capped.iterations == 3 and capped.residual > 0
    assert personalized_pagerank(g, [], damping=0.5).scores.sum() == 0
    with pytest.raises(ValueError):
        personalized_pagerank(g, [0], damping=1.0)


def graph_cases(parameters: list[float]) -> st.SearchStrategy:
    """(nodes, raw edges, seeds, one of ``parameters``) of small graphs (named
    functions, not a lambda: hypothesis parses a lambda's source to describe it)."""
    return st.integers(2, 9).flatmap(functools.partial(_graph_case, parameters=parameters))


def _graph_case(n: int, parameters: list[float]) -> st.SearchStrategy:
    return st.tuples(
        st.just(n),
        st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1), st.integers(1, 5)), max_size=20),
        st.lists(st.integers(0, n - 1), min_size=1, max_size=3),
        st.sampled_from(parameters))


@settings(max_examples=40, deadline=None)
@given(graph_cases([0.3, 0.5, 0.85]))
def test_power_iteration_matches_the_linear_solve(case):
    n, raw, seeds, d = case
    edges = {(min(a, b), max(a, b)): w for a, b, w in raw if a != b}
    g = graph([(a, b, float(w)) for (a, b), w in edges.items()], n)
    pr = personalized_pagerank(g, seeds, damping=d, tolerance=1e-13, max_iterations=1000)
    assert pr.scores == pytest.approx(exact(g, sorted(set(seeds)), d), abs=1e-9)


def test_top_nodes_orders_by_score_then_index():
    scores = np.array([0.1, 0.3, 0.0, 0.3, 0.2])
    assert top_nodes(scores, 3).tolist() == [1, 3, 4]
    assert top_nodes(scores, 10).tolist() == [1, 3, 4, 0]   # zeros never returned
