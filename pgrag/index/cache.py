"""One cache per process of each corpus's token graph and postings, and the
machine's shared copy of them.

Reading a corpus's index from the database is the expensive part (a COPY of
every edge and posting), so this process keeps the last version it saw of each
corpus, keyed by database (its DSN) and corpus id, the graph and its postings in
one entry. Every ingest or delete bumps the corpus's graph version, and a query
takes the index from here when the version is current, else maps the version
another process wrote to the shared files (pgrag.index.shared_files), else lays
what changed over a cached version (pgrag.index.delta), else reads the database
and shares what it read. A graph and postings of different versions are never
paired: ``token_graph`` (the in-server PPR, which wants only the graph) may move
an entry's graph on alone, and ``ranking_index`` then reads both again.
"""

from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import scipy.sparse as sp

from ..exceptions import CorpusNotFound, PgragError
from .delta import advance, folded, wants_fold
from .graph import TokenGraph, load_graph
from .postings import Postings, load_postings
from .terms import TermIndex, Terms
from .vectors import Vectors

if TYPE_CHECKING:
    from ..context import QueryRunner


@dataclass(frozen=True)
class Cached:
    """What this process holds of one corpus: its graph, and the postings of
    that version or an older one (``token_graph`` moves the graph on alone)."""

    graph: TokenGraph
    postings: Postings | None = None


_cache: dict[tuple[str, int], Cached] = {}
_cache_lock = threading.Lock()


def cached(db: "QueryRunner", corpus_id: int) -> Cached | None:
    """This process's entry for the corpus, of whatever version."""
    with _cache_lock:
        return _cache.get((db.dsn, corpus_id))


def cached_graph(db: "QueryRunner", corpus_id: int) -> TokenGraph | None:
    """This process's cached graph of the corpus, of whatever version."""
    entry = cached(db, corpus_id)
    return entry.graph if entry is not None else None


def remember(db: "QueryRunner", corpus_id: int, graph: TokenGraph, postings: Postings | None = None) -> None:
    """Cache ``graph`` (and ``postings``) for this process, each unless a newer
    version of it is cached."""
    key = (db.dsn, corpus_id)
    with _cache_lock:
        held = _cache.get(key)
        if held is not None:
            if held.graph.version > graph.version:
                graph = held.graph
            if held.postings is not None and (postings is None or held.postings.version > postings.version):
                postings = held.postings
        _cache[key] = Cached(graph, postings)


def clear_cache() -> None:
    """Forget every corpus's graph and postings (the shared files stay)."""
    with _cache_lock:
        _cache.clear()


def token_graph(db: "QueryRunner", corpus_id: int) -> TokenGraph:
    """The corpus's graph, from this process's cache when its version is current."""
    version = int(db.fetch_row("graph_version", {"corpus_id": corpus_id})[0])
    graph = cached_graph(db, corpus_id)
    if graph is not None and graph.version == version:
        return graph
    graph = load_graph(db, corpus_id)
    remember(db, corpus_id, graph)
    return graph


class RankingIndex(NamedTuple):
    graph: TokenGraph
    postings: Postings
    source: str   # "memory" (this process's cache), "files" (mapped), "delta", "fold" (a delta folded) or "database"


def ranking_index(db: "QueryRunner", corpus_id: int, attempts: int = 5) -> RankingIndex:
    """The corpus's token graph and postings matrix, of one and the same version:
    from this process's cache, else mapped from the machine's shared files
    (pgrag.index.shared_files), each advanced by a delta when the corpus changed
    since (a small overlay: ``advance``), else read from the database and then shared."""
    from . import shared_files

    row = db.fetchone("graph_version", {"corpus_id": corpus_id})
    if row is None:   # every corpus has its row from creation: this one was dropped
        raise CorpusNotFound(f"corpus id {corpus_id} does not exist (dropped since it was opened?)")
    version = int(row[0])
    entry = cached(db, corpus_id)
    graph, held = (entry.graph, entry.postings) if entry is not None else (None, None)
    if held is not None and graph is not None and held.version == graph.version == version:
        return RankingIndex(graph, held, "memory")
    pair, source = mapped(shared_files.load(db, corpus_id, version)), "files"
    if pair is None and held is not None and graph is not None and held.version == graph.version < version:
        pair, source = advance(db, corpus_id, graph, held), "delta"
    if pair is None:
        # Another process may have shared an older version: map it and catch up.
        older = mapped(shared_files.load(db, corpus_id, version, latest=True))
        pair, source = (advance(db, corpus_id, *older), "delta") if older is not None else (None, "delta")
    if pair is None:
        source = "database"
        pair = from_database(db, corpus_id, attempts)
    if source == "delta" and wants_fold(pair[1]):
        # The overlay has grown past its share: this call folds it into a new
        # base, once for every FOLD_SHARE of the corpus changed. In this call,
        # not a thread of its own: no thread of pgrag's outlives its call (in a
        # backend it would outlive the statement; anywhere it would share the
        # interpreter with whatever the caller does next).
        pair, source = folded(*pair), "fold"
    graph, postings = pair
    remember(db, corpus_id, graph, postings)
    stem = shared_files.corpus_key(db, corpus_id) if source in ("database", "fold") and shared_files.root() else None
    if stem is not None:
        _share(stem, pair)
    return RankingIndex(graph, postings, source)


def _share(key: str, pair: tuple[TokenGraph, Postings]) -> None:
    from . import shared_files

    try:
        shared_files.publish(key, pair[0].version, shared_arrays(*pair))
    except OSError as exc:   # sharing is an optimisation: this process still has its copy
        warnings.warn(f"pgrag: could not share the graph files ({exc})", stacklevel=2)


def shared_arrays(graph: TokenGraph, postings: Postings) -> dict[str, np.ndarray]:
    """The arrays of a graph and its postings as pgrag.index.shared_files stores them
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


def mapped(found: tuple[int, dict[str, np.ndarray]] | None) -> tuple[TokenGraph, Postings] | None:
    """A graph and its postings over arrays mapped by pgrag.index.shared_files (no copy)."""
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


def from_database(db: "QueryRunner", corpus_id: int, attempts: int) -> tuple[TokenGraph, Postings]:
    """A graph and its postings of one version, read from the database (the
    graph from the cache when current); the corpus may change ``attempts`` times
    between the two reads before this gives up."""
    for _ in range(attempts):
        graph = token_graph(db, corpus_id)
        postings = load_postings(db, corpus_id, graph)
        if postings is not None:
            return graph, postings
    raise PgragError(f"corpus {corpus_id} changed {attempts} times while its index was read; try again")
