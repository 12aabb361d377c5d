"""Personalized PageRank over a token graph: the power iteration (the exact
reference) and local forward push (TIGRAG's default, whose cost follows the
seeds' neighbourhood, not the graph), and the top nodes of a ranking.

Both walk the graph only through TokenGraph's products (``step``, ``spread``,
``neighbours``), so they run the same over a read graph, a mapped one and one
with a delta laid over it (pgrag.index.delta). A sweep over the whole graph
runs on several threads inside ``sweep.pool()`` (pgrag.index.sweep).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from . import sweep
from .graph import TokenGraph


@dataclass(frozen=True)
class PageRank:
    """PPR scores and what computing them took. ``iterations``: power
    iterations, or push rounds (``push_pagerank``). ``residual``: the last L1
    change (power), or the rank mass left unpushed (push). ``work``: edges
    scanned (push only), the counter whose bound does not grow with the graph."""

    scores: np.ndarray
    iterations: int
    residual: float
    work: int = 0


def personalized_pagerank(graph: TokenGraph, seeds: Sequence[int], *, damping: float = 0.5,
                          tolerance: float = 1e-6, max_iterations: int = 100) -> PageRank:
    """PPR with uniform restart over ``seeds`` (node indexes), by power iteration.

    r ← (1 − d)·v + d·(T·r + m·v), where m is the mass on dangling nodes (sent
    back to the seeds, so r stays a distribution). Stops when the L1 change is
    below ``tolerance`` or after ``max_iterations``. In float64 throughout (the
    oracle push is tested against), even over float32 weights."""
    if not 0 <= damping < 1:
        raise ValueError("damping must be in [0, 1)")
    n = graph.nodes
    v = np.zeros(n)
    if n == 0 or not seeds:
        return PageRank(scores=v, iterations=0, residual=0.0)
    v[list(seeds)] = 1.0 / len(set(seeds))
    r = v.copy()
    residual = 0.0
    with sweep.pool():
        for iteration in range(1, max_iterations + 1):
            lost = r[graph.dangling].sum()
            nxt = (1 - damping) * v + damping * (graph.step(r, precise=True) + lost * v)
            residual = float(np.abs(nxt - r).sum())
            r = nxt
            if residual < tolerance:
                return PageRank(scores=r, iterations=iteration, residual=residual)
    return PageRank(scores=r, iterations=max_iterations, residual=residual)


# ε per unit of tolerance (see push_pagerank), measured: at TIGRAG's tolerance
# 1e-4 this gives ε = 1e-8, where the top 20 tokens agree with power iteration
# on 2Wiki for at least 95 % of the questions (scripts/push_ppr_check.py).
PUSH_EPSILON_PER_TOLERANCE = 1e-4
# A push round whose nodes hold at least 1/_SWEEP of the edges pushes
# every node instead (see _push). A sweep also pushes the nodes under the
# threshold, so sweeping sooner leaves less residual and fewer rounds after
# it. 8 rather than 4: on 2Wiki the rounds just under a quarter kept the p95 at
# 34 ms against 7 ms (scripts/push_ppr_check.py). 16 rather than 8: on the 20×
# corpus of `pgrag bench scale`, p50 / p95 15 / 20 ms instead of 18 / 52 and the
# exact top-20 on 17 of 30 questions instead of 9; at 10× the same p50 (8.5-9.2
# against 8.7-8.9 ms) and a p95 of 10-11 instead of 13-14 ms; 2Wiki's TIGRAG ranks
# the same chunks (docs/SCALING.md). 64 gets 26 of 30 at 20×, at a p50 of 22 ms.
_SWEEP = 16
# A push round of more than 1/_SPREAD as many entries as the graph has nodes
# spreads its mass with sparse products (see _push_round), costing the nodes
# once (about 0.2 ms at 127 k) and about 5 ns an entry, against about 15 ns an
# entry gathered. 8 rather than 1: push p50 on the 20× corpus of `pgrag bench
# scale` 11.2 -> 9.8 ms, on 2Wiki 5.6 -> 5.5 ms (probe, both graphs in one process).
_SPREAD = 8


def push_pagerank(graph: TokenGraph, seeds: Sequence[int], *, damping: float = 0.5,
                  tolerance: float = 1e-4, epsilon: float | None = None) -> PageRank:
    """The PPR of ``personalized_pagerank`` (same restart and dangling rule) by
    local forward push (Andersen, Chung and Lang 2006), so that its cost follows
    the seeds' neighbourhood, not the graph.

    Each node holds an estimate p and a residual r (mass not yet spread), r
    starting as the restart vector. Pushing u keeps (1 − d)·r(u) in p(u) and
    adds d·r(u)·T[i, u] to each neighbour's residual; the true PPR is always
    p + PPR(r). Nodes are pushed until r(u) ≤ ε·deg(u) everywhere, with
    ε = ``epsilon``, by default ``tolerance`` × PUSH_EPSILON_PER_TOLERANCE. The
    scores returned are p + r, a distribution. Bounds (the graph is undirected,
    so deg(u)·PPR_u(i) = deg(i)·PPR_i(u)):

    - per node: −d·ε·deg(i) ≤ PPR(i) − score(i) ≤ ε·deg(i);
    - L1: at most 2·d·``residual``, ``residual`` being the mass left in r;
    - work: each push removes more than (1 − d)·ε·deg(u) of a total mass of 1,
      so the pushed nodes' weighted degrees sum to under 1/((1 − d)·ε), and
      ``work`` (edges scanned) stays under _SWEEP/((1 − d)·ε) for weights
      ≥ 1, however large the graph (_SWEEP is 16: see ``_push``).

    ``iterations`` counts push rounds. Dangling nodes are the isolated ones
    (degree 0), which mass reaches only by restart; so isolated seeds get their
    closed-form share and the push runs from the other seeds alone."""
    if not 0 <= damping < 1:
        raise ValueError("damping must be in [0, 1)")
    epsilon = tolerance * PUSH_EPSILON_PER_TOLERANCE if epsilon is None else epsilon
    if not epsilon > 0:
        raise ValueError("tolerance and epsilon must be positive")
    unique = np.unique(np.asarray(seeds, dtype=np.int64))
    if graph.nodes == 0 or len(unique) == 0:
        return PageRank(scores=np.zeros(graph.nodes), iterations=0, residual=0.0)
    isolated = unique[graph.dangling[unique]]
    connected = unique[~graph.dangling[unique]]
    # The exact rule sends an isolated seed's continuing mass d back to the
    # seeds: PPR = (isolated seeds' (1 − d) + push scores) / (|iso|·(1 − d) + |conn|).
    norm = len(isolated) * (1 - damping) + len(connected)
    share = len(connected) / norm
    scores, left, rounds, work = np.zeros(graph.nodes), 0.0, 0, 0
    if len(connected):
        with sweep.pool():
            scores, residual, touched, rounds, work = _push(graph, connected, damping, epsilon)
        scores[touched] += residual[touched]
        scores[touched] *= share
        left = float(residual[touched].sum())
        if graph.extra is not None:
            # A node whose edges a delta cancelled (base w, change -w) has no edge,
            # so no mass, but the two products leave it their rounding (about
            # 1e-11 over float32 weights): it is no score.
            scores[graph.dangling] = 0.0
    scores[isolated] = (1 - damping) / norm
    return PageRank(scores=scores, iterations=rounds, residual=left * share, work=work)


def _push(graph: TokenGraph, seeds: np.ndarray, damping: float,
          epsilon: float) -> tuple[np.ndarray, np.ndarray, np.ndarray | slice, int, int]:
    """Forward push from the non-isolated ``seeds`` (restart uniform over them)
    until r(u) ≤ ε·deg(u): (estimate, residual, the nodes they are non-zero
    on, rounds, edges scanned).

    The dense vectors are allocated once (no per-node work). A round pushes the
    nodes over the threshold, scanning only their edges; when those are at
    least 1/_SWEEP of the graph's, a sparse product is cheaper than gathering,
    and the round pushes every node instead (one power step on the residual:
    Wu et al. 2021, PowerPush). Its cost, all the nodes and edges, is then at
    most _SWEEP times that of the nodes over the threshold, which is why the
    work bound holds; and the nodes touched are then all of them."""
    estimate, residual = np.zeros(graph.nodes), np.zeros(graph.nodes)
    slot = np.empty(graph.nodes, dtype=np.int64)       # scratch for _distinct
    # A node is pushed while r(u) > ε·deg(u); an isolated one never (a delta's
    # cancelled edges can leave it rounding noise, and it has no edge to push along).
    threshold = np.where(graph.dangling, np.inf, epsilon * graph.degree)
    residual[seeds] = 1.0 / len(seeds)
    frontier = seeds[residual[seeds] > threshold[seeds]]
    pushed: list[np.ndarray] = []
    swept = False
    rounds = work = 0
    while len(frontier):
        edges = graph.row_sizes(frontier)
        if _SWEEP * edges >= graph.nnz + graph.nodes:
            estimate += (1 - damping) * residual
            residual[:] = damping * graph.step(residual)
            frontier = np.flatnonzero(residual > threshold)
            swept = True
            work += graph.nnz
        else:
            pushed.append(frontier)
            frontier = _push_round(graph, estimate, residual, frontier, damping, threshold, slot, edges)
            work += edges
        rounds += 1
    touched = slice(None) if swept else _reached(graph, seeds, pushed, slot)
    return estimate, residual, touched, rounds, work


def _reached(graph: TokenGraph, seeds: np.ndarray, pushed: list[np.ndarray], slot: np.ndarray) -> np.ndarray:
    """The seeds and every neighbour of a pushed node: where mass can be. Costs
    the pushed nodes' edges once more, not the graph."""
    nodes = _distinct(np.concatenate(pushed), slot) if pushed else seeds[:0]
    return _distinct(np.concatenate([seeds, graph.neighbours(nodes)[0]]), slot)


def _push_round(graph: TokenGraph, estimate: np.ndarray, residual: np.ndarray, nodes: np.ndarray,
                damping: float, threshold: np.ndarray, slot: np.ndarray, edges: int) -> np.ndarray:
    """Push ``nodes`` (their rows hold ``edges`` entries): keep (1 − d)·r(u),
    add d·r(u)·w_iu / deg(u) to each neighbour's residual; return the nodes now
    over the threshold. The weights are symmetric, so node u's row holds its
    column of T (times deg(u)).

    A round of more than 1/_SPREAD as many entries as the graph has nodes
    spreads the mass with one sparse product over those rows and tests every
    node (both O(entries + nodes), in C), instead of gathering each entry: the
    same sums, in another order.
    Every node over the threshold is in the result either way: a node no edge
    reached kept its residual, which was under the threshold (else it would
    have been pushed)."""
    mass = residual[nodes]
    residual[nodes] = 0.0
    estimate[nodes] += (1 - damping) * mass
    share = damping * mass / graph.degree[nodes]
    if edges * _SPREAD > graph.nodes:
        residual += graph.spread(nodes, share)
        return np.flatnonzero(residual > threshold)
    targets, weights, owner = graph.neighbours(nodes)
    np.add.at(residual, targets, weights * share[owner])
    return _distinct(targets[residual[targets] > threshold[targets]], slot)


def _distinct(nodes: np.ndarray, slot: np.ndarray) -> np.ndarray:
    """``nodes`` without repeats in O(len(nodes)), no sort: each node's last
    position wins in ``slot``, a scratch array indexed by node."""
    positions = np.arange(len(nodes))
    slot[nodes] = positions
    return nodes[slot[nodes] == positions]


def top_nodes(scores: np.ndarray, count: int) -> np.ndarray:
    """Indexes of the ``count`` highest scores, highest first (ties by index)."""
    positive = np.flatnonzero(scores > 0)
    if len(positive) > count:
        part = np.argpartition(-scores[positive], count - 1)[:count]
        positive = positive[part]
    return positive[np.lexsort((positive, -scores[positive]))]
