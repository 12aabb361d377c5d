"""After a small ingest, delete or replacement the next query advances the
cached graph and postings by what changed (pgrag.postings.advance) instead of
reading the whole version, and gets exactly what a full read gives; a large
change reads it all."""

from __future__ import annotations

import numpy as np
import pytest

from pgrag import graph, postings
from pgrag.graph import load_graph
from pgrag.postings import load_postings, ranking_index

NEW = [{"id": f"n{i}", "title": f"Waldrada {i}",
        "text": f"Waldrada {i} was the mistress of Lothair II and lived in Zanzibar{i}. She had a son, Hugh."}
       for i in range(2)]


@pytest.fixture
def kb(db, wiki_docs):
    corpus = db.corpus("delta")
    corpus.ingest(wiki_docs, progress=False)
    return corpus


def assert_same_as_a_full_read(db, kb, index) -> None:
    full_graph = load_graph(db, kb.id)
    full = load_postings(db, kb.id, full_graph)
    assert full is not None and index.graph.version == full_graph.version == full.version
    g = index.graph
    assert np.array_equal(g.token_ids, full_graph.token_ids) and g.terms == full_graph.terms
    assert abs(g.transition - full_graph.transition).max() < 1e-15
    assert np.array_equal(g.degree, full_graph.degree) and np.array_equal(g.dangling, full_graph.dangling)
    assert np.array_equal(index.postings.chunk_ids, full.chunk_ids)
    assert abs(index.postings.bm25 - full.bm25).max() < 1e-12
    assert np.array_equal(index.postings.vectors.rows(full.chunk_ids), full.vectors.rows(full.chunk_ids))
    every = [full_graph.terms[i] for i in range(full_graph.nodes)]
    assert [g.index[t] for t in every] == list(range(full_graph.nodes))


def test_a_small_ingest_is_applied_as_a_delta(db, kb, monkeypatch):
    monkeypatch.setenv("PGRAG_GRAPH_DIR", "off")   # so the step after the ingest cannot map files
    monkeypatch.setattr(postings, "DELTA_MAX_SHARE", 0.5)   # 2 new chunks on a corpus of a few
    graph.clear_cache()
    postings.clear_cache()
    assert ranking_index(db, kb.id).source == "database"
    kb.ingest(NEW, progress=False)
    after = ranking_index(db, kb.id)
    assert after.source == "delta"
    assert_same_as_a_full_read(db, kb, after)
    hits = kb.retrieve("Who was the mistress of Lothair II?", method="tigrag", k=3)
    assert hits.trace.steps[1]["source"] == "memory"
    graph.clear_cache()
    postings.clear_cache()
    fresh = kb.retrieve("Who was the mistress of Lothair II?", method="tigrag", k=3)
    assert fresh.trace.steps[1]["source"] == "database"
    assert [(h.provenance.chunk_id, h.score) for h in hits] == [(h.provenance.chunk_id, h.score) for h in fresh]


def test_a_delete_and_a_replacement_are_applied_as_deltas(db, kb, wiki_docs, monkeypatch):
    monkeypatch.setenv("PGRAG_GRAPH_DIR", "off")
    monkeypatch.setattr(postings, "DELTA_MAX_SHARE", 0.5)
    graph.clear_cache()
    postings.clear_cache()
    before = ranking_index(db, kb.id)
    kb.delete(["minaj"])                      # her words that no other document has leave the vocabulary
    gone = ranking_index(db, kb.id)
    assert gone.source == "delta" and gone.graph.nodes < before.graph.nodes
    assert_same_as_a_full_read(db, kb, gone)
    doc = next(d for d in wiki_docs if d["id"] == "lothair")
    kb.ingest([{"id": doc["id"], "title": doc["title"], "text": doc["text"] + " Zanzibar hosted it in 1999."}],
              progress=False)
    replaced = ranking_index(db, kb.id)
    assert replaced.source == "delta" and "zanzibar" in replaced.graph.index
    assert_same_as_a_full_read(db, kb, replaced)


def test_a_large_change_reads_the_whole_version(db, kb, monkeypatch):
    monkeypatch.setenv("PGRAG_GRAPH_DIR", "off")
    graph.clear_cache()
    postings.clear_cache()
    ranking_index(db, kb.id)
    many = [{"id": f"m{i}", "title": f"M{i}", "text": f"Item {i} is a town in Lotharingia."} for i in range(5)]
    kb.ingest(many, progress=False)            # 5 new chunks on a few: past the 10 % share
    index = ranking_index(db, kb.id)
    assert index.source == "database"
    assert_same_as_a_full_read(db, kb, index)
    kb.delete([d["id"] for d in many])
    assert ranking_index(db, kb.id).source == "database"


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
    graph.clear_cache()
    postings.clear_cache()
    python = kb.retrieve("Who was the mistress of Lothair II?", method="tigrag", k=3)
    assert [h["chunk_id"] for h in after["hits"]] == [h.provenance.chunk_id for h in python]
    assert np.allclose([h["score"] for h in after["hits"]], [h.score for h in python], rtol=0, atol=1e-9)
