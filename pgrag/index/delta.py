"""A change laid over a cached version of the index instead of reading it again.

After an ingest or a delete, ``advance`` builds the current version from a
cached graph and postings (which may be a read-only mapping shared by every
process) plus what changed since: the new chunks' postings, edges and vectors,
and the removed chunks' rows and edge counts from the removal log, all in small
overlays (``extra``, ``live``, ``gone``, a vector block). Nothing proportional to
the corpus is read or copied. Each query then pays a little for every change the
overlay carries, so past FOLD_SHARE of the chunks changed (``wants_fold``) the
query that finds it so merges the overlay into a new base (``folded``): what a
full read of the same version gives, and what the shared files hold.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from ..queries import query
from .graph import TokenGraph, edge_matrix, from_weights
from .postings import Postings
from .terms import Terms
from .vectors import Vectors, read_vectors

if TYPE_CHECKING:
    from ..context import QueryRunner

# Past this many blocks of chunk vectors an overlay is folded (each lookup
# searches every block).
MAX_VECTOR_BLOCKS = 32
# Past this share of new or removed chunks a full read is as cheap as a delta.
DELTA_MAX_SHARE = 0.1
# Past this share of chunks changed since the base, an overlay is folded into a
# new base (by the query that finds it so): each query pays a little for every change it carries.
FOLD_SHARE = 0.02
# Past this many logged edge counts of removed chunks per edge of the graph, a
# full read: the overlay would carry them into every query until its fold.
MAX_PAIRS_SHARE = 0.1


def wants_fold(postings: Postings) -> bool:
    """Whether an overlay has grown past its share and should be folded."""
    return (postings.changed_rows > FOLD_SHARE * len(postings.chunk_ids)
            or len(postings.vectors.blocks) > MAX_VECTOR_BLOCKS)


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
        fresh_vectors = read_vectors(conn, corpus_id, fresh_ids)
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
