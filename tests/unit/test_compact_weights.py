"""float32 edge weights (pgrag.index.graph.compact_weights): chosen only when exact
and the graph is large, and PPR over them close to PPR over float64 (push
within rounding of 1e-7 per score, the power iteration equal)."""

from __future__ import annotations

import dataclasses

import numpy as np
import scipy.sparse as sp

from pgrag.index.graph import COMPACT_MIN_ENTRIES, FLOAT32_EXACT, TokenGraph, build_graph, edge_matrix, widened
from pgrag.index.pagerank import personalized_pagerank, push_pagerank, top_nodes

D = 0.5


def counts(n: int, m: int, seed: int, top: float = 40.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """m distinct undirected edges with whole-number weights in [1, top], a few
    nodes much heavier (hubs, as common tokens are)."""
    rng = np.random.default_rng(seed)
    a = np.minimum(rng.integers(0, n, 3 * m), rng.zipf(1.5, 3 * m) % n)
    b = rng.integers(0, n, 3 * m)
    keep = a != b
    pairs = np.unique(np.sort(np.stack([a[keep], b[keep]], axis=1), axis=1), axis=0)[:m]
    return pairs[:, 0], pairs[:, 1], np.rint(rng.uniform(1.0, top, len(pairs)))


def build(a: np.ndarray, b: np.ndarray, w: np.ndarray, n: int) -> TokenGraph:
    return build_graph(1, np.arange(n, dtype=np.int64), [f"t{i}" for i in range(n)], a, b, w)


def as_float64(g: TokenGraph) -> TokenGraph:
    """The same graph with its weights in float64 (what compact_weights was given)."""
    return dataclasses.replace(g, weights=widened(g.weights))


N = 8000
EDGES = counts(N, 60_000, seed=11)


def test_counts_of_a_large_graph_are_stored_as_float32():
    g = build(*EDGES, N)
    assert g.weights.nnz >= COMPACT_MIN_ENTRIES
    assert g.weights.dtype == np.float32
    assert np.array_equal(g.weights.data.astype(np.float64), as_float64(g).weights.data)
    assert g.degree.dtype == np.float64


def test_weights_float32_cannot_hold_keep_float64():
    a, b, w = EDGES
    assert build(a, b, w + 0.5, N).weights.dtype == np.float64              # not whole numbers
    big = w.copy()
    big[0] = FLOAT32_EXACT + 1
    assert build(a, b, big, N).weights.dtype == np.float64                  # past 2**24
    few = COMPACT_MIN_ENTRIES // 4
    assert build(a[:few], b[:few], w[:few], N).weights.dtype == np.float64  # small: nothing to gain


def seed_sets(count: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [sorted(set(rng.integers(0, N, size=int(rng.integers(1, 8))).tolist())) for _ in range(count)]


def test_power_iteration_over_float32_weights_is_float64_precise():
    g = build(*EDGES, N)
    ref = as_float64(g)
    for seeds in seed_sets(3, seed=1):
        a = personalized_pagerank(g, seeds, damping=D, tolerance=1e-12)
        b = personalized_pagerank(ref, seeds, damping=D, tolerance=1e-12)
        assert a.iterations == b.iterations
        assert np.abs(a.scores - b.scores).max() < 1e-15


def test_push_over_float32_weights_stays_within_rounding_of_float64():
    """Scores within 1e-7 of float64's (3e-8 at most measured here; L1 under
    1e-6, 1.1e-7 measured), the same top 20 tokens, and the documented bound
    against the exact PPR, give or take as much."""
    g = build(*EDGES, N)
    ref = as_float64(g)
    for seeds in seed_sets(10, seed=2):
        a = push_pagerank(g, seeds, damping=D, tolerance=1e-4)
        b = push_pagerank(ref, seeds, damping=D, tolerance=1e-4)
        assert a.work > g.nnz                                      # a sweep ran: the float32 product was used
        assert np.abs(a.scores - b.scores).max() < 1e-7 and np.abs(a.scores - b.scores).sum() < 1e-6
        assert set(top_nodes(a.scores, 20).tolist()) == set(top_nodes(b.scores, 20).tolist())
        exact = personalized_pagerank(ref, seeds, damping=D, tolerance=1e-13, max_iterations=500).scores
        epsilon = 1e-4 * 1e-4
        error = exact - a.scores
        slack = 1e-7
        assert (error <= epsilon * g.degree + slack).all() and (error >= -D * epsilon * g.degree - slack).all()


def test_a_delta_over_float32_weights():
    """A delta's change matrix (float64) over a float32 base: the same PPR as
    the graph built with the change folded in."""
    a, b, w = EDGES
    g = build(a, b, w, N)
    ca, cb, cw = counts(N, 300, seed=5, top=3.0)
    change = edge_matrix(g.token_ids, ca, cb, cw, N)
    over = dataclasses.replace(g, extra=sp.csr_matrix(change),
                               degree=g.degree + np.asarray(change.sum(axis=0)).ravel())
    whole = build(np.concatenate([a, ca]), np.concatenate([b, cb]), np.concatenate([w, cw]), N)
    assert whole.weights.dtype == np.float32
    for seeds in seed_sets(5, seed=3):
        x = push_pagerank(over, seeds, damping=D, tolerance=1e-4).scores
        y = push_pagerank(whole, seeds, damping=D, tolerance=1e-4).scores
        assert np.abs(x - y).max() < 1e-7
        p = personalized_pagerank(over, seeds, damping=D, tolerance=1e-12).scores
        q = personalized_pagerank(whole, seeds, damping=D, tolerance=1e-12).scores
        assert np.abs(p - q).max() < 1e-12


def test_widened_undoes_compact_weights_and_shares_the_index_arrays():
    g = build(*EDGES, N)
    wide = widened(g.weights)
    assert wide.dtype == np.float64
    assert np.shares_memory(wide.indices, g.weights.indices)
    assert np.array_equal(wide.data, g.weights.data.astype(np.float64))
    assert widened(wide) is wide
