"""After a small ingest, delete or replacement the next query advances the
cached graph and postings by what changed (pgrag.index.delta.advance) instead of
reading the whole version, and gets exactly what a full read gives; a large
change reads it all."""

from __future__ import annotations

import numpy as np
import psycopg
import pytest

from pgrag.index import cache, delta, graph, pagerank
from pgrag.index.cache import ranking_index
from pgrag.index.delta import folded
from pgrag.index.graph import load_graph
from pgrag.index.postings import load_postings
from tests.conftest import seeded_database

NEW = [{"id": f"n{i}", "title": f"Waldrada {i}",
        "text": f"Waldrada {i} was the mistress of Lothair II and lived in Zanzibar{i}. She had a son, Hugh."}
       for i in range(2)]


database_uri = seeded_database("delta")


@pytest.fixture
def kb(db, monkeypatch):
    """Corpus "delta": the sample, built once (conftest.seeded_database). Its
    overlays stay overlays (a few chunks are far past the fold share of a corpus
    this small) unless a test lowers FOLD_SHARE again."""
    monkeypatch.setattr(delta, "FOLD_SHARE", 1.0)
    return db.corpus("delta")


def assert_same_as_a_full_read(db, kb, index) -> None:
    """The overlay folds to exactly what a full read gives, and ranks as it does
    before folding (PPR by token, BM25 pools by chunk)."""
    full_graph = load_graph(db, kb.id)
    full = load_postings(db, kb.id, full_graph)
    assert full is not None and index.graph.version == full_graph.version == full.version
    g, p = folded(index.graph, index.postings)
    assert np.array_equal(g.token_ids, full_graph.token_ids) and g.terms == full_graph.terms
    assert (g.weights != full_graph.weights).nnz == 0 and g.edges == full_graph.edges == index.graph.edges
    assert np.array_equal(g.degree, full_graph.degree) and np.array_equal(g.dangling, full_graph.dangling)
    assert np.array_equal(p.chunk_ids, full.chunk_ids) and np.array_equal(p.df, full.df)
    assert (p.tf != full.tf).nnz == 0 and np.array_equal(p.lengths, full.lengths)
    assert np.array_equal(p.documents, full.documents)
    assert index.postings.documents_of(full.chunk_ids.tolist()) == dict(zip(full.chunk_ids.tolist(),
                                                                            full.documents.tolist()))
    assert abs(p.bm25 - full.bm25).max() < 1e-12
    assert np.array_equal(p.vectors.rows(full.chunk_ids), full.vectors.rows(full.chunk_ids))
    # exact nearest chunks over the overlay's blocks, removed chunks never among them
    queries = list(full.vectors.rows(full.chunk_ids[:3]))
    for depth in (3, len(full.chunk_ids) + 5):
        for (ids, scores), (want, cosines) in zip(index.postings.nearest(queries, depth),
                                                   full.nearest(queries, depth)):
            assert ids == want and np.allclose(scores, cosines, rtol=0, atol=1e-6)
    assert ([len(ids) for ids, _ in index.postings.nearest(queries, len(full.chunk_ids) + 5)]
            == [len(full.chunk_ids)] * 3)
    every = [full_graph.terms[i] for i in range(full_graph.nodes)]
    assert [g.index[t] for t in every] == list(range(full_graph.nodes))
    # the overlay as queries use it, unfolded
    overlay = index.graph
    nodes = [overlay.index[t] for t in every]
    assert np.array_equal(overlay.token_ids[nodes], full_graph.token_ids)
    for i in np.flatnonzero(overlay.gone) if overlay.gone is not None else []:
        assert overlay.index.get(overlay.terms[i]) != i     # gone, or back as a new token
    # the batched lookup is get()'s, over the base's, the new, the gone and unknown terms
    asked = every + [overlay.terms[i] for i in range(overlay.nodes)] + ["nosuchterm", "x" * 300, "a\0b"]
    assert overlay.index.nodes(asked).tolist() == [-1 if (n := overlay.index.get(t)) is None else n for t in asked]
    for seeds in (every[:3], every[10:12], every[-4:]):
        mine = pagerank.push_pagerank(overlay, [overlay.index[t] for t in seeds])
        theirs = pagerank.push_pagerank(full_graph, [full_graph.index[t] for t in seeds])
        # push's order of work follows node indexes, which the gone nodes shift:
        # both are within its documented per-node bound of the true PPR
        epsilon = 1e-4 * pagerank.PUSH_EPSILON_PER_TOLERANCE
        assert (abs(mine.scores[nodes] - theirs.scores) <= 2 * epsilon * full_graph.degree + 1e-15).all()
        # no mass on the gone nodes; float32 sweeps keep the total to their rounding
        mass = 1e-9 if overlay.weights.dtype == np.float64 else 1e-6
        assert abs(mine.scores.sum() - 1) < mass
        if overlay.gone is not None:
            assert abs(mine.scores[overlay.gone]).max() < 1e-15
        exact = pagerank.personalized_pagerank(overlay, [overlay.index[t] for t in seeds])
        assert np.allclose(exact.scores[nodes], pagerank.personalized_pagerank(
            full_graph, [full_graph.index[t] for t in seeds]).scores, rtol=0, atol=1e-12)
        pool = index.postings.pool(np.array([overlay.index[t] for t in seeds]), np.ones(len(seeds)), [],
                                   threshold=1.0, max_pool=10_000)
        expected = full.pool(np.array([full_graph.index[t] for t in seeds]), np.ones(len(seeds)), [],
                             threshold=1.0, max_pool=10_000)
        assert [c for c, _, _ in pool] == [c for c, _, _ in expected]
        assert np.allclose([r for _, r, _ in pool], [r for _, r, _ in expected], rtol=0, atol=1e-12)


def test_a_small_ingest_is_applied_as_a_delta(db, kb, monkeypatch):
    monkeypatch.setenv("PGRAG_GRAPH_DIR", "off")   # so the step after the ingest cannot map files
    monkeypatch.setattr(delta, "DELTA_MAX_SHARE", 0.5)   # 2 new chunks on a corpus of a few
    cache.clear_cache()
    assert ranking_index(db, kb.id).source == "database"
    kb.ingest(NEW, progress=False)
    after = ranking_index(db, kb.id)
    assert after.source == "delta"
    assert_same_as_a_full_read(db, kb, after)
    hits = kb.retrieve("Who was the mistress of Lothair II?", method="tigrag", k=3)
    assert hits.trace.steps[1]["source"] == "memory"
    cache.clear_cache()
    fresh = kb.retrieve("Who was the mistress of Lothair II?", method="tigrag", k=3)
    assert fresh.trace.steps[1]["source"] == "database"
    assert [(h.provenance.chunk_id, h.score) for h in hits] == [(h.provenance.chunk_id, h.score) for h in fresh]


def test_a_delta_over_float32_weights_folds_to_a_full_read(db, kb, monkeypatch):
    """The same over a float32 base (pgrag.index.graph.compact_weights, its size threshold
    lowered for the sample corpus): the change matrix is float64, the fold
    float32 again, and both equal a full read."""
    monkeypatch.setenv("PGRAG_GRAPH_DIR", "off")
    monkeypatch.setattr(delta, "DELTA_MAX_SHARE", 0.5)
    monkeypatch.setattr(delta, "MAX_PAIRS_SHARE", 100.0)
    monkeypatch.setattr(graph, "COMPACT_MIN_ENTRIES", 0)
    cache.clear_cache()
    assert ranking_index(db, kb.id).graph.weights.dtype == np.float32
    kb.ingest(NEW, progress=False)
    kb.delete(["minaj"])
    after = ranking_index(db, kb.id)
    assert after.source == "delta" and after.graph.weights.dtype == np.float32
    assert folded(after.graph, after.postings)[0].weights.dtype == np.float32
    assert_same_as_a_full_read(db, kb, after)


def test_a_delete_and_a_replacement_are_applied_as_deltas(db, kb, wiki_docs, monkeypatch):
    monkeypatch.setenv("PGRAG_GRAPH_DIR", "off")
    monkeypatch.setattr(delta, "DELTA_MAX_SHARE", 0.5)
    monkeypatch.setattr(delta, "MAX_PAIRS_SHARE", 100.0)   # a few hundred edges: every pair is many
    cache.clear_cache()
    before = ranking_index(db, kb.id)
    kb.delete(["minaj"])                      # her words that no other document has leave the vocabulary
    gone = ranking_index(db, kb.id)
    assert gone.source == "delta" and gone.graph.gone is not None    # her tokens stay as isolated nodes
    assert folded(*gone[:2])[0].nodes == before.graph.nodes - int(gone.graph.gone.sum()) < before.graph.nodes
    assert_same_as_a_full_read(db, kb, gone)
    doc = next(d for d in wiki_docs if d["id"] == "lothair")
    kb.ingest([{"id": doc["id"], "title": doc["title"], "text": doc["text"] + " Zanzibar hosted it in 1999."}],
              progress=False)
    replaced = ranking_index(db, kb.id)
    assert replaced.source == "delta" and "zanzibar" in replaced.graph.index
    assert_same_as_a_full_read(db, kb, replaced)


def test_a_large_change_reads_the_whole_version(db, kb, monkeypatch):
    monkeypatch.setenv("PGRAG_GRAPH_DIR", "off")
    cache.clear_cache()
    ranking_index(db, kb.id)
    many = [{"id": f"m{i}", "title": f"M{i}", "text": f"Item {i} is a town in Lotharingia."} for i in range(5)]
    kb.ingest(many, progress=False)            # 5 new chunks on a few: past the 10 % share
    index = ranking_index(db, kb.id)
    assert index.source == "database"
    assert_same_as_a_full_read(db, kb, index)
    kb.delete([d["id"] for d in many])
    assert ranking_index(db, kb.id).source == "database"


def test_a_delete_with_more_pairs_than_edges_share_reads_the_whole_version(db, kb, monkeypatch):
    monkeypatch.setenv("PGRAG_GRAPH_DIR", "off")
    monkeypatch.setattr(delta, "DELTA_MAX_SHARE", 0.5)
    cache.clear_cache()
    ranking_index(db, kb.id)
    kb.delete(["minaj"])                     # one chunk, but hundreds of token pairs on a few hundred edges
    index = ranking_index(db, kb.id)
    assert index.source == "database"
    assert_same_as_a_full_read(db, kb, index)


@pytest.mark.slow
def test_a_server_backend_applies_the_delta_too(db, database_uri):
    """The same code over SPI: a backend that cached the graph advances it after
    an ingest made by another session."""
    import json
    from importlib import resources

    import psycopg

    kb = db.corpus("sample")
    kb.ingest(json.loads((resources.files("pgrag") / "data" / "sample_corpus.json").read_text()), progress=False)
    ask = "SELECT pgrag.retrieve_trace('sample', 'Who was the mistress of Lothair II?', 'tigrag', 3)"

    def source(trace: dict) -> str:
        return next(s for s in trace["trace"]["steps"] if s["step"] == "graph")["source"]

    with psycopg.connect(database_uri, autocommit=True) as c:
        c.execute(ask)                                      # the backend caches this version
        assert source(c.execute(ask).fetchone()[0]) == "memory"
        kb.ingest(NEW[:1], progress=False)                  # 1 chunk on 53: well under 10 %
        after = c.execute(ask).fetchone()[0]
        assert source(after) == "delta"
    cache.clear_cache()
    python = kb.retrieve("Who was the mistress of Lothair II?", method="tigrag", k=3)
    assert [h["chunk_id"] for h in after["hits"]] == [h.provenance.chunk_id for h in python]
    # The backend's model runs on one thread and this process's on every core: the
    # same float32 sums in another order differ in their last digits (about 1e-7).
    assert np.allclose([h["score"] for h in after["hits"]], [h.score for h in python], rtol=0, atol=1e-6)


def test_an_overlay_past_the_fold_share_is_folded_by_the_query_that_finds_it(db, kb, monkeypatch):
    """The query that would carry an overlay past the fold share folds it into
    a new base, in its own call (no thread left behind), shares it as files and
    caches it; the next query uses it from memory."""
    import threading

    from pgrag.index import shared_files

    monkeypatch.setattr(delta, "DELTA_MAX_SHARE", 0.5)
    monkeypatch.setattr(delta, "FOLD_SHARE", 0.0)
    cache.clear_cache()
    ranking_index(db, kb.id)
    kb.ingest(NEW, progress=False)
    threads = set(threading.enumerate())
    folded = ranking_index(db, kb.id)
    assert set(threading.enumerate()) <= threads
    assert folded.source == "fold"
    assert folded.graph.extra is None and folded.postings.extra is None and folded.postings.live is None
    after = ranking_index(db, kb.id)
    assert after.source == "memory" and after.graph.version == folded.graph.version
    assert after.postings is folded.postings
    assert_same_as_a_full_read(db, kb, after)
    cache.clear_cache()
    assert shared_files.load(db, kb.id, folded.graph.version) is not None
    assert ranking_index(db, kb.id).source == "files"


def test_a_chunk_without_tokens_is_added_and_removed_by_the_delta(db, kb, monkeypatch):
    """A chunk of stopwords only has no postings; its removal must still reach
    the delta (it counts in BM25's number of chunks)."""
    monkeypatch.setenv("PGRAG_GRAPH_DIR", "off")
    monkeypatch.setattr(delta, "DELTA_MAX_SHARE", 0.5)
    cache.clear_cache()
    ranking_index(db, kb.id)
    kb.ingest([{"id": "empty", "title": "", "text": "The of and."}], progress=False)
    added = ranking_index(db, kb.id)
    assert added.source == "delta"
    assert_same_as_a_full_read(db, kb, added)
    kb.delete(["empty"])
    gone = ranking_index(db, kb.id)
    assert gone.source == "delta"
    assert_same_as_a_full_read(db, kb, gone)


def test_the_removal_log_holds_each_chunks_own_edge_counts(db, kb, database_uri):
    """What pgrag_internal.unindex_documents logs for a removed chunk is what the chunk
    added to the edges: per chunk, summing to pgrag_internal.chunk_edge_counts (the
    ingest's counts; the two functions repeat one body and must stay in step)."""
    # enough chunks that the log (a tenth of them) keeps two removals
    kb.ingest([{"id": f"f{i}", "title": f"F{i}", "text": f"Filler {i} is a village."} for i in range(20)],
              progress=False)
    # plain psycopg, as an application in another language would call the SQL functions
    with psycopg.connect(database_uri) as conn:
        chunks = [r[0] for r in conn.execute(
            "SELECT c.chunk_id FROM pgrag.chunk c JOIN pgrag.document d USING (corpus_id, document_id) "
            "WHERE c.corpus_id = %s AND d.external_id IN ('minaj', 'lothair') ORDER BY 1", (kb.id,))]
        total = sorted(conn.execute("SELECT * FROM pgrag_internal.chunk_edge_counts(%s, %s)",
                                    (kb.id, chunks)).fetchall())
        by_chunk = conn.execute("SELECT * FROM pgrag_internal.chunk_edge_counts_by_chunk(%s, %s)",
                                (kb.id, chunks)).fetchall()
    assert total and len({c for c, *_ in by_chunk}) == len(chunks)
    summed: dict[tuple[int, int], int] = {}
    for _, a, b, w in by_chunk:
        summed[(a, b)] = summed.get((a, b), 0) + w
    assert sorted((a, b, w) for (a, b), w in summed.items()) == total
    kb.delete(["minaj", "lothair"])
    with psycopg.connect(database_uri) as conn:
        logged = conn.execute("SELECT chunk_id, edge_a, edge_b, edge_w FROM pgrag.chunk_removal "
                              "WHERE corpus_id = %s ORDER BY chunk_id", (kb.id,)).fetchall()
    assert [c for c, *_ in logged] == chunks
    assert sorted((c, a, b, w) for c, ea, eb, ew in logged for a, b, w in zip(ea, eb, ew)) == sorted(by_chunk)
