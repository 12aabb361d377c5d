"""A corpus's BM25 postings as one sparse matrix, for TIGRAG's one-hop step.

TIGRAG scores a chunk by ρ(c) = Σ_v p̂(v) · BM25(v, c) over the top-γ tokens of the
PPR (``pgrag_internal.tigrag_pool`` does it in SQL, one join over the postings per query).
Here the term frequency of every (chunk, token) posting sits in a chunk × token
CSC matrix whose columns are the token graph's nodes; a query weighs only the
columns it reads (BM25 from tf, the chunk lengths and the dfs), so that
ρ = B · p̂ is one sparse product, and the candidates, the cumulative-mass cut and
the pool cap come from that same vector.

The matrix is cached per database and corpus in this process next to the token
graph and keyed by the same graph version (every ingest or delete bumps it), so
a query never pairs a graph with postings of another version. The chunks'
embeddings travel with them, so that TIGRAG's rerank and ThreadRAG's BM25
ranking need no query over the pool. After a small change (``advance``) the
next query lays what changed over the cached version, which may be a mapping
shared by every process, instead of reading or copying the whole one; past
FOLD_SHARE of the chunks changed, that query folds the overlay into a new base.
"""

from __future__ import annotations

import functools
import sys
import threading
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import scipy.sparse as sp

from .exceptions import CorpusNotFound, PgragError
from .graph import TermIndex, Terms, TokenGraph, cached_graph, edge_matrix, from_weights, remember, token_graph
from .queries import binary_results, query

if TYPE_CHECKING:
    from .context import QueryRunner

K1, B = 1.2, 0.75   # Okapi BM25, as pgrag.bm25 and pgrag_internal.tigrag_pool

# The shared vectors are a read-only mapping; torch only reads them (``_products``).
warnings.filterwarnings("ignore", message="The given NumPy array is not writable", category=UserWarning)


# Past this many blocks of chunk vectors an overlay is folded (each lookup
# searches every block).
MAX_VECTOR_BLOCKS = 32

# Up to this many chunk vectors, the nearest chunks of a query embedding come
# from one product over the cached vectors (exact) instead of pgrag.dense's HNSW
# in SQL. Measured on 2 cores (scripts/nearest_vs_hnsw.py, docs/SCALING.md),
# 8 queries at k = 50 against dense_many at ef_search 200: 2Wiki's 7,520
# vectors 2.9 ms (1.1 on torch's threads) against 30; random vectors (HNSW's
# worst case) 2.8 against 37 ms over 7,520 and 26 against 122 ms over 75,000.
# The product grows with the corpus, HNSW not.
EXACT_SEARCH_MAX_VECTORS = 100_000


@dataclass(frozen=True)
class Vectors:
    """Chunk embeddings (unit rows, float32) by chunk id, in blocks of ascending
    ids: a delta adds a block for the new chunks instead of copying every vector
    (115 MB at 10x 2Wiki). Rows of deleted chunks stay until a fold; only
    current chunks are ever looked up."""

    blocks: tuple[tuple[np.ndarray, np.ndarray], ...]

    @classmethod
    def of(cls, ids: np.ndarray, rows: np.ndarray) -> "Vectors":
        return cls(((np.asarray(ids, dtype=np.int64), rows),))

    @property
    def nbytes(self) -> int:
        return int(sum(ids.nbytes + rows.nbytes for ids, rows in self.blocks))

    def rows(self, chunk_ids: np.ndarray) -> np.ndarray:
        """The vectors of ``chunk_ids`` (each must be in a block)."""
        wanted = np.asarray(chunk_ids, dtype=np.int64)
        out = np.empty((len(wanted), self.blocks[0][1].shape[1]), dtype=np.float32)
        found = np.zeros(len(wanted), dtype=bool)
        for ids, rows in self.blocks:
            at = np.minimum(np.searchsorted(ids, wanted), max(len(ids) - 1, 0))
            hit = (ids[at] == wanted) if len(ids) else np.zeros(len(wanted), dtype=bool)
            out[hit] = rows[at[hit]]
            found |= hit
        if not found.all():
            raise PgragError(f"no cached vector for chunks {wanted[~found][:5].tolist()}")
        return out

    def added(self, ids: np.ndarray, rows: np.ndarray) -> "Vectors":
        """These vectors and a block of those of chunks ``ids`` (above every id
        here): nothing is copied; a fold merges the blocks."""
        if not len(ids):
            return self
        return Vectors(self.blocks + ((np.asarray(ids, dtype=np.int64), rows),))

    @property
    def count(self) -> int:
        """Rows held, deleted chunks' included until a fold."""
        return int(sum(len(ids) for ids, _ in self.blocks))

    def merged(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids, rows) in one block, ascending: what the shared files hold."""
        if len(self.blocks) == 1:
            return self.blocks[0]
        ids = np.unique(np.concatenate([b[0] for b in self.blocks]))
        return ids, self.rows(ids)


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
        if self.live is not None:
            dead = ~self.live[sub.indices]
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

    def cosines(self, chunk_ids: list[int], embeddings: list[np.ndarray]) -> dict[int, float]:
        """Each chunk's best cosine to any of ``embeddings`` (what the SQL
        ``pgrag_internal.chunk_cosines`` gives), from the cached vectors."""
        if not chunk_ids or not embeddings:
            return {}
        queries = np.asarray(embeddings, dtype=np.float32)
        queries = queries / np.maximum(np.linalg.norm(queries, axis=1, keepdims=True), 1e-12)
        # einsum, not @: a BLAS product wakes OpenBLAS's threads, whose spinning
        # then slows the next query embedding (torch) on a small machine by more
        # than this product costs (measured: dense's embedding 12 -> 49 ms in
        # `pgrag bench queries`)
        best = np.einsum("ij,kj->ik", self.vectors.rows(np.asarray(chunk_ids)), queries).max(axis=1)
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
        scores = np.concatenate([_products(rows, queries) for _, rows in self.vectors.blocks])
        if self.live is not None:
            at = np.minimum(np.searchsorted(self.chunk_ids, ids), len(self.chunk_ids) - 1)
            scores[~((self.chunk_ids[at] == ids) & self.live[at])] = -np.inf
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


def _products(rows: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """rows · queriesᵀ (float32). With torch loaded (the encoder), on its
    threads: a numpy product would wake OpenBLAS's, whose spinning then slows
    the next embedding (see ``Postings.cosines``); einsum is 6x slower here."""
    torch = sys.modules.get("torch")
    if torch is None:
        return np.asarray(rows @ queries.T)
    return (torch.from_numpy(rows) @ torch.from_numpy(queries).T).numpy()


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


def unit_rows(vectors: list[Any] | np.ndarray, dim: int) -> np.ndarray:
    """Embeddings as a float32 matrix of unit rows (``dim`` columns even when empty)."""
    # pgvector's binary loader gives Vector objects, the text one and SPI arrays
    rows = [v.to_numpy() if hasattr(v, "to_numpy") else v for v in vectors]
    m = np.asarray(rows, dtype=np.float32).reshape(-1, dim)
    return m / np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)


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
        rows = _vectors(conn, corpus_id, ids, every=True)
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


def _vectors(conn: Any, corpus_id: int, chunk_ids: np.ndarray, every: bool = False) -> np.ndarray | None:
    """The unit embeddings of ``chunk_ids`` (ascending; ``every`` chunk of the
    corpus, read without sending their ids), one row each; None when the chunks
    are no longer those (a concurrent change committed between two statements:
    the caller reads again, as for a version change)."""
    rows = conn.execute(query("chunk_vectors"), {
        "corpus_id": corpus_id, "chunk_ids": None if every else chunk_ids.tolist()},
        binary=binary_results("chunk_vectors")).fetchall()
    if [r[0] for r in rows] != chunk_ids.tolist():
        return None
    dim = int(conn.execute(query("corpus_dim"), {"corpus_id": corpus_id}).fetchone()[0])
    return unit_rows([r[1] for r in rows], dim)


_cache: dict[tuple[str, int], Postings] = {}
_cache_lock = threading.Lock()


class RankingIndex(NamedTuple):
    graph: TokenGraph
    postings: Postings
    source: str   # "memory" (this process's cache), "files" (mapped), "delta", "fold" (a delta folded) or "database"


def ranking_index(db: "QueryRunner", corpus_id: int, attempts: int = 5) -> RankingIndex:
    """The corpus's token graph and postings matrix, of one and the same version:
    from this process's cache, else mapped from the machine's shared files
    (pgrag.graph_files), each advanced by a delta when the corpus changed since
    (a small overlay: ``advance``), else read from the database and then shared."""
    from . import graph_files

    key = (db.dsn, corpus_id)
    row = db.fetchone("graph_version", {"corpus_id": corpus_id})
    if row is None:   # every corpus has its row from creation: this one was dropped
        raise CorpusNotFound(f"corpus id {corpus_id} does not exist (dropped since it was opened?)")
    version = int(row[0])
    with _cache_lock:
        cached = _cache.get(key)
    graph = cached_graph(db, corpus_id)
    if cached is not None and graph is not None and cached.version == graph.version == version:
        return RankingIndex(graph, cached, "memory")
    pair, source = _mapped(graph_files.load(db, corpus_id, version)), "files"
    if pair is None and cached is not None and graph is not None and cached.version == graph.version < version:
        pair, source = advance(db, corpus_id, graph, cached), "delta"
    if pair is None:
        # Another process may have shared an older version: map it and catch up.
        older = _mapped(graph_files.load(db, corpus_id, version, latest=True))
        pair, source = (advance(db, corpus_id, *older), "delta") if older is not None else (None, "delta")
    if pair is None:
        source = "database"
        pair = _from_database(db, corpus_id, attempts)
    if source == "delta" and _wants_fold(pair[1]):
        # The overlay has grown past its share: this call folds it into a new
        # base, once for every FOLD_SHARE of the corpus changed. In this call,
        # not a thread of its own: no thread of pgrag's outlives its call (in a
        # backend it would outlive the statement; anywhere it would share the
        # interpreter with whatever the caller does next).
        pair, source = folded(*pair), "fold"
    graph, postings = pair
    _remember(key, db, corpus_id, graph, postings)
    stem = graph_files.corpus_key(db, corpus_id) if source in ("database", "fold") and graph_files.root() else None
    if stem is not None:
        _share(stem, pair)
    return RankingIndex(graph, postings, source)


def _remember(key: tuple[str, int], db: "QueryRunner", corpus_id: int, graph: TokenGraph,
              postings: Postings) -> None:
    with _cache_lock:
        if key not in _cache or _cache[key].version <= postings.version:
            _cache[key] = postings
    remember(db, corpus_id, graph)


def _share(key: str, pair: tuple[TokenGraph, Postings]) -> None:
    from . import graph_files

    try:
        graph_files.publish(key, pair[0].version, shared_arrays(*pair))
    except OSError as exc:   # sharing is an optimisation: this process still has its copy
        warnings.warn(f"pgrag: could not share the graph files ({exc})", stacklevel=2)


def _wants_fold(postings: Postings) -> bool:
    return (postings.changed_rows > FOLD_SHARE * len(postings.chunk_ids)
            or len(postings.vectors.blocks) > MAX_VECTOR_BLOCKS)


# Past this share of new or removed chunks a full read is as cheap as a delta.
DELTA_MAX_SHARE = 0.1
# Past this share of chunks changed since the base, an overlay is folded into a
# new base (by the query that finds it so): each query pays a little for every change it carries.
FOLD_SHARE = 0.02
# Past this many logged edge counts of removed chunks per edge of the graph, a
# full read: the overlay would carry them into every query until its fold.
MAX_PAIRS_SHARE = 0.1


def advance(db: "QueryRunner", corpus_id: int, graph: TokenGraph, postings: Postings,
            max_share: float | None = None) -> tuple[TokenGraph, Postings] | None:
    """The current version from a cached one plus what changed since, as an
    overlay on it: chunks added (their postings, edges and vectors, found by id:
    ids only grow) and chunks removed (from the log pgrag.chunk_removal: their
    rows stop being live, the edge counts logged with them are subtracted), with
    the document frequencies of the tokens they hold. Nothing proportional to
    the corpus is read or copied but two vectors per node and per chunk. None
    when more than ``max_share`` of the chunks changed, when the log does not
    reach back to the cached version, or when the corpus moved on while
    reading: the caller reads the whole version instead. The result ranks as a
    full read does, and folds to it exactly (tests/integration/test_delta.py)."""
    share = DELTA_MAX_SHARE if max_share is None else max_share
    params = {"corpus_id": corpus_id}
    live = len(postings.chunk_ids) if postings.live is None else int(postings.live.sum())
    with db.transaction() as conn:
        start = conn.execute(query("delta_start"), params).fetchone()
        if start is None or int(start[0]) <= graph.version or graph.version < int(start[1]):
            return None
        known = int(postings.chunk_ids[-1]) if len(postings.chunk_ids) else 0
        fresh = conn.execute(query("chunks_after"), {**params, "after": known}).fetchall()
        removals = conn.execute(query("removals_since"), {**params, "since": graph.version}).fetchall()
        removed, removed_tokens, removed_edges = _held(postings, removals)
        if len(fresh) + len(removed) > share * max(live, 1):
            return None
        # An overlay holding the edge counts of many removed chunks costs every query more than a full read.
        if len(removed_edges[0]) > MAX_PAIRS_SHARE * max(graph.edges, 1):
            return None
        fresh_ids = np.array([c[0] for c in fresh], dtype=np.int64)
        after = int(graph.token_ids[-1]) if graph.nodes else 0
        new_terms = conn.execute(query("tokens_after"), {**params, "after": after}).fetchall()
        rows = conn.execute(query("postings_of_chunks"), {**params, "chunk_ids": fresh_ids.tolist()}).fetchall()
        edges = conn.execute(query("edges_of_chunks"), {**params, "chunk_ids": fresh_ids.tolist()}).fetchall()
        touched = np.unique(np.concatenate([np.array([r[1] for r in rows], dtype=np.int64), *removed_tokens]))
        dfs = conn.execute(query("token_df_of"), {**params, "token_ids": touched.tolist()}).fetchall()
        fresh_vectors = _vectors(conn, corpus_id, fresh_ids)
        again = conn.execute(query("graph_version"), params).fetchone()
    if again is None or int(again[0]) != int(start[0]) or fresh_vectors is None:
        return None
    v = int(start[0])
    df = dict(dfs)
    new_graph = _advanced_graph(v, graph, new_terms, edges, removed_edges,
                                touched[[int(t) not in df for t in touched]])
    if new_graph is None:
        return None
    lengths = np.array([c[1] for c in fresh], dtype=np.int64)
    documents = np.array([c[2] for c in fresh], dtype=np.int64)
    return new_graph, _advanced_postings(v, postings, new_graph, fresh_ids, (lengths, documents), rows, removed,
                                         (touched, np.array([df.get(int(t), 0) for t in touched], dtype=np.int64)),
                                         fresh_vectors)


def _held(postings: Postings, removals: list[tuple]) -> tuple[np.ndarray, list[np.ndarray],
                                                         tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The live rows of the removed chunks, the tokens each held, and the edge
    counts (a, b, weight) they added, concatenated. Only removals of cached
    chunks count: a chunk added and removed since the cached version is in
    neither the cache nor the corpus."""
    rows, tokens, ea, eb, ew = [], [], [], [], []
    for chunk_id, held, a, b, w in removals:
        row = int(np.searchsorted(postings.chunk_ids, chunk_id))
        if (row < len(postings.chunk_ids) and postings.chunk_ids[row] == chunk_id
                and (postings.live is None or postings.live[row])):
            rows.append(row)
            tokens.append(np.asarray(held, dtype=np.int64))
            ea.extend(a)
            eb.extend(b)
            ew.extend(w)
    edges = (np.array(ea, dtype=np.int64), np.array(eb, dtype=np.int64), np.array(ew, dtype=np.float64))
    return np.array(rows, dtype=np.int64), tokens, edges


def _at(m: sp.csr_matrix | None, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """The entries of ``m`` at (rows[i], cols[i]) (zero where none is stored)."""
    if m is None or not len(rows):
        return np.zeros(len(rows))
    return np.asarray(m[rows, cols]).ravel().astype(np.float64)


def _advanced_graph(version: int, graph: TokenGraph, new_terms: list[tuple], edges: list[tuple],
                    removed: tuple[np.ndarray, np.ndarray, np.ndarray], gone_ids: np.ndarray) -> TokenGraph | None:
    """The graph with the new tokens appended, the new chunks' edge counts added
    and the removed chunks' subtracted (``removed``: a, b, weight; a cached
    chunk's counts are in the cached weights), all in ``extra``; the tokens
    ``gone_ids`` leave the vocabulary. None if one of them still has an edge
    (then the caller reads everything)."""
    n0 = graph.nodes
    ext = np.concatenate([graph.token_ids, np.array([t[0] for t in new_terms], dtype=np.int64)])
    n = len(ext)
    weights = _padded(graph.weights, (n, n))
    extra = _padded(graph.extra, (n, n)) if graph.extra is not None else None
    a, b, w = (np.array([e[i] for e in edges], dtype=np.int64 if i < 2 else np.float64) for i in range(3))
    ra, rb, rw = removed
    delta = edge_matrix(ext, np.concatenate([a, ra]), np.concatenate([b, rb]), np.concatenate([w, -rw]), n)
    delta.sum_duplicates()
    delta.eliminate_zeros()
    at = delta.tocoo()
    before = _at(weights, at.row, at.col) + _at(extra, at.row, at.col)
    after_ = before + at.data
    edge_count = graph.edges + (int(((before == 0) & (after_ != 0)).sum())
                                - int(((before != 0) & (after_ == 0)).sum())) // 2
    degree = np.concatenate([graph.degree, np.zeros(n - n0)]) + np.asarray(delta.sum(axis=0)).ravel()
    gone = np.zeros(n, dtype=bool) if graph.gone is None else np.concatenate([graph.gone, np.zeros(n - n0, bool)])
    gone[np.searchsorted(ext, gone_ids)] = True
    if (degree[gone] != 0).any():
        return None
    merged = delta if extra is None else (extra + delta).tocsr()
    merged.eliminate_zeros()
    terms = graph.terms.extended([t[1] for t in new_terms])
    index = graph.index.changed({t[1]: n0 + i for i, t in enumerate(new_terms)}, gone if gone.any() else None)
    return TokenGraph(version=version, token_ids=ext, terms=terms, index=index, weights=weights, degree=degree,
                      edges=edge_count, extra=merged, gone=gone if gone.any() else None)


def _advanced_postings(version: int, postings: Postings, graph: TokenGraph, fresh: np.ndarray,
                       chunks: tuple[np.ndarray, np.ndarray], rows: list[tuple], removed: np.ndarray,
                       df_now: tuple[np.ndarray, np.ndarray], fresh_vectors: np.ndarray) -> Postings:
    """The postings with the new chunks' rows in ``extra``, the removed rows no
    longer live, and the touched tokens' document frequencies current. ``chunks``:
    the new chunks' lengths and documents."""
    r0, n = len(postings.chunk_ids), graph.nodes
    lengths, documents = chunks
    chunk_ids = np.concatenate([postings.chunk_ids, fresh])
    shape = (len(chunk_ids), n)
    live = np.ones(r0, dtype=bool) if postings.live is None else postings.live.copy()
    live[removed] = False
    live = np.concatenate([live, np.ones(len(fresh), dtype=bool)])
    df = np.concatenate([postings.df, np.zeros(n - len(postings.df), dtype=np.int64)])
    touched, values = df_now
    df[np.searchsorted(graph.token_ids, touched)] = values
    added = sp.csc_matrix((np.array([r[2] for r in rows], dtype=np.float64),
                           (np.searchsorted(chunk_ids, [r[0] for r in rows]).astype(np.int64),
                            np.searchsorted(graph.token_ids, [r[1] for r in rows]).astype(np.int64))), shape=shape)
    extra = added if postings.extra is None else (_padded(postings.extra, shape) + added).tocsc()
    vectors = postings.vectors.added(fresh, fresh_vectors)
    return Postings(version=version, chunk_ids=chunk_ids, tf=_padded(postings.tf, shape),
                    lengths=np.concatenate([postings.lengths, lengths]),
                    documents=np.concatenate([postings.documents, documents]), df=df, vectors=vectors,
                    extra=extra, live=None if live.all() else live)


def _padded(m: sp.csr_matrix | sp.csc_matrix, shape: tuple[int, int]) -> sp.csr_matrix | sp.csc_matrix:
    """``m`` grown to ``shape`` with empty rows and columns, sharing its data and
    indices (they may be a read-only mapping: nothing of the matrix's size is
    copied, only the pointer array is extended)."""
    major = shape[0] if isinstance(m, sp.csr_matrix) else shape[1]
    indptr = np.concatenate([m.indptr, np.full(major + 1 - len(m.indptr), m.indptr[-1], dtype=m.indptr.dtype)])
    return type(m)((m.data, m.indices, indptr.astype(m.indices.dtype, copy=False)), shape=shape, copy=False)


def folded(graph: TokenGraph, postings: Postings) -> tuple[TokenGraph, Postings]:
    """An overlay merged into one base without its gone tokens and removed rows
    (copies of the graph's and the postings' size): what a full read of the
    same version gives, and what the shared files hold."""
    if graph.extra is None and graph.gone is None and postings.extra is None and postings.live is None:
        return graph, postings
    keep = np.ones(graph.nodes, dtype=bool) if graph.gone is None else ~graph.gone
    rows = np.ones(len(postings.chunk_ids), dtype=bool) if postings.live is None else postings.live
    w = graph.current_weights()
    tf = postings.tf if postings.extra is None else (postings.tf + postings.extra).tocsc()
    if not keep.all():
        w = w[keep][:, keep]
        tf = tf[:, keep]
    if not rows.all():
        tf = tf[rows]
    tf = sp.csc_matrix(tf, copy=True)
    tf.sum_duplicates()
    tf.sort_indices()
    new_graph = from_weights(graph.version, graph.token_ids[keep], Terms(graph.terms.by_node[keep]), w.tocsr())
    ids = postings.chunk_ids[rows]
    return new_graph, Postings(version=postings.version, chunk_ids=ids, tf=tf, lengths=postings.lengths[rows],
                               documents=postings.documents[rows],
                               df=postings.df[keep], vectors=Vectors.of(ids, postings.vectors.rows(ids)))


def shared_arrays(graph: TokenGraph, postings: Postings) -> dict[str, np.ndarray]:
    """The arrays of a graph and its postings as pgrag.graph_files stores them
    (an overlay is shared as the base it folds to)."""
    graph, postings = folded(graph, postings)
    w, tf = graph.weights, postings.tf
    vector_ids, vectors = postings.vectors.merged()
    if not (w.has_sorted_indices and tf.has_sorted_indices):   # canonical before mapping read-only
        w, tf = w.sorted_indices(), tf.sorted_indices()
    return {"token_ids": graph.token_ids, "terms": graph.terms.by_node, "sorted_terms": graph.index.sorted_terms,
            "order": graph.index.order, "degree": graph.degree,
            "w_data": w.data, "w_indices": w.indices, "w_indptr": w.indptr,
            "chunk_ids": postings.chunk_ids, "tf_data": tf.data, "tf_indices": tf.indices, "tf_indptr": tf.indptr,
            "lengths": postings.lengths, "documents": postings.documents, "df": postings.df,
            "vector_ids": vector_ids, "vectors": vectors}


def _mapped(found: tuple[int, dict[str, np.ndarray]] | None) -> tuple[TokenGraph, Postings] | None:
    """A graph and its postings over arrays mapped by pgrag.graph_files (no copy)."""
    if found is None:
        return None
    version, a = found
    n = len(a["token_ids"])
    weights = sp.csr_matrix((a["w_data"], a["w_indices"], a["w_indptr"]), shape=(n, n), copy=False)
    graph = TokenGraph(version=version, token_ids=a["token_ids"], terms=Terms(a["terms"]),
                       index=TermIndex(a["sorted_terms"], a["order"]), weights=weights, degree=a["degree"],
                       edges=weights.nnz // 2)
    postings = Postings(version=version, chunk_ids=a["chunk_ids"],
                        tf=sp.csc_matrix((a["tf_data"], a["tf_indices"], a["tf_indptr"]),
                                         shape=(len(a["chunk_ids"]), n), copy=False),
                        lengths=a["lengths"], documents=a["documents"], df=a["df"],
                        vectors=Vectors.of(a["vector_ids"], a["vectors"]))
    return graph, postings


def _from_database(db: "QueryRunner", corpus_id: int, attempts: int) -> tuple[TokenGraph, Postings]:
    for _ in range(attempts):
        graph = token_graph(db, corpus_id)
        postings = load_postings(db, corpus_id, graph)
        if postings is not None:
            return graph, postings
    raise PgragError(f"corpus {corpus_id} changed {attempts} times while its index was read; try again")


def clear_cache() -> None:
    with _cache_lock:
        _cache.clear()
