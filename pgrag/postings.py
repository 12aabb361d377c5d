"""A corpus's BM25 postings as one sparse matrix, for TIGRAG's one-hop step.

TIGRAG scores a chunk by ρ(c) = Σ_v p̂(v) · BM25(v, c) over the top-γ tokens of the
PPR (``pgrag.tigrag_pool`` does it in SQL, one join over the postings per query).
Here the BM25 weight of every (chunk, token) posting is computed once into a
chunk × token CSC matrix whose columns are the token graph's nodes, so that
ρ = B · p̂ is one sparse product, and the candidates, the cumulative-mass cut and
the pool cap come from that same vector.

The matrix is cached per database and corpus in this process next to the token
graph and keyed by the same graph version (every ingest or delete bumps it: the
postings, document frequencies and chunk lengths change only then), so a query
never pairs a graph with postings of another version. The chunks' embeddings
travel with them, so that TIGRAG's rerank and ThreadRAG's BM25 ranking need no
query over the pool. After a small change (``advance``) the next query applies
it to the cached version instead of reading the whole one.
"""

from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import scipy.sparse as sp

from .exceptions import PgragError
from .graph import Terms, TokenGraph, cached_graph, edge_matrix, from_weights, parse_triples, remember, token_graph, weights_of
from .queries import query

if TYPE_CHECKING:
    from .context import QueryRunner

K1, B = 1.2, 0.75   # Okapi BM25, as pgrag.bm25 and pgrag.tigrag_pool


# Past this many blocks a delta merges them (one copy of every vector).
MAX_VECTOR_BLOCKS = 8


@dataclass(frozen=True)
class Vectors:
    """Chunk embeddings (unit rows, float32) by chunk id, in blocks of ascending
    ids: a delta adds a block for the new chunks instead of copying every vector
    (115 MB at 10x 2Wiki). Rows of deleted chunks may stay until a merge; only
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

    def added(self, ids: np.ndarray, rows: np.ndarray, keep: np.ndarray) -> "Vectors":
        """These vectors and those of chunks ``ids``; past MAX_VECTOR_BLOCKS one
        block of the ``keep`` chunks (ascending) and the new ones."""
        blocks = self.blocks + ((np.asarray(ids, dtype=np.int64), rows),)
        if len(blocks) <= MAX_VECTOR_BLOCKS:
            return Vectors(blocks)
        every = np.concatenate([np.asarray(keep, dtype=np.int64), np.asarray(ids, dtype=np.int64)])
        return Vectors.of(every, Vectors(blocks).rows(every))

    def merged(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids, rows) in one block, ascending: what the shared files hold."""
        if len(self.blocks) == 1:
            return self.blocks[0]
        ids = np.unique(np.concatenate([b[0] for b in self.blocks]))
        return ids, self.rows(ids)


@dataclass(frozen=True)
class Postings:
    """BM25(v, c) for every posting of one corpus at one graph version."""

    version: int
    chunk_ids: np.ndarray     # row -> chunk_id, ascending
    bm25: sp.csc_matrix       # chunks × graph nodes
    tf: np.ndarray            # term frequency of each entry of bm25 (same order)
    lengths: np.ndarray       # row -> chunk length in tokens
    df: np.ndarray            # column -> document frequency
    # each chunk's embedding, unit length (float32): the rerank's cosines are one
    # product here instead of a query over the pool (docs/SCALING.md: memory)
    vectors: Vectors

    @property
    def nbytes(self) -> int:
        """Memory held by the arrays (what a process pays for the cache)."""
        m = self.bm25
        return int(sum(a.nbytes for a in (m.data, m.indices, m.indptr, self.chunk_ids, self.tf, self.lengths,
                                          self.df))) + self.vectors.nbytes

    def bm25_top(self, columns: list[int], depth: int) -> list[int]:
        """The ``depth`` best chunk ids by Okapi BM25 for query tokens ``columns``
        (graph node indexes, each counted once), best first, ties by chunk id:
        the ranking of SQL's ``pgrag.bm25`` from the cached weights."""
        columns = sorted(set(columns))
        if not columns or depth <= 0:
            return []
        sub = self.bm25[:, columns]
        rows = np.unique(sub.indices)
        if not len(rows):
            return []
        score = np.asarray(sub.sum(axis=1)).ravel()[rows]
        order = np.lexsort((self.chunk_ids[rows], -score))[:depth]
        return [int(c) for c in self.chunk_ids[rows[order]]]

    def cosines(self, chunk_ids: list[int], embeddings: list[np.ndarray]) -> dict[int, float]:
        """Each chunk's best cosine to any of ``embeddings`` (what the SQL
        ``pgrag.chunk_cosines`` gives), from the cached vectors."""
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

    def pool(self, nodes: np.ndarray, weights: np.ndarray, seeds: list[int], *, threshold: float,
             max_pool: int, bm25: bool = True) -> list[tuple[int, float, int]]:
        """(chunk_id, ρ, candidates) of the pool, highest ρ first: the same rows as
        ``pgrag.tigrag_pool``. Candidates hold any expanded token (``nodes``, graph
        node indexes weighted by ``weights``) or query token (``seeds``, weight 0);
        the pool is the shortest prefix by ρ holding ``threshold`` of the total ρ,
        at most ``max_pool`` chunks. Without ``bm25`` a posting counts 1 (the
        paper's "no BM25" ablation)."""
        columns, where = np.unique(np.concatenate([np.asarray(nodes, dtype=np.int64),
                                                   np.asarray(seeds, dtype=np.int64)]), return_inverse=True)
        w = np.zeros(len(columns))
        np.add.at(w, where[:len(nodes)], np.asarray(weights, dtype=np.float64))
        sub = self.bm25[:, columns]
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
                   lengths: np.ndarray, chunk: np.ndarray, token: np.ndarray, tf: np.ndarray,
                   vectors: Vectors) -> Postings:
    """The matrix from the corpus's tokens (ids ascending, as the graph's nodes, with
    their document frequencies), chunks (ids ascending, with their lengths in
    tokens and embeddings) and postings (chunk id, token id, term frequency)."""
    row = np.searchsorted(chunk_ids, chunk)
    col = np.searchsorted(graph_tokens, token)
    counts = sp.csc_matrix((tf.astype(np.float64), (row, col)), shape=(len(chunk_ids), len(graph_tokens)))
    counts.sort_indices()
    return weighted(version, np.asarray(chunk_ids, dtype=np.int64), counts, lengths, token_df, vectors)


def unit_rows(vectors: list[Any] | np.ndarray, dim: int) -> np.ndarray:
    """Embeddings as a float32 matrix of unit rows (``dim`` columns even when empty)."""
    # pgvector's binary loader gives Vector objects, the text one and SPI arrays
    rows = [v.to_numpy() if hasattr(v, "to_numpy") else v for v in vectors]
    m = np.asarray(rows, dtype=np.float32).reshape(-1, dim)
    return m / np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)


def weighted(version: int, chunk_ids: np.ndarray, counts: sp.csc_matrix, lengths: np.ndarray,
             df: np.ndarray, vectors: Vectors) -> Postings:
    """BM25 weights for term-frequency ``counts`` (chunks × tokens, CSC), given each
    chunk's length and each token's document frequency: every weight depends on
    the corpus's size and mean length, so an ingest reweighs them all."""
    n = float(len(chunk_ids))
    avgdl = max(float(lengths.mean()) if len(lengths) else 0.0, 1e-9)
    col = np.repeat(np.arange(counts.shape[1]), np.diff(counts.indptr))
    d = df.astype(np.float64)[col]
    idf = np.log(1 + (n - d + 0.5) / (d + 0.5))
    dl = lengths.astype(np.float64)[counts.indices]
    tf = np.asarray(counts.data, dtype=np.float64)
    weight = idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * dl / avgdl))
    matrix = sp.csc_matrix((weight, counts.indices, counts.indptr), shape=counts.shape)
    return Postings(version=version, chunk_ids=chunk_ids, bm25=matrix, tf=tf,
                    lengths=np.asarray(lengths, dtype=np.int64), df=np.asarray(df, dtype=np.int64),
                    vectors=vectors)


def _read(conn: Any, corpus_id: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(chunk, token, tf) of every posting: a binary COPY over psycopg, arrays over SPI."""
    params = {"corpus_id": corpus_id}
    if not hasattr(conn, "cursor"):
        c, t, f = conn.execute(query("postings_arrays"), params).fetchone()
        return np.asarray(c, dtype=np.int64), np.asarray(t, dtype=np.int64), np.asarray(f, dtype=np.int64)
    buffer = bytearray()
    with conn.cursor().copy(query("postings_copy"), params) as copy:
        for block in copy:
            buffer += block
    return parse_triples(bytes(buffer))


def load_postings(db: "QueryRunner", corpus_id: int, graph: TokenGraph) -> Postings | None:
    """The postings at ``graph``'s version, or None when the corpus has moved on
    since the graph was read (the caller reads both again)."""
    with db.transaction() as conn:
        version = conn.execute(query("graph_version"), {"corpus_id": corpus_id}).fetchone()
        if version is None or int(version[0]) != graph.version:
            return None
        tokens = conn.execute(query("token_df"), {"corpus_id": corpus_id}).fetchall()
        chunks = conn.execute(query("chunk_lengths"), {"corpus_id": corpus_id}).fetchall()
        chunk, token, tf = _read(conn, corpus_id)
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
                          np.fromiter((c[1] for c in chunks), np.int64, len(chunks)), chunk, token, tf, vectors)


def _vectors(conn: Any, corpus_id: int, chunk_ids: np.ndarray, every: bool = False) -> np.ndarray | None:
    """The unit embeddings of ``chunk_ids`` (ascending; ``every`` chunk of the
    corpus, read without sending their ids), one row each; None when the chunks
    are no longer those (a concurrent change committed between two statements:
    the caller reads again, as for a version change)."""
    rows = conn.execute(query("chunk_vectors"), {
        "corpus_id": corpus_id, "chunk_ids": None if every else chunk_ids.tolist()}).fetchall()
    if [r[0] for r in rows] != chunk_ids.tolist():
        return None
    dim = int(conn.execute(query("corpus_dim"), {"corpus_id": corpus_id}).fetchone()[0])
    return unit_rows([r[1] for r in rows], dim)


_cache: dict[tuple[str, int], Postings] = {}
_cache_lock = threading.Lock()


class RankingIndex(NamedTuple):
    graph: TokenGraph
    postings: Postings
    source: str          # "memory" (this process's cache), "files" (mapped), "delta" or "database"


def ranking_index(db: "QueryRunner", corpus_id: int, attempts: int = 5) -> RankingIndex:
    """The corpus's token graph and postings matrix, of one and the same version:
    from this process's cache, else mapped from the machine's shared files
    (pgrag.graph_files), else read from the database and then shared."""
    from . import graph_files

    key = (db.dsn, corpus_id)
    version = int(db.fetch_row("graph_version", {"corpus_id": corpus_id})[0])
    with _cache_lock:
        cached = _cache.get(key)
    graph = cached_graph(db, corpus_id)
    if cached is not None and graph is not None and cached.version == graph.version == version:
        return RankingIndex(graph, cached, "memory")
    pair, source = graph_files.load(db, corpus_id, version), "files"
    if pair is None and cached is not None and graph is not None and cached.version == graph.version < version:
        pair, source = advance(db, corpus_id, graph, cached), "delta"
    if pair is None:
        source = "database"
        pair = _from_database(db, corpus_id, attempts)
    stem = graph_files.corpus_key(db, corpus_id) if source != "files" and graph_files.root() else None
    if stem is not None and source == "database":
        _share(stem, pair)
    elif stem is not None:
        # Off the query's path: the next process maps the files once they exist.
        threading.Thread(target=_share, args=(stem, pair), name="pgrag-share", daemon=True).start()
    graph, postings = pair
    with _cache_lock:
        if key not in _cache or _cache[key].version <= postings.version:
            _cache[key] = postings
    remember(db, corpus_id, graph)
    return RankingIndex(graph, postings, source)


def _share(key: str, pair: tuple[TokenGraph, Postings]) -> None:
    from . import graph_files

    try:
        graph_files.publish(key, *pair)
    except OSError as exc:   # sharing is an optimisation: this process still has its copy
        warnings.warn(f"pgrag: could not share the graph files ({exc})", stacklevel=2)


# Past this share of new chunks a full read is as cheap as a delta.
DELTA_MAX_SHARE = 0.1


def advance(db: "QueryRunner", corpus_id: int, graph: TokenGraph, postings: Postings,
            max_share: float | None = None) -> tuple[TokenGraph, Postings] | None:
    """The current version from a cached one plus what changed since: chunks
    added (their postings, edges and vectors) and chunks removed (a delete, or
    the old version of a replaced document: their rows go, and the edges among
    their tokens are read again), with every token's document frequency. None
    when more than ``max_share`` of the chunks changed, or when the corpus moved
    on while reading: the caller reads the whole version instead. The result
    equals a full read (tests/integration/test_delta.py)."""
    share = DELTA_MAX_SHARE if max_share is None else max_share
    params = {"corpus_id": corpus_id}
    with db.transaction() as conn:
        version = conn.execute(query("graph_version"), params).fetchone()
        chunks = conn.execute(query("chunk_lengths"), params).fetchall()
        tokens = conn.execute(query("token_df"), params).fetchall()
        change = _Change.of(postings, graph, np.fromiter((c[0] for c in chunks), np.int64, len(chunks)),
                            np.fromiter((t[0] for t in tokens), np.int64, len(tokens)))
        if (version is None or int(version[0]) <= graph.version or change is None
                or change.size > share * max(len(postings.chunk_ids), 1)):
            return None
        after = int(graph.token_ids[-1]) if graph.nodes else 0
        new_terms = conn.execute(query("tokens_after"), {**params, "after": after}).fetchall()
        fresh = change.fresh.tolist()
        rows = conn.execute(query("postings_of_chunks"), {**params, "chunk_ids": fresh}).fetchall()
        edges = conn.execute(query("edges_of_chunks"), {**params, "chunk_ids": fresh}).fetchall()
        pa, pb = change.pairs(postings, graph)
        now = conn.execute(query("edges_of_pairs"), {**params, "a": pa.tolist(), "b": pb.tolist()}).fetchall()
        fresh_vectors = _vectors(conn, corpus_id, change.fresh)
        again = conn.execute(query("graph_version"), params).fetchone()
    if (again is None or again[0] != version[0] or fresh_vectors is None
            or [t[0] for t in new_terms] != change.token_ids[int(change.kept_nodes.sum()):].tolist()):
        return None
    vectors = postings.vectors.added(change.fresh, fresh_vectors, postings.chunk_ids[change.kept_rows])
    v = int(version[0])
    new_graph = _advanced_graph(v, graph, change, new_terms, edges, (pa, pb, now))
    if new_graph is None:
        return None
    counts = _advanced_counts(postings, change, rows)
    lengths = np.fromiter((c[1] for c in chunks), np.int64, len(chunks))
    df = np.fromiter((t[1] for t in tokens), np.int64, len(tokens))
    return new_graph, weighted(v, change.chunk_ids, counts, lengths, df, vectors)


@dataclass(frozen=True)
class _Change:
    """What a delta applies: the chunks and tokens kept from the cached version
    (masks over its rows and nodes) and the chunks added since."""

    chunk_ids: np.ndarray      # the current chunks, ascending
    token_ids: np.ndarray      # the current tokens, ascending
    kept_rows: np.ndarray      # bool per cached chunk row
    kept_nodes: np.ndarray     # bool per cached graph node
    fresh: np.ndarray          # chunk ids added since

    @property
    def size(self) -> int:
        return len(self.fresh) + int((~self.kept_rows).sum())

    @classmethod
    def of(cls, postings: Postings, graph: TokenGraph, chunk_ids: np.ndarray,
           token_ids: np.ndarray) -> "_Change | None":
        """None unless the current ids are the cached ones kept plus new ones
        above them (ids only grow), which is what the delta can apply."""
        kept_rows = np.isin(postings.chunk_ids, chunk_ids)
        kept_nodes = np.isin(graph.token_ids, token_ids)
        fresh = chunk_ids[len(postings.chunk_ids[kept_rows]):]
        if (not np.array_equal(chunk_ids[:len(chunk_ids) - len(fresh)], postings.chunk_ids[kept_rows])
                or (len(fresh) and len(postings.chunk_ids) and fresh[0] <= postings.chunk_ids[-1])
                or not np.array_equal(token_ids[:int(kept_nodes.sum())], graph.token_ids[kept_nodes])):
            return None
        return cls(chunk_ids=chunk_ids, token_ids=token_ids, kept_rows=kept_rows, kept_nodes=kept_nodes,
                   fresh=fresh)

    def pairs(self, postings: Postings, graph: TokenGraph) -> tuple[np.ndarray, np.ndarray]:
        """Token id pairs (a < b) that co-occur in a removed chunk: the only edges a
        removal can change (an edge joins two tokens of one chunk)."""
        removed = np.flatnonzero(~self.kept_rows)
        if not len(removed):
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        rows = postings.bm25.tocsr()[removed]
        found = []
        for r in range(rows.shape[0]):
            cols = rows.indices[rows.indptr[r]:rows.indptr[r + 1]]
            i, j = np.triu_indices(len(cols), 1)
            found.append(np.stack([cols[i], cols[j]], axis=1))
        pair = np.unique(np.concatenate(found), axis=0)
        a, b = graph.token_ids[pair[:, 0]], graph.token_ids[pair[:, 1]]
        return np.minimum(a, b), np.maximum(a, b)


def _advanced_graph(version: int, graph: TokenGraph, change: _Change, new_terms: list[tuple],
                    edges: list[tuple], removed: tuple[np.ndarray, np.ndarray, list[tuple]]) -> TokenGraph | None:
    """The cached weights with the new chunks' edges added, the removed chunks'
    pairs set to their current weights, and the tokens gone dropped; None if a
    dropped token still has an edge (then the caller reads everything)."""
    ext = np.concatenate([graph.token_ids, np.array([t[0] for t in new_terms], dtype=np.int64)])
    n = len(ext)
    sym = _padded(weights_of(graph), (n, n))
    a, b, w = (np.array([e[i] for e in edges], dtype=np.int64 if i < 2 else np.float64) for i in range(3))
    sym = (sym + edge_matrix(ext, a, b, w, n)).tocsr()
    pa, pb, now = removed
    if len(pa):
        current = {(int(x), int(y)): float(z) for x, y, z in now}
        target = np.array([current.get((int(x), int(y)), 0.0) for x, y in zip(pa, pb)])
        ia, ib = np.searchsorted(ext, pa), np.searchsorted(ext, pb)
        present = np.asarray(sym[ia, ib]).ravel()
        sym = (sym + edge_matrix(ext, pa, pb, target - present, n)).tocsr()
        sym.eliminate_zeros()
    keep = np.concatenate([change.kept_nodes, np.ones(len(new_terms), dtype=bool)])
    if not keep.all():   # a fancy index copies every edge: only when a token went away
        if sym[~keep].nnz:
            return None
        sym = sym[keep][:, keep].tocsr()
    terms = Terms(graph.terms.by_node[change.kept_nodes]).extended([t[1] for t in new_terms])
    return from_weights(version, change.token_ids, terms, sym)


def _advanced_counts(postings: Postings, change: _Change, rows: list[tuple]) -> sp.csc_matrix:
    """Term frequencies: the kept rows and columns of the cached ones, padded,
    plus the new chunks' postings (chunks × tokens, CSC, sorted)."""
    old = sp.csc_matrix((postings.tf, postings.bm25.indices, postings.bm25.indptr), shape=postings.bm25.shape)
    if not change.kept_rows.all():
        old = old[change.kept_rows].tocsc()
    if not change.kept_nodes.all():
        old = old[:, change.kept_nodes].tocsc()
    counts = _padded(old, (len(change.chunk_ids), len(change.token_ids)))
    added = sp.csc_matrix((np.array([r[2] for r in rows], dtype=np.float64),
                           (np.searchsorted(change.chunk_ids, [r[0] for r in rows]),
                            np.searchsorted(change.token_ids, [r[1] for r in rows]))),
                          shape=(len(change.chunk_ids), len(change.token_ids)))
    counts = (counts + added).tocsc()
    counts.sort_indices()
    return counts


def _padded(m: sp.csr_matrix | sp.csc_matrix, shape: tuple[int, int]) -> sp.csr_matrix | sp.csc_matrix:
    """``m`` with empty rows and columns appended up to ``shape`` (a new matrix:
    ``m`` may be a read-only mapping)."""
    major = shape[0] if isinstance(m, sp.csr_matrix) else shape[1]
    indptr = np.concatenate([m.indptr, np.full(major + 1 - len(m.indptr), m.indptr[-1], dtype=m.indptr.dtype)])
    return type(m)((np.array(m.data), np.array(m.indices), indptr), shape=shape)


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
