"""Forward-push PPR against the exact power iteration (and a linear solve):
the documented per-node and L1 bounds, the top-γ sets, the dangling rule, and a
work counter that does not grow with parts of the graph the seeds never reach."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

from pgrag.index.graph import TokenGraph, build_graph
from pgrag.index.pagerank import PUSH_EPSILON_PER_TOLERANCE, personalized_pagerank, push_pagerank, top_nodes
from pgrag.methods.tigrag import PRESETS, TigragSettings, _expand
from tests.unit.test_ppr import graph_cases

D = 0.5


def graph(a: np.ndarray, b: np.ndarray, w: np.ndarray, n: int) -> TokenGraph:
    return build_graph(1, np.arange(n, dtype=np.int64), [f"t{i}" for i in range(n)],
                       np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64), np.asarray(w, dtype=float))


def small(edges: list[tuple[int, int, float]], n: int) -> TokenGraph:
    return graph([e[0] for e in edges], [e[1] for e in edges], [e[2] for e in edges], n)


def random_graph(n: int, m: int, seed: int, offset: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """m distinct undirected edges on nodes offset..offset+n-1, weights in [1, 5]."""
    rng = np.random.default_rng(seed)
    a, b = rng.integers(0, n, size=(2, 2 * m))
    keep = a < b
    pairs = np.unique(np.stack([a[keep], b[keep]], axis=1), axis=0)[:m]
    return pairs[:, 0] + offset, pairs[:, 1] + offset, rng.uniform(1.0, 5.0, len(pairs))


def exact(g: TokenGraph, seeds: list[int]) -> np.ndarray:
    return personalized_pagerank(g, seeds, damping=D, tolerance=1e-14, max_iterations=2000).scores


def assert_within_bound(g: TokenGraph, seeds: list[int], epsilon: float) -> None:
    """−d·ε·deg(i) ≤ PPR(i) − score(i) ≤ ε·deg(i), and L1 ≤ 2·d·residual."""
    pr = push_pagerank(g, seeds, damping=D, epsilon=epsilon)
    error = exact(g, seeds) - pr.scores
    slack = 1e-12
    assert (error <= epsilon * g.degree + slack).all()
    assert (error >= -D * epsilon * g.degree - slack).all()
    assert np.abs(error).sum() <= 2 * D * pr.residual + slack
    assert pr.scores.sum() == pytest.approx(1.0)


@pytest.fixture(scope="module")
def big() -> TokenGraph:
    return graph(*random_graph(3000, 15000, seed=7), 3000)


def seed_sets(n: int, count: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [sorted(set(rng.integers(0, n, size=int(rng.integers(1, 8))).tolist())) for _ in range(count)]


@pytest.mark.parametrize("epsilon", [1e-5, 1e-7, 1e-9])
def test_error_within_the_bound_on_a_random_graph(big, epsilon):
    for seeds in seed_sets(big.nodes, 5, seed=1):
        assert_within_bound(big, seeds, epsilon)


def test_top_gamma_agrees_with_power_iteration_at_the_default_tolerance(big):
    for seeds in seed_sets(big.nodes, 20, seed=2):
        power = personalized_pagerank(big, seeds, damping=D, tolerance=1e-4)
        push = push_pagerank(big, seeds, damping=D, tolerance=1e-4)
        assert set(top_nodes(push.scores, 20).tolist()) == set(top_nodes(power.scores, 20).tolist())


def test_default_epsilon_is_the_documented_multiple_of_tolerance(big):
    seeds = [3, 14, 15]
    by_tolerance = push_pagerank(big, seeds, damping=D, tolerance=2e-4)
    by_epsilon = push_pagerank(big, seeds, damping=D, epsilon=2e-4 * PUSH_EPSILON_PER_TOLERANCE)
    assert np.array_equal(by_tolerance.scores, by_epsilon.scores) and by_tolerance.work == by_epsilon.work


def test_hand_made_graphs():
    # two nodes: PPR = [1/(1+d), d/(1+d)]; a star rank flows 3:1 along the weights
    pair = push_pagerank(small([(0, 1, 3.0)], 2), [0], damping=D, epsilon=1e-12)
    assert pair.scores == pytest.approx([1 / (1 + D), D / (1 + D)], abs=1e-9)
    star = small([(0, 1, 3.0), (0, 2, 1.0)], 3)
    pr = push_pagerank(star, [0], damping=D, epsilon=1e-12)
    assert pr.scores[1] == pytest.approx(3 * pr.scores[2])
    path = small([(0, 1, 1.0), (1, 2, 2.0), (2, 3, 1.0), (3, 4, 5.0)], 5)
    for epsilon in (1e-2, 1e-4, 1e-8):
        assert_within_bound(star, [1, 2], epsilon)
        assert_within_bound(path, [0], epsilon)
        assert_within_bound(path, [1, 4], epsilon)


def test_isolated_seed_follows_the_dangling_rule():
    g = small([(0, 1, 1.0), (1, 2, 2.0)], 5)      # nodes 3 and 4 have no edges
    assert g.dangling.tolist() == [False, False, False, True, True]
    alone = push_pagerank(g, [3], damping=D)
    assert alone.scores.tolist() == [0.0, 0.0, 0.0, 1.0, 0.0] and alone.work == 0
    for seeds in ([0, 3], [1, 3, 4], [2, 4, 4]):
        push = push_pagerank(g, seeds, damping=D, epsilon=1e-13)
        assert push.scores == pytest.approx(exact(g, seeds), abs=1e-10)
        assert_within_bound(g, seeds, 1e-3)


def test_seeds_with_no_edges_share_the_rank():
    g = small([(0, 1, 1.0)], 5)
    pr = push_pagerank(g, [2, 3, 4], damping=D)
    assert pr.scores.tolist() == pytest.approx([0, 0, 1 / 3, 1 / 3, 1 / 3])
    assert pr.scores == pytest.approx(exact(g, [2, 3, 4]))
    assert pr.work == 0 and pr.iterations == 0


def test_empty_seeds_empty_graph_and_bad_arguments():
    g = small([(0, 1, 1.0)], 3)
    none = push_pagerank(g, [], damping=D)
    assert none.scores.tolist() == [0.0, 0.0, 0.0] and none.work == 0
    assert push_pagerank(small([], 0), [], damping=D).scores.size == 0
    with pytest.raises(ValueError, match="damping"):
        push_pagerank(g, [0], damping=1.0)
    with pytest.raises(ValueError, match="positive"):
        push_pagerank(g, [0], damping=D, epsilon=0.0)


def ring(n: int, reach: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each node linked to the next ``reach`` around a cycle, weights 1..3."""
    a = np.repeat(np.arange(n), reach)
    b = (a + np.tile(np.arange(1, reach + 1), n)) % n
    return np.minimum(a, b), np.maximum(a, b), 1.0 + (a * 7 + b) % 3


def test_work_does_not_grow_with_a_disconnected_component():
    """A ring of 2000 nodes alone, then with 100 000 more nodes the seeds never
    reach: the same pushes, the same scores, the same work, under the bound."""
    local = ring(2000, 2)
    far = random_graph(100_000, 400_000, seed=3, offset=2000)
    alone = graph(*local, 2000)
    joined = graph(*(np.concatenate(pair) for pair in zip(local, far)), 102_000)
    epsilon = 1e-7
    for seeds in ([0], [5, 900], [10, 11, 1500]):
        a = push_pagerank(alone, seeds, damping=D, epsilon=epsilon)
        b = push_pagerank(joined, seeds, damping=D, epsilon=epsilon)
        assert a.work == b.work > 0 and a.iterations == b.iterations
        assert a.work < 8 / ((1 - D) * epsilon)
        assert np.array_equal(a.scores, b.scores[:2000]) and not b.scores[2000:].any()
        assert np.count_nonzero(a.scores) < 40 * len(seeds)     # a stretch of the ring, not all of it
        assert_within_bound(alone, seeds, epsilon)


def test_work_is_bounded_when_the_push_covers_the_graph(big):
    """Tight ε on the random graph: the rounds turn into whole-graph steps, and
    the work stays under 8/((1 − d)·ε); with a large component added, the same."""
    far = random_graph(60_000, 240_000, seed=4, offset=3000)
    edges = random_graph(3000, 15000, seed=7)
    joined = graph(*(np.concatenate(pair) for pair in zip(edges, far)), 63_000)
    epsilon = 1e-9
    for seeds in seed_sets(3000, 3, seed=5):
        a = push_pagerank(big, seeds, damping=D, epsilon=epsilon)
        b = push_pagerank(joined, seeds, damping=D, epsilon=epsilon)
        assert a.work > big.transition.nnz                 # covered the graph at least once
        assert max(a.work, b.work) < 8 / ((1 - D) * epsilon)
        assert not b.scores[3000:].any()
        assert set(top_nodes(a.scores, 20).tolist()) == set(top_nodes(b.scores, 20).tolist())


@settings(max_examples=40, deadline=None)
@given(graph_cases([1e-2, 1e-4, 1e-7]))
def test_bound_holds_on_any_small_graph(case):
    n, raw, seeds, epsilon = case
    edges = {(min(a, b), max(a, b)): w for a, b, w in raw if a != b}
    g = small([(a, b, float(w)) for (a, b), w in edges.items()], n)
    assert_within_bound(g, seeds, epsilon)


def test_tigrag_setting_chooses_the_ppr(big):
    assert TigragSettings().ppr == "push" and PRESETS["tigrag-paper"].ppr == "push"
    with pytest.raises(ValueError, match="ppr must be"):
        TigragSettings(ppr="exact")
    seeds = [1, 2, 3]
    power_nodes, power_weights, _ = _expand(big, seeds, TigragSettings(ppr="power"))
    exact_pr = personalized_pagerank(big, seeds, damping=0.5, tolerance=1e-4)
    assert power_nodes.tolist() == top_nodes(exact_pr.scores, 20).tolist()
    push_nodes, push_weights, rounds = _expand(big, seeds, TigragSettings())
    assert set(push_nodes.tolist()) == set(power_nodes.tolist()) and rounds > 0
    assert push_weights.sum() == pytest.approx(1.0)
    assert dict(zip(push_nodes.tolist(), push_weights)) == pytest.approx(
        dict(zip(power_nodes.tolist(), power_weights)), abs=1e-4)


def test_a_round_spread_by_sparse_products_equals_one_gathered_entry_by_entry():
    """_push_round's two ways (many entries: one sparse product per matrix and a
    test of every node; few: gather each entry) give the same residuals,
    estimates and next frontier, with a delta's change matrix too."""
    import dataclasses

    import scipy.sparse as sp

    from pgrag.index.graph import edge_matrix
    from pgrag.index.pagerank import _push_round

    n = 300
    base = graph(*random_graph(n, 6000, seed=7), n)              # 40 entries a node: rounds of many entries
    ca, cb, cw = random_graph(n, 200, seed=8)
    extra = edge_matrix(base.token_ids, ca, cb, cw, n)
    g = dataclasses.replace(base, extra=sp.csr_matrix(extra),
                            degree=base.degree + np.asarray(extra.sum(axis=0)).ravel())
    rng = np.random.default_rng(9)
    nodes = rng.choice(n, 60, replace=False)
    threshold = 1e-4 * g.degree
    results = []
    for edges in (g.nodes + 1, 0):                               # spread, then gather
        estimate, residual = np.zeros(n), np.linspace(0, 1e-2, n)
        frontier = _push_round(g, estimate, residual, nodes, D, threshold, np.empty(n, np.int64), edges)
        results.append((estimate, residual, np.sort(frontier)))
    (e1, r1, f1), (e2, r2, f2) = results
    assert np.allclose(e1, e2, rtol=0, atol=1e-15) and np.allclose(r1, r2, rtol=0, atol=1e-15)
    assert np.array_equal(f1, f2) and len(f1) > 0


def test_a_node_whose_edges_a_delta_cancelled_is_never_pushed():
    """After a delete the overlay cancels a node's edges (base w, change -w): its
    degree is 0, but the cancelled sums can leave it rounding noise, e.g.
    (a + b) - a - b. It must not be pushed (no edge to push along, and a
    division by its zero degree gave NaN). A ring elsewhere makes the graph big
    enough for push rounds rather than sweeps."""
    import dataclasses

    import scipy.sparse as sp

    from pgrag.index.graph import edge_matrix

    ring = 200
    a = np.array([0, 1, 0, 1] + [5 + i for i in range(ring)])
    b = np.array([2, 2, 3, 4] + [5 + (i + 1) % ring for i in range(ring)])
    w = np.array([0.1, 0.2, 1.0, 1.0] + [1.0] * ring)
    n = 5 + ring
    base = graph(a, b, w, n)
    cancel = edge_matrix(base.token_ids, a[:2], b[:2], -w[:2], n)      # node 2 loses both its edges
    g = dataclasses.replace(base, extra=sp.csr_matrix(cancel),
                            degree=base.degree + np.asarray(cancel.sum(axis=0)).ravel())
    assert g.degree[2] == 0
    pr = push_pagerank(g, [0, 1], damping=D, epsilon=1e-12)
    assert np.isfinite(pr.scores).all() and pr.scores[2] < 1e-15
    without = graph(np.array([0, 1] + list(a[4:])), np.array([3, 4] + list(b[4:])), np.ones(2 + ring), n)
    assert np.allclose(pr.scores, push_pagerank(without, [0, 1], damping=D, epsilon=1e-12).scores, atol=1e-9)


def test_share_of_the_exact_set_that_the_approximate_one_holds():
    from pgrag.bench.scale import _share

    assert _share([1, 2, 3], [2, 3, 4, 5]) == 0.5
    assert _share([], [1]) == 0.0 and _share([1], []) == 0.0 and _share([], []) == 1.0


def test_seeds_are_the_distinct_known_terms_nodes_in_ascending_order():
    """A query's seeds: unknown terms, repeats and SQL NULLs drop out, order does not matter;
    after a delta, new terms count and gone ones do not."""
    g = small([(0, 1, 1.0), (1, 2, 1.0), (2, 3, 1.0)], 4)
    assert g.index.seeds(["t3", "nosuch", "t1", "t3", None, "t0"]) == [0, 1, 3]
    assert g.index.seeds([]) == [] and g.index.seeds(["nosuch"]) == []
    changed = g.index.changed({"new": 4}, np.array([False, True, False, False, False]))
    assert changed.seeds(["t1", "new", "t2"]) == [2, 4]
