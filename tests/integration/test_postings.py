"""TIGRAG's postings matrix (pgrag.index.postings): its pool equals the SQL
``pgrag_internal.tigrag_pool`` row for row, it follows ingests and deletes by graph
version, and a query never pairs a graph with postings of another version."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from pgrag.exceptions import PgragError
from pgrag.index import cache, postings
from pgrag.index.cache import ranking_index
from tests.conftest import seeded_database

database_uri = seeded_database("post")


@pytest.fixture
def kb(db):
    """Corpus "post": the sample, built once (conftest.seeded_database)."""
    return db.corpus("post")


def sql_pool(db, kb, graph, nodes, weights, seeds, threshold, max_pool, bm25):
    """The pure-SQL pool (what pgrag.tigrag, the single hop in SQL, runs)."""
    with db.transaction() as conn:
        return conn.execute(
            "SELECT chunk_id, rho, candidates FROM pgrag_internal.tigrag_pool(%s, %s, %s, %s, %s, %s, %s)",
            (kb.id, graph.token_ids[nodes].tolist(), list(weights), graph.token_ids[seeds].tolist(), threshold,
             bm25, max_pool)).fetchall()


@pytest.mark.parametrize("bm25", [True, False])
def test_the_matrix_pool_equals_the_sql_pool(db, kb, bm25):
    graph, index, _ = ranking_index(db, kb.id)
    rng = np.random.default_rng(3)
    for threshold, max_pool in [(0.8, 300), (1.0, 1000), (0.3, 2), (0.8, 0)]:
        for _ in range(5):
            nodes = rng.choice(graph.nodes, size=min(6, graph.nodes), replace=False)
            weights = rng.random(len(nodes))
            weights /= weights.sum()
            seeds = sorted(rng.choice(graph.nodes, size=2, replace=False).tolist())
            want = sql_pool(db, kb, graph, nodes, weights, seeds, threshold, max_pool, bm25)
            got = index.pool(nodes, weights, seeds, threshold=threshold, max_pool=max_pool, bm25=bm25)
            assert [r[0] for r in got] == [r[0] for r in want]
            assert [r[2] for r in got] == [r[2] for r in want]
            assert np.allclose([r[1] for r in got], [r[1] for r in want], rtol=0, atol=1e-9)


def test_the_cached_cosines_equal_the_sql_cosines(db, kb):
    """The rerank's cosines from the cached vectors, against pgrag_internal.chunk_cosines."""
    _, index, _ = ranking_index(db, kb.id)
    embeddings = list(kb.context(False).embedder.encode(["Who was Lothair II's mother?", "Ermengarde of Tours"]))
    chunk_ids = index.chunk_ids[::2].tolist()
    with db.transaction() as conn:
        rows = conn.execute("SELECT chunk_id, cosine FROM pgrag_internal.chunk_cosines(%s, %s, %s)",
                            (kb.id, chunk_ids, embeddings)).fetchall()
    want = dict(rows)
    got = index.cosines(chunk_ids, embeddings)
    assert sorted(got) == sorted(want) and len(got) == len(chunk_ids) > 3
    assert max(abs(got[c] - want[c]) for c in want) < 1e-6


def test_each_chunks_document_is_the_tables(db, kb):
    _, index, _ = ranking_index(db, kb.id)
    with db.transaction() as conn:
        want = dict(conn.execute("SELECT chunk_id, document_id FROM pgrag.chunk WHERE corpus_id = %s",
                                 (kb.id,)).fetchall())
    assert index.documents_of(sorted(want)) == want and len(set(want.values())) > 3
    with pytest.raises(PgragError, match="not in the index"):
        index.documents_of([max(want) + 1])


def test_bm25_rankings_at_once_equal_each_alone(db, kb):
    graph, index, _ = ranking_index(db, kb.id)
    rng = np.random.default_rng(5)
    queries = [rng.choice(graph.nodes, size=int(rng.integers(1, 6)), replace=False).tolist() for _ in range(8)]
    queries += [[], queries[0] + queries[0]]
    depths = [int(d) for d in rng.integers(0, 12, len(queries))]
    together = index.bm25_rankings(queries, depths)
    assert together == [index.bm25_ranking(q, d) for q, d in zip(queries, depths)]
    assert sum(len(ids) for ids, _ in together) > 10


def sql_nearest(db, kb, vector, k):
    """An exact scan in SQL (no index matches the uncast column): (chunk, cosine), best first."""
    with db.transaction() as conn:
        return conn.execute(
            "SELECT chunk_id, 1 - (embedding <=> %(v)s) FROM pgrag.chunk WHERE corpus_id = %(c)s "
            "ORDER BY embedding <=> %(v)s, chunk_id LIMIT %(k)s", {"v": vector, "c": kb.id, "k": k}).fetchall()


def assert_nearest_is_exact(db, kb, index, vectors) -> None:
    for depth in (1, 4, 1000):
        for vector, (ids, scores) in zip(vectors, index.nearest(list(vectors), depth)):
            want = sql_nearest(db, kb, vector, depth)
            live = len(index.chunk_ids) if index.live is None else int(index.live.sum())
            assert ids == [r[0] for r in want] and len(ids) == min(depth, live)
            assert np.allclose(scores, [r[1] for r in want], rtol=0, atol=1e-6)


def test_the_nearest_chunks_are_an_exact_scan(db, kb, monkeypatch):
    """Postings.nearest against an exact scan in SQL, and the dense method on it
    (HNSW in SQL past EXACT_SEARCH_MAX_VECTORS)."""
    questions = ["Who was Lothair II's mother?", "Ermengarde of Tours", "Nicki Minaj rapper"]
    vectors = kb.context(False).embedder.encode(questions)
    _, index, _ = ranking_index(db, kb.id)
    assert_nearest_is_exact(db, kb, index, vectors)
    exact = kb.retrieve(questions[0], method="dense", k=4)
    assert [s for s in exact.trace.steps if s["step"] == "dense"][0]["search"] == "exact"
    assert [h.provenance.chunk_id for h in exact] == [r[0] for r in sql_nearest(db, kb, vectors[0], 4)]
    monkeypatch.setattr(postings, "EXACT_SEARCH_MAX_VECTORS", len(index.chunk_ids) - 1)
    assert index.nearest(list(vectors), 4) is None
    hnsw = kb.retrieve(questions[0], method="dense", k=4)
    assert [s for s in hnsw.trace.steps if s["step"] == "dense"][0]["search"] == "hnsw"
    assert [(h.provenance, round(h.score, 6)) for h in hnsw] == [(h.provenance, round(h.score, 6)) for h in exact]


def test_the_matrix_follows_ingest_and_delete(db, kb):
    graph, before, _ = ranking_index(db, kb.id)
    assert before.bm25.shape == (len(before.chunk_ids), graph.nodes) and before.nbytes > 0
    assert ranking_index(db, kb.id)[1] is before            # cached at this version
    kb.ingest([{"id": "x", "title": "X", "text": "Waldrada was the mistress of Lothair II."}], progress=False)
    graph, after, _ = ranking_index(db, kb.id)
    assert after.version == graph.version > before.version and len(after.chunk_ids) == len(before.chunk_ids) + 1
    kb.delete(["x"])
    graph, gone, _ = ranking_index(db, kb.id)
    assert gone.version == graph.version > after.version
    assert np.array_equal(gone.chunk_ids, before.chunk_ids)
    assert abs(gone.bm25 - before.bm25).max() < 1e-12        # a delete restores the statistics exactly


def test_a_concurrent_ingest_never_mixes_versions(db, kb):
    """Queries in one thread while another ingests and deletes: every graph and
    postings pair has one version, with as many columns as the graph has nodes."""
    stop, seen, failures = threading.Event(), set(), []

    def write() -> None:
        try:
            for i in range(6):
                kb.ingest([{"id": f"w{i}", "title": f"W{i}", "text": f"Lothair the {i}th ruled Tours {i}."}],
                          progress=False)
                kb.delete([f"w{i}"])
        except Exception as exc:  # reported below
            failures.append(repr(exc))
        finally:
            stop.set()

    writer = threading.Thread(target=write)
    writer.start()
    while not stop.is_set():
        cache.clear_cache()   # force a read each time, racing the writer
        graph, index, _ = ranking_index(db, kb.id)
        seen.add(graph.version)
        if index.version != graph.version or index.bm25.shape[1] != graph.nodes:
            failures.append(f"graph {graph.version} with postings {index.version}")
    writer.join()
    assert not failures, failures[:3]
    assert len(seen) > 1     # the reader did see the corpus change
