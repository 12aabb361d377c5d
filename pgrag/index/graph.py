"""The token co-occurrence graph of a corpus as a scipy sparse matrix.

The graph lives in ``pgrag.token_edge``; queries need it as a matrix. Loading it
is the expensive part (a binary COPY of every edge), so the matrix is cached per
database and corpus in this process (pgrag.index.cache) and tagged with the
corpus's graph version: any ingest or delete bumps the version, and the next
query either lays the change over the cached matrix (pgrag.index.delta) or
reads it again. The walks over it are pgrag.index.pagerank's.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from ..queries import query
from . import sweep
from .terms import TermIndex, Terms

if TYPE_CHECKING:
    from ..context import QueryRunner


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
        weights (the base's product on several threads past a size: pgrag.index.sweep).

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
