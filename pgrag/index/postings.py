"""A corpus's BM25 postings as one sparse matrix, for TIGRAG's one-hop step.

TIGRAG scores a chunk by ρ(c) = Σ_v p̂(v) · BM25(v, c) over the top-γ tokens of the
PPR (``pgrag_internal.tigrag_pool`` does it in SQL, one join over the postings per query).
Here the term frequency of every (chunk, token) posting sits in a chunk × token
CSC matrix whose columns are the token graph's nodes; a query weighs only the
columns it reads (BM25 from tf, the chunk lengths and the dfs), so that
ρ = B · p̂ is one sparse product, and the candidates, the cumulative-mass cut and
the pool cap come from that same vector.

The matrix is cached next to the token graph (pgrag.index.cache) and keyed by
the same graph version, so a query never pairs a graph with postings of another
version. The chunks' embeddings (pgrag.index.vectors) travel with them, so that
TIGRAG's rerank and ThreadRAG's BM25 ranking need no query over the pool.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from ..exceptions import PgragError
from ..queries import query
from .graph import TokenGraph
from .vectors import Vectors, products, read_vectors

if TYPE_CHECKING:
    from ..context import QueryRunner

K1, B = 1.2, 0.75   # Okapi BM25, as pgrag.bm25 and pgrag_internal.tigrag_pool

# Up to this many chunk vectors, the nearest chunks of a query embedding come
# from one product over the cached vectors (exact) instead of pgrag.dense's HNSW
# in SQL. Measured on 2 cores (scripts/nearest_vs_hnsw.py, docs/SCALING.md),
# 8 queries at k = 50 against dense_many at ef_search 200: 2Wiki's 7,520
# vectors 2.9 ms (1.1 on torch's threads) against 30; random vectors (HNSW's
# worst case) 2.8 against 37 ms over 7,520 and 26 against 122 ms over 75,000.
# The product grows with the corpus, HNSW not.
EXACT_SEARCH_MAX_VECTORS = 100_000


@dataclass(frozen=True)
class Postings:
    """The term frequency of every posting of one corpus at one graph version,
    from which BM25(v, c) is computed for the columns a query reads.

    Weights are not stored: each depends on the corpus's size and mean chunk
    length, which every ingest changes, so storing them would make a small change
    reweigh every posting. ``tf`` is the base as read (it may be a read-only
    mapping shared by every process); a delta adds the new chunks' rows in
    ``extra`` and marks the removed ones not ``live``, and keeps ``lengths`` and
    ``df`` current, so that nothing of the postings' size is copied."""

    version: int
    chunk_ids: np.ndarray     # row -> chunk_id, ascending (rows removed since the base stay, not live)
    tf: sp.csc_matrix         # rows × graph nodes
    lengths: np.ndarray       # row -> chunk length in tokens
    documents: np.ndarray     # row -> the chunk's document_id
    df: np.ndarray            # column -> document frequency
    # each chunk's embedding, unit length (float32): the rerank's cosines are one
    # product here instead of a query over the pool (docs/SCALING.md: memory)
    vectors: Vectors
    extra: sp.csc_matrix | None = None    # rows × nodes: the postings of rows added since the base
    live: np.ndarray | None = None        # bool per row (None: every row)
    # bool per row: the rows a metadata filter allows (None: every row). Unlike
    # ``live`` it leaves BM25's statistics alone: a filter chooses what may be
    # found, not how the corpus weighs a term.
    scope: np.ndarray | None = None

    def within(self, documents: np.ndarray) -> "Postings":
        """These postings with only the chunks of ``documents`` findable."""
        return dataclasses.replace(self, scope=np.isin(self.documents, np.asarray(documents, dtype=np.int64)))

    @property
    def findable(self) -> np.ndarray | None:
        """bool per row: live and in scope (None: every row)."""
        if self.scope is None:
            return self.live
        return self.scope if self.live is None else self.live & self.scope

    def held(self, chunk_ids: np.ndarray) -> np.ndarray:
        """bool per chunk id: a findable row of these postings."""
        ids = np.asarray(chunk_ids, dtype=np.int64)
        if not len(self.chunk_ids):
            return np.zeros(len(ids), dtype=bool)
        rows = np.minimum(np.searchsorted(self.chunk_ids, ids), len(self.chunk_ids) - 1)
        found = self.chunk_ids[rows] == ids
        findable = self.findable
        return found & findable[rows] if findable is not None else found

    @property
    def nbytes(self) -> int:
        """Memory held by the arrays (what a process pays for the cache)."""
        arrays = [self.tf.data, self.tf.indices, self.tf.indptr, self.chunk_ids, self.lengths, self.documents,
                  self.df]
        if self.extra is not None:
            arrays += [self.extra.data, self.extra.indices, self.extra.indptr]
        if self.live is not None:
            arrays.append(self.live)
        return int(sum(a.nbytes for a in arrays)) + self.vectors.nbytes

    @property
    def entries(self) -> int:
        """Stored postings, removed rows' included until a fold."""
        return self.tf.nnz + (self.extra.nnz if self.extra is not None else 0)

    @property
    def changed_rows(self) -> int:
        """Rows a delta added or removed since the base (what a fold would merge)."""
        added = len(np.unique(self.extra.indices)) if self.extra is not None else 0
        return added + (int((~self.live).sum()) if self.live is not None else 0)

    @functools.cached_property
    def statistics(self) -> tuple[float, float]:
        """(chunks, mean length): BM25's N and avgdl over the live rows."""
        lengths = self.lengths if self.live is None else self.lengths[self.live]
        return float(len(lengths)), max(float(lengths.mean()) if len(lengths) else 0.0, 1e-9)

    def weights(self, columns: np.ndarray | list[int]) -> sp.csc_matrix:
        """Okapi BM25 of every live row for the graph nodes ``columns`` (rows ×
        len(columns)), as ``pgrag.bm25`` computes it."""
        cols = np.asarray(columns, dtype=np.int64)
        sub = self.tf[:, cols]
        if self.extra is not None:
            sub = (sub + self.extra[:, cols]).tocsc()
        findable = self.findable
        if findable is not None:
            dead = ~findable[sub.indices]
            if dead.any():
                sub = sp.csc_matrix((np.where(dead, 0.0, sub.data), sub.indices, sub.indptr), shape=sub.shape)
                sub.eliminate_zeros()
        n, avgdl = self.statistics
        col = np.repeat(np.arange(len(cols)), np.diff(sub.indptr))
        # index first, convert after: only the entries read, not every node's df and chunk's length
        d = self.df[cols].astype(np.float64)[col]
        idf = np.log(1 + (n - d + 0.5) / (d + 0.5))
        dl = self.lengths[sub.indices].astype(np.float64)
        tf = np.asarray(sub.data, dtype=np.float64)
        weight = idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * dl / avgdl))
        return sp.csc_matrix((weight, sub.indices, sub.indptr), shape=sub.shape)

    @property
    def bm25(self) -> sp.csc_matrix:
        """Every weight (rows × nodes; tests and oracles: a copy of the postings' size)."""
        return self.weights(np.arange(self.tf.shape[1]))

    def bm25_ranking(self, columns: list[int], depth: int) -> tuple[list[int], list[float]]:
        """The ``depth`` best chunk ids by Okapi BM25 for query tokens ``columns``
        (graph node indexes, each counted once), best first, ties by chunk id,
        with their scores: the ranking of SQL's ``pgrag.bm25`` from the cached
        postings (only the query's columns are read)."""
        return self.bm25_rankings([columns], [depth])[0]

    def bm25_rankings(self, queries: list[list[int]], depths: list[int]) -> list[tuple[list[int], list[float]]]:
        """``bm25_ranking`` of several queries, the weights of all their columns
        computed once (each weight depends only on its posting, so every
        ranking is the one ``bm25_ranking`` gives alone)."""
        wanted = [sorted(set(columns)) for columns in queries]
        union = sorted(set().union(*wanted))
        if not union:
            return [([], []) for _ in queries]
        every = self.weights(union)
        at = {c: i for i, c in enumerate(union)}
        out: list[tuple[list[int], list[float]]] = []
        for columns, depth in zip(wanted, depths):
            spans = [slice(every.indptr[at[c]], every.indptr[at[c] + 1]) for c in columns]
            if depth <= 0 or not spans:
                out.append(([], []))
                continue
            # a chunk's score sums its columns in column order, as sub.sum(axis=1) would;
            # every weight is positive (idf > 0, removed rows dropped), so scored rows are > 0
            score = np.bincount(np.concatenate([every.indices[s] for s in spans]),
                                weights=np.concatenate([every.data[s] for s in spans]), minlength=every.shape[0])
            rows = np.flatnonzero(score > 0)
            if len(rows) > depth:   # the rows tied with the depth-th best stay, for the tie-break by id
                rows = rows[score[rows] >= np.partition(score[rows], len(rows) - depth)[len(rows) - depth]]
            order = np.lexsort((self.chunk_ids[rows], -score[rows]))[:depth]
            out.append(([int(c) for c in self.chunk_ids[rows[order]]], [float(x) for x in score[rows[order]]]))
        return out

    def cosines(self, chunk_ids: list[int], embeddings: list[np.ndarray],
                bonus: list[float] | None = None) -> dict[int, float]:
        """Each chunk's best cosine to any of ``embeddings`` (what the SQL
        ``pgrag_internal.chunk_cosines`` gives), from the cached vectors; with
        ``bonus``, the best of cosine + that embedding's bonus."""
        if not chunk_ids or not embeddings:
            return {}
        queries = np.asarray(embeddings, dtype=np.float32)
        queries = queries / np.maximum(np.linalg.norm(queries, axis=1, keepdims=True), 1e-12)
        # einsum, not @: a BLAS product wakes OpenBLAS's threads, whose spinning
        # then slows the next query embedding (torch) on a small machine by more
        # than this product costs (measured: dense's embedding 12 -> 49 ms in
        # `pgrag bench queries`)
        scores = np.einsum("ij,kj->ik", self.vectors.rows(np.asarray(chunk_ids)), queries)
        if bonus is not None:
            scores += np.asarray(bonus, dtype=np.float32)[None, :]
        best = scores.max(axis=1)
        return {int(c): float(b) for c, b in zip(chunk_ids, best)}

    def documents_of(self, chunk_ids: list[int]) -> dict[int, int]:
        """The document of each of ``chunk_ids`` (chunks of this version)."""
        wanted = np.asarray(chunk_ids, dtype=np.int64)
        rows = np.searchsorted(self.chunk_ids, wanted)
        found = rows < len(self.chunk_ids)
        found[found] = self.chunk_ids[rows[found]] == wanted[found]
        if not found.all():
            raise PgragError(f"chunks {wanted[~found][:5].tolist()} are not in the index")
        return dict(zip(wanted.tolist(), self.documents[rows].tolist()))

    def nearest(self, embeddings: list[np.ndarray], depth: int) -> list[tuple[list[int], list[float]]] | None:
        """For each embedding, its ``depth`` live chunks by cosine, best first
        (ties by chunk id), with the cosines: exact, from the cached vectors, the
        ranking pgrag.dense's HNSW approximates. None past
        EXACT_SEARCH_MAX_VECTORS vectors, where HNSW is cheaper."""
        if self.vectors.count > EXACT_SEARCH_MAX_VECTORS:
            return None
        if not embeddings or depth <= 0 or not self.vectors.count:
            return [([], []) for _ in embeddings]
        queries = np.asarray(embeddings, dtype=np.float32)
        queries = queries / np.maximum(np.linalg.norm(queries, axis=1, keepdims=True), 1e-12)
        ids = np.concatenate([b[0] for b in self.vectors.blocks])
        scores = np.concatenate([products(rows, queries) for _, rows in self.vectors.blocks])
        if self.findable is not None:
            scores[~self.held(ids)] = -np.inf
        out = []
        for column in scores.T:
            top = np.flatnonzero(np.isfinite(column))
            if len(top) > depth:   # the rows tied with the depth-th best stay, for the tie-break by id
                top = top[column[top] >= np.partition(column[top], len(top) - depth)[len(top) - depth]]
            top = top[np.lexsort((ids[top], -column[top]))][:depth]
            out.append(([int(c) for c in ids[top]], [float(x) for x in column[top]]))
        return out

    def pool(self, nodes: np.ndarray, weights: np.ndarray, seeds: list[int], *, threshold: float,
             max_pool: int, bm25: bool = True) -> list[tuple[int, float, int]]:
        """(chunk_id, ρ, candidates) of the pool, highest ρ first: the same rows as
        ``pgrag_internal.tigrag_pool``. Candidates hold any expanded token (``nodes``, graph
        node indexes weighted by ``weights``) or query token (``seeds``, weight 0);
        the pool is the shortest prefix by ρ holding ``threshold`` of the total ρ,
        at most ``max_pool`` chunks. Without ``bm25`` a posting counts 1 (the
        paper's "no BM25" ablation)."""
        columns, where = np.unique(np.concatenate([np.asarray(nodes, dtype=np.int64),
                                                   np.asarray(seeds, dtype=np.int64)]), return_inverse=True)
        w = np.zeros(len(columns))
        np.add.at(w, where[:len(nodes)], np.asarray(weights, dtype=np.float64))
        sub = self.weights(columns)
        if not bm25:
            sub = sp.csc_matrix((np.ones_like(sub.data), sub.indices, sub.indptr), shape=sub.shape)
        rows = np.unique(sub.indices)
        rho = (sub @ w)[rows]
        order = np.lexsort((self.chunk_ids[rows], -rho))
        rows, rho = rows[order], rho[order]
        total = float(rho.sum())
        if total <= 0 or max_pool <= 0:
            return []
        before = np.cumsum(rho) - rho           # the mass ahead of each chunk
        keep = (rho > 0) & (before < threshold * total)
        chosen = np.flatnonzero(keep)[:max_pool]
        candidates = len(rows)
        return [(int(self.chunk_ids[rows[i]]), float(rho[i]), candidates) for i in chosen]


def build_postings(version: int, graph_tokens: np.ndarray, token_df: np.ndarray, chunk_ids: np.ndarray,
                   lengths: np.ndarray, documents: np.ndarray, chunk: np.ndarray, token: np.ndarray,
                   tf: np.ndarray, vectors: Vectors) -> Postings:
    """The matrix from the corpus's tokens (ids ascending, as the graph's nodes, with
    their document frequencies), chunks (ids ascending, with their lengths in
    tokens, documents and embeddings) and postings (chunk id, token id, term frequency)."""
    row = np.searchsorted(chunk_ids, chunk)
    col = np.searchsorted(graph_tokens, token)
    counts = sp.csc_matrix((tf.astype(np.float64), (row, col)), shape=(len(chunk_ids), len(graph_tokens)))
    counts.sort_indices()
    return Postings(version=version, chunk_ids=np.asarray(chunk_ids, dtype=np.int64), tf=counts,
                    lengths=np.asarray(lengths, dtype=np.int64), documents=np.asarray(documents, dtype=np.int64),
                    df=np.asarray(token_df, dtype=np.int64),
                    vectors=vectors)


def load_postings(db: "QueryRunner", corpus_id: int, graph: TokenGraph) -> Postings | None:
    """The postings at ``graph``'s version, or None when the corpus has moved on
    since the graph was read (the caller reads both again)."""
    with db.transaction() as conn:
        version = conn.execute(query("graph_version"), {"corpus_id": corpus_id}).fetchone()
        if version is None or int(version[0]) != graph.version:
            return None
        tokens = conn.execute(query("token_df"), {"corpus_id": corpus_id}).fetchall()
        chunks = conn.execute(query("chunk_lengths"), {"corpus_id": corpus_id}).fetchall()
        chunk, token, tf = conn.read_triples("postings", {"corpus_id": corpus_id})
        ids = np.fromiter((c[0] for c in chunks), np.int64, len(chunks))
        rows = read_vectors(conn, corpus_id, ids, every=True)
        after = conn.execute(query("graph_version"), {"corpus_id": corpus_id}).fetchone()
    if after is None or int(after[0]) != graph.version or rows is None:
        return None
    vectors = Vectors.of(ids, rows)
    token_ids = np.fromiter((t[0] for t in tokens), dtype=np.int64, count=len(tokens))
    if not np.array_equal(token_ids, graph.token_ids):
        return None
    return build_postings(graph.version, token_ids, np.fromiter((t[1] for t in tokens), np.int64, len(tokens)),
                          np.fromiter((c[0] for c in chunks), np.int64, len(chunks)),
                          np.fromiter((c[1] for c in chunks), np.int64, len(chunks)),
                          np.fromiter((c[2] for c in chunks), np.int64, len(chunks)), chunk, token, tf, vectors)
