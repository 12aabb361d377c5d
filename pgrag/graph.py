"""The token co-occurrence graph as a scipy sparse matrix, and Personalized PageRank.

The graph lives in ``pgrag.token_edge``; queries need it as a matrix. Loading it
is the expensive part (a binary COPY of every edge), so the matrix is cached per
database and corpus in this process and tagged with the corpus's graph version:
any ingest or delete bumps the version, and the next query either lays the
change over the cached matrix (pgrag.postings.advance) or reads it again.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from . import sweep
from .queries import query

if TYPE_CHECKING:
    from .context import QueryRunner



class Terms:
    """Node index -> term, over one fixed-width UTF-8 array (``S<width>``), so
    that a memory-mapped graph needs no per-process copy of its vocabulary."""

    def __init__(self, by_node: np.ndarray) -> None:
        self.by_node = by_node

    @classmethod
    def of(cls, terms: Sequence[str]) -> "Terms":
        encoded = [t.encode() for t in terms]
        width = max((len(e) for e in encoded), default=1) or 1
        return cls(np.array(encoded, dtype=f"S{width}") if encoded else np.zeros(0, dtype="S1"))

    def extended(self, terms: Sequence[str]) -> "Terms":
        """These terms followed by ``terms`` (new tokens get the next node indexes)."""
        encoded = [t.encode() for t in terms]
        width = max([self.by_node.dtype.itemsize, *(len(e) for e in encoded)])
        return Terms(np.concatenate([self.by_node.astype(f"S{width}"), np.array(encoded, dtype=f"S{width}")]))

    def __len__(self) -> int:
        return len(self.by_node)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Terms) and np.array_equal(self.by_node, other.by_node)

    __hash__ = None  # type: ignore[assignment]  # mutable-array contents: equal by value, not hashable

    def __getitem__(self, i: int) -> str:
        return bytes(self.by_node[i]).decode()


class TermIndex:
    """Term -> node index by binary search over the terms in byte order (the
    sorted array and its node order, both mappable). After a delta, ``added``
    holds the terms of the new nodes and ``gone`` marks the nodes whose tokens
    left the vocabulary (a mapped base is never rebuilt for a small change)."""

    def __init__(self, sorted_terms: np.ndarray, order: np.ndarray, added: dict[str, int] | None = None,
                 gone: np.ndarray | None = None) -> None:
        self.sorted_terms, self.order = sorted_terms, order
        self.added, self.gone = added or {}, gone

    @classmethod
    def of(cls, terms: Terms) -> "TermIndex":
        order = np.argsort(terms.by_node, kind="stable")
        return cls(terms.by_node[order], order.astype(np.int64))

    def changed(self, added: dict[str, int], gone: np.ndarray | None) -> "TermIndex":
        """This index with new terms (term -> node) and the nodes now gone."""
        return TermIndex(self.sorted_terms, self.order, {**self.added, **added}, gone)

    def get(self, term: str) -> int | None:
        key = term.encode()
        if len(self.sorted_terms) and len(key) <= self.sorted_terms.dtype.itemsize and b"\0" not in key:
            j = int(np.searchsorted(self.sorted_terms, key))
            if j < len(self.order) and self.sorted_terms[j] == key:
                node = int(self.order[j])
                if self.gone is None or not self.gone[node]:
                    return node
        return self.added.get(term)

    def nodes(self, terms: Sequence[str]) -> np.ndarray:
        """``get`` of many terms in one binary search: the node of each term, −1
        where it has none (thousands of terms cost one numpy call, not a search each)."""
        out = np.full(len(terms), -1, dtype=np.int64)
        if len(terms) and len(self.sorted_terms):
            size = self.sorted_terms.dtype.itemsize
            keys = [t.encode() for t in terms]
            fits = np.array([len(k) <= size and b"\0" not in k for k in keys])
            probe = np.array([k if f else b"" for k, f in zip(keys, fits)], dtype=self.sorted_terms.dtype)
            j = np.minimum(np.searchsorted(self.sorted_terms, probe), len(self.order) - 1)
            node = self.order[j]
            hit = fits & (self.sorted_terms[j] == probe)
            if self.gone is not None:
                hit &= ~self.gone[node]
            out[hit] = node[hit]
        if self.added:
            for i in np.flatnonzero(out < 0).tolist():
                out[i] = self.added.get(terms[i], -1)
        return out

    def seeds(self, terms: Iterable[str]) -> list[int]:
        """The distinct nodes of the ``terms`` that are in the vocabulary, ascending
        (a query's PPR seeds)."""
        found = (self.get(t) for t in terms if isinstance(t, str))    # a NULL from SQL is no term
        return sorted({node for node in found if node is not None})

    def __contains__(self, term: object) -> bool:
        return isinstance(term, str) and self.get(term) is not None

    def __getitem__(self, term: str) -> int:
        i = self.get(term)
        if i is None:
            raise KeyError(term)
        return i


@dataclass(frozen=True)
class TokenGraph:
    """One corpus's token graph at one graph version.

    ``weights`` is the symmetric matrix of co-occurrence weights as read (it may
    be a read-only mapping shared by every process); ``extra`` holds the changes
    a delta applied since (small, this process's own), so that the current
    weights are ``weights + extra`` and a small change copies nothing of the
    size of the graph. ``degree`` is current. The random walk's transition
    matrix T[i, j] = w_ij / deg(j) is never stored: ``step`` applies it, and
    ``neighbours`` gives the weights of some nodes' edges. Tokens that left the
    vocabulary since the base stay as isolated nodes (``gone``), not in ``index``."""

    version: int
    token_ids: np.ndarray           # node index -> pgrag.token.token_id (ascending)
    terms: Terms                    # node index -> term
    index: TermIndex                # term -> node index
    weights: sp.csr_matrix          # n × n, the base's symmetric weights (float32 when exact)
    degree: np.ndarray              # weighted degree per node
    edges: int                      # undirected edges
    extra: sp.csr_matrix | None = None    # n × n, weight changes since the base
    gone: np.ndarray | None = None        # bool per node: its token was removed

    @property
    def nodes(self) -> int:
        return len(self.terms)

    @functools.cached_property
    def dangling(self) -> np.ndarray:
        """Nodes without edges (isolated tokens, and those gone)."""
        return self.degree == 0

    @functools.cached_property
    def inverse_degree(self) -> np.ndarray:
        inv = np.zeros(len(self.degree))
        inv[~self.dangling] = 1.0 / self.degree[~self.dangling]
        return inv

    @property
    def nnz(self) -> int:
        """Stored entries scanned by one ``step`` (both matrices)."""
        return self.weights.nnz + (self.extra.nnz if self.extra is not None else 0)

    @functools.cached_property
    def _sweep_blocks(self) -> list[tuple[int, int, sp.csr_matrix]] | None:
        return sweep.blocks_for(self.weights)

    @functools.cached_property
    def _precise(self) -> tuple[sp.csr_matrix, list[tuple[int, int, sp.csr_matrix]] | None]:
        """The base's weights as float64, with their sweep blocks (``step(precise=True)``)."""
        if self.weights.dtype == np.float64:
            return self.weights, self._sweep_blocks
        w = widened(self.weights)
        return w, sweep.blocks_for(w)

    def step(self, r: np.ndarray, *, precise: bool = False) -> np.ndarray:
        """T · r: each node's mass spread over its edges in proportion to their
        weights (the base's product on several threads past a size: pgrag.sweep).

        With float32 weights (``compact_weights``) the base's product is taken in
        float32, x included (mixing the types would make scipy copy the matrix
        to float64 on every call): each entry of the result is then within about
        1e-7 of its size. ``precise`` takes it in float64, from a float64 copy
        of the weights made once per graph (this process's own: 8 bytes an entry)."""
        x = r * self.inverse_degree
        if precise:
            weights, blocks = self._precise
            out = sweep.product(weights, blocks, x)
        else:
            out = sweep.product(self.weights, self._sweep_blocks, x.astype(self.weights.dtype, copy=False))
            out = out.astype(np.float64, copy=False)
        return out + self.extra @ x if self.extra is not None else out

    def row_sizes(self, nodes: np.ndarray) -> int:
        """Stored entries in the rows of ``nodes`` (what ``neighbours`` scans)."""
        size = int((self.weights.indptr[nodes + 1] - self.weights.indptr[nodes]).sum())
        if self.extra is not None:
            size += int((self.extra.indptr[nodes + 1] - self.extra.indptr[nodes]).sum())
        return size

    def neighbours(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(neighbour, weight, owner) of every stored edge entry of ``nodes``,
        ``owner`` being the position in ``nodes``. With a delta a pair may appear
        twice (base and change), the weights then summing to the current one."""
        rows = self.weights[nodes]
        owner = np.repeat(np.arange(len(nodes)), np.diff(rows.indptr))
        if self.extra is None:
            return rows.indices, rows.data, owner
        more = self.extra[nodes]
        return (np.concatenate([rows.indices, more.indices]), np.concatenate([rows.data, more.data]),
                np.concatenate([owner, np.repeat(np.arange(len(nodes)), np.diff(more.indptr))]))

    def spread(self, nodes: np.ndarray, values: np.ndarray) -> np.ndarray:
        """Σ_i values[i] · (row ``nodes[i]`` of the current weights), as a dense
        vector: the rows' transpose times ``values``, one sparse product each."""
        out = np.asarray(self.weights[nodes].T @ values.astype(self.weights.dtype, copy=False), dtype=np.float64)
        if self.extra is not None:
            out += self.extra[nodes].T @ values
        return out

    def current_weights(self) -> sp.csr_matrix:
        """weights + extra, as one matrix (a copy of the graph's size when there is a delta)."""
        if self.extra is None:
            return self.weights
        merged = (self.weights + self.extra).tocsr()
        merged.eliminate_zeros()
        return merged

    @property
    def transition(self) -> sp.csr_matrix:
        """T as a matrix (tests, oracles): w_ij / deg(j), built on every call."""
        w = self.current_weights()
        return sp.csr_matrix((w.data * self.inverse_degree[w.indices], w.indices, w.indptr), shape=w.shape)


def _version(conn: Any, corpus_id: int) -> int:
    row = conn.execute(query("graph_version"), {"corpus_id": corpus_id}).fetchone()
    return int(row[0]) if row else 0


def load_graph(db: "QueryRunner", corpus_id: int) -> TokenGraph:
    """Read the corpus's tokens and edges (consistently: the version is read
    before and after, and a concurrent change makes it read again)."""
    while True:
        with db.transaction() as conn:
            version = _version(conn, corpus_id)
            tokens = conn.execute(query("graph_tokens"), {"corpus_id": corpus_id}).fetchall()
            a, b, w = conn.read_triples("graph_edges", {"corpus_id": corpus_id})
            after = _version(conn, corpus_id)
        if after == version:
            break
    token_ids = np.fromiter((t[0] for t in tokens), dtype=np.int64, count=len(tokens))
    return build_graph(version, token_ids, [t[1] for t in tokens], a, b, w)


def build_graph(version: int, token_ids: np.ndarray, terms: Sequence[str],
                a: np.ndarray, b: np.ndarray, w: np.ndarray) -> TokenGraph:
    """A graph from its nodes (``token_ids`` sorted ascending, with their terms)
    and undirected weighted edges (a, b, w) given once each, as token ids."""
    n = len(terms)
    return from_weights(version, np.asarray(token_ids, dtype=np.int64), Terms.of(terms),
                        edge_matrix(token_ids, a, b, w, n))


def edge_matrix(token_ids: np.ndarray, a: np.ndarray, b: np.ndarray, w: np.ndarray, n: int) -> sp.csr_matrix:
    """The symmetric n × n weight matrix of undirected edges (a, b, w) given once each."""
    ia, ib = np.searchsorted(token_ids, a), np.searchsorted(token_ids, b)
    return sp.coo_matrix((np.concatenate([w, w]), (np.concatenate([ia, ib]), np.concatenate([ib, ia]))),
                         shape=(n, n)).tocsr()


def from_weights(version: int, token_ids: np.ndarray, terms: Terms, sym: sp.csr_matrix) -> TokenGraph:
    """The graph of a symmetric weight matrix over nodes ``token_ids`` (ascending)."""
    sym = sym.tocsr()
    sym.sum_duplicates()        # a no-op on a canonical matrix, which may be a read-only mapping
    if (sym.data == 0).any():
        sym.eliminate_zeros()
    degree = np.asarray(sym.sum(axis=0), dtype=np.float64).ravel()   # summed before compact_weights
    return TokenGraph(version=version, token_ids=token_ids, terms=terms, index=TermIndex.of(terms),
                      weights=compact_weights(sym), degree=degree, edges=sym.nnz // 2)   # no self-loops: a < b


# Edge weights are co-occurrence counts, which float32 holds exactly up to 2**24.
# A sweep (TokenGraph.step) reads every stored entry and, past a few million, is
# bound by memory: float32 data makes an entry 8 bytes instead of 12. Measured on
# the 20× corpus of `pgrag bench scale` (10.3 M entries): one sweep 9.8 -> 5.5 ms;
# push p50 side by side (scripts/ppr_side_by_side.py --float64-too) 14.7 -> 11.5 ms
# at 20×, 12.2 -> 10.0 at 10×, 6.7 -> 6.5 on 2Wiki (1 M entries; docs/SCALING.md).
# Graphs under COMPACT_MIN_ENTRIES stay float64: their products run from the
# CPU's cache (65,536 entries: 0.060 ms in float64, 0.062 in float32), so float32
# would only make their scores differ from float64's by rounding.
FLOAT32_EXACT = 2.0 ** 24
COMPACT_MIN_ENTRIES = 1 << 16


def compact_weights(sym: sp.csr_matrix) -> sp.csr_matrix:
    """``sym`` with float32 data when that loses nothing (every weight a whole
    number of magnitude at most 2**24, as counts are) and the graph is large
    enough to gain (COMPACT_MIN_ENTRIES), else ``sym`` itself."""
    data = sym.data
    if sym.dtype != np.float64 or len(data) < COMPACT_MIN_ENTRIES:
        return sym
    if np.abs(data).max() > FLOAT32_EXACT or not np.array_equal(data, np.rint(data)):
        return sym
    return sp.csr_matrix((data.astype(np.float32), sym.indices, sym.indptr), shape=sym.shape, copy=False)


def widened(weights: sp.csr_matrix) -> sp.csr_matrix:
    """``weights`` with float64 data, sharing its index arrays (the inverse of
    ``compact_weights``; float64 weights are returned as they are)."""
    if weights.dtype == np.float64:
        return weights
    return sp.csr_matrix((weights.data.astype(np.float64), weights.indices, weights.indptr),
                         shape=weights.shape, copy=False)


_cache: dict[tuple[str, int], TokenGraph] = {}
_cache_lock = threading.Lock()


def cached_graph(db: "QueryRunner", corpus_id: int) -> TokenGraph | None:
    """This process's cached graph of the corpus, of whatever version."""
    with _cache_lock:
        return _cache.get((db.dsn, corpus_id))


def remember(db: "QueryRunner", corpus_id: int, graph: TokenGraph) -> None:
    """Cache ``graph`` for this process unless a newer version is cached."""
    with _cache_lock:
        current = _cache.get((db.dsn, corpus_id))
        if current is None or current.version <= graph.version:
            _cache[(db.dsn, corpus_id)] = graph


def token_graph(db: "QueryRunner", corpus_id: int) -> TokenGraph:
    """The corpus's graph, from this process's cache when its version is current."""
    version = int(db.fetch_row("graph_version", {"corpus_id": corpus_id})[0])
    cached = cached_graph(db, corpus_id)
    if cached is not None and cached.version == version:
        return cached
    graph = load_graph(db, corpus_id)
    remember(db, corpus_id, graph)
    return graph


def clear_cache() -> None:
    with _cache_lock:
        _cache.clear()


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


# ---------------------------------------------------------------------------
# Energy diffusion (ThreadRAG's Energy-Driven Pathfinding, ../shared/papers/threadrag.md §3.2)
# ---------------------------------------------------------------------------

def propagate_energy(weights: sp.spmatrix | np.ndarray, initial: np.ndarray, *, decay: float,
                     steps: int) -> np.ndarray:
    """Energy after ``steps`` rounds of diffusion from ``initial``:
    E = sum over t = 0..steps of (decay * P)^t E0, where P[j, i] = w_ij / sum_k w_ik.
    Each round, every node passes ``decay`` times the energy it received in the
    previous round to its neighbours, split in proportion to the edge weights;
    energy accumulates, so a node reached by several anchors (or paths) sums
    their contributions. ``weights`` is a symmetric non-negative matrix."""
    w = sp.csr_matrix(weights, dtype=np.float64)
    out_weight = np.asarray(w.sum(axis=1)).ravel()
    inverse = np.divide(1.0, out_weight, out=np.zeros_like(out_weight), where=out_weight > 0)
    spread = (sp.diags(inverse) @ w).T.tocsr()          # column i: node i's shares to its neighbours
    energy = np.asarray(initial, dtype=np.float64).copy()
    wave = energy.copy()
    for _ in range(steps):
        wave = decay * (spread @ wave)
        energy += wave
    return energy


def reachable(weights: sp.spmatrix | np.ndarray, sources: Sequence[int], keep: np.ndarray) -> np.ndarray:
    """Nodes of ``keep`` (a boolean mask) connected to a source through nodes of ``keep``."""
    from scipy.sparse.csgraph import breadth_first_order

    w = sp.csr_matrix(weights)
    mask = np.asarray(keep, dtype=bool).copy()
    mask[list(sources)] = True
    sub = sp.diags(mask.astype(np.float64)) @ w @ sp.diags(mask.astype(np.float64))
    seen = np.zeros(len(mask), dtype=bool)
    for s in sources:
        if not seen[s]:
            seen[breadth_first_order(sp.csr_matrix(sub), s, directed=False, return_predecessors=False)] = True
    return seen & mask
