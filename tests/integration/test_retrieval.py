"""BM25 and dense retrieval, from Python and straight from SQL."""

from __future__ import annotations

import math
from collections import Counter

import psycopg
import pytest

import pgrag
from tests.conftest import seeded_database

database_uri = seeded_database("wiki")


@pytest.fixture
def kb(db):
    """Corpus "wiki": the sample, built once (conftest.seeded_database)."""
    return db.corpus("wiki")


def reference_bm25(db, kb, query: str, k1: float = 1.2, b: float = 0.75) -> dict[int, float]:
    """BM25 computed in Python from the chunk texts (tokenised by the SQL pipeline),
    independently of the stored postings and document frequencies."""
    with db.transaction() as conn:
        rows = conn.execute(
            """SELECT c.chunk_id, pgrag.tokenize(pgrag_internal.chunk_search_text(d.title, c.text))
               FROM pgrag.chunk c JOIN pgrag.document d USING (corpus_id, document_id)
               WHERE c.corpus_id = %s""", (kb.id,)).fetchall()
    docs = {cid: Counter(tokens) for cid, tokens in rows}
    lengths = {cid: sum(c.values()) for cid, c in docs.items()}
    n, avgdl = len(docs), sum(lengths.values()) / len(docs)
    scores: dict[int, float] = {}
    for term in set(kb.tokenize(query)):
        df = sum(1 for c in docs.values() if term in c)
        if df == 0:
            continue
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        for cid, c in docs.items():
            tf = c.get(term, 0)
            if tf:
                scores[cid] = (scores.get(cid, 0.0)
                               + idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * lengths[cid] / avgdl)))
    return scores


@pytest.mark.parametrize("question", [
    "Who is the mother of Lothair II?",
    "Where was the performer of Changed It born?",
    "river valley topic3 Lotharingia",
])
def test_bm25_matches_an_independent_computation(db, kb, question):
    expected = reference_bm25(db, kb, question)
    hits = kb.retrieve(question, method="bm25", k=50)
    assert len(hits) == len(expected) > 0
    for hit in hits:
        assert hit.score == pytest.approx(expected[hit.provenance.chunk_id], rel=1e-9)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


@pytest.mark.parametrize("method", ["bm25", "hybrid"])
def test_python_bm25_and_hybrid_rank_as_the_sql_functions(db, kb, method):
    """kb.retrieve ranks BM25 from the cached postings (and fuses it with HNSW
    for hybrid): the same chunks, order and scores as SQL's pgrag.bm25 /
    pgrag.hybrid, which scan the posting lists."""
    from pgrag.embed import corpus_embedder

    questions = ["Who was the mother of Lothair II?", "Where was Nicki Minaj born?", "queen Teutberga brother",
                 "Lothair", "the of and"]
    for question in questions:
        hits = kb.retrieve(question, method=method, k=20)
        with db.transaction() as conn:
            if method == "bm25":
                rows = conn.execute("SELECT chunk_id, score FROM pgrag.bm25(%s, %s, 20)",
                                    (kb.name, question)).fetchall()
            else:
                vector = corpus_embedder(kb.info).encode([question])[0]
                rows = conn.execute("SELECT chunk_id, score FROM pgrag.hybrid(%s, %s, %s::vector, 20)",
                                    (kb.name, question, list(map(float, vector)))).fetchall()
        assert [h.provenance.chunk_id for h in hits] == [r[0] for r in rows], question
        assert [h.score for h in hits] == pytest.approx([r[1] for r in rows], rel=1e-12, abs=1e-12)
        assert (len(hits) > 0) == (question != "the of and" or method == "hybrid")   # dense has no stopwords


def test_bm25_and_dense_find_the_obvious_document(kb):
    for method in ("bm25", "dense"):
        hits = kb.retrieve("Where was Nicki Minaj born?", method=method, k=3)
        assert hits[0].provenance.external_id == "minaj", method
        assert hits.trace.method == method
        assert [h.rank for h in hits] == list(range(1, len(hits) + 1))


def test_hits_carry_exact_provenance(db, kb, wiki_docs):
    bodies = {d["id"]: d["text"] for d in wiki_docs}
    for method in ("bm25", "dense"):
        for hit in kb.retrieve("topic3 river valley", method=method, k=5):
            p = hit.provenance
            assert bodies[p.external_id][p.char_start:p.char_end] == hit.text
            assert p.sentences and p.sentences[0].char_start == p.char_start
            assert p.sentences[-1].char_end == p.char_end
            for s in p.sentences:
                assert p.char_start <= s.char_start < s.char_end <= p.char_end


def test_bm25_trace_names_query_terms(kb):
    hits = kb.retrieve("Who is the mother of Lothair II?", method="bm25", k=2)
    assert hits.trace.steps[0]["query_terms"] == ["mother", "lothair"]


def test_sql_functions_work_without_python(kb, database_uri):
    with psycopg.connect(database_uri) as conn:
        rows = conn.execute("SELECT rank, external_id, score, char_start, char_end, text "
                            "FROM pgrag.bm25('wiki', 'Who is the mother of Lothair II?', 5)").fetchall()
        assert rows[0][1] in {"lothair", "ermengarde"}
        assert [r[0] for r in rows] == list(range(1, len(rows) + 1))
        # dense from SQL with an embedding computed elsewhere (here: the same model)
        vec = "[" + ",".join(map(str, kb.embedder.encode(["Nicki Minaj birthplace"])[0])) + "]"
        top = conn.execute("SELECT external_id FROM pgrag.dense('wiki', %s::vector, 1)", (vec,)).fetchone()
        assert top[0] == "minaj"
        chunk_id = conn.execute("SELECT chunk_id FROM pgrag.bm25('wiki', 'Lothair', 1)").fetchone()[0]
        sentences = conn.execute("SELECT ordinal, char_start, char_end FROM pgrag.chunk_sentences('wiki', %s)",
                                 (chunk_id,)).fetchall()
        assert [s[0] for s in sentences] == list(range(len(sentences))) and sentences


def test_sql_tokenize_is_the_pipeline(kb):
    assert kb.tokenize("Who is the MOTHER of Lothair II? ÉCOLE naïve 1990 42 x") == \
        ["mother", "lothair", "école", "naïve", "1990"]
    assert kb.tokenize("") == []
    assert kb.tokenize("'; DROP TABLE pgrag.chunk; --") == ["drop", "table", "pgrag", "chunk"]


def test_tokenize_many_is_tokenize_of_each_text_in_order(kb):
    ctx = kb.context(False)
    texts = ["Who was the mother of Lothair II?", "", "the of and", "Teutberga's brother, Hucbert", "Lothair"]
    assert ctx.tokenize_many(texts) == [ctx.tokenize(t) for t in texts]
    assert ctx.tokenize_many(texts[::-1]) == [ctx.tokenize(t) for t in texts[::-1]]
    assert ctx.tokenize_many([]) == []


def test_queries_with_no_known_tokens_return_nothing(kb):
    assert kb.retrieve("the of and", method="bm25", k=5) == []
    assert kb.retrieve("zzzzqqq", method="bm25", k=5) == []


def test_empty_corpus_returns_empty_results(db):
    kb = db.corpus("empty")
    assert kb.retrieve("anything at all", method="bm25", k=5) == []
    assert kb.retrieve("anything at all", method="dense", k=5) == []


def test_unknown_corpus_is_a_clear_error(db, database_uri):
    with pytest.raises(pgrag.CorpusNotFound, match="nope"):
        db.corpus("nope", create=False)
    with psycopg.connect(database_uri) as conn:
        with pytest.raises(psycopg.Error, match="corpus 'nope' does not exist") as info:
            conn.execute("SELECT * FROM pgrag.bm25('nope', 'x', 5)")
        assert info.value.sqlstate == "PR001"


def test_unknown_method_and_bad_k(kb):
    with pytest.raises(pgrag.UnknownMethod, match="available: dense, bm25"):
        kb.retrieve("x", method="magic")
    with pytest.raises(pgrag.PgragError, match="k must be"):
        kb.retrieve("x", method="bm25", k=0)


def test_embedding_dimension_mismatch(kb, db, database_uri):
    with psycopg.connect(database_uri) as conn:
        with pytest.raises(psycopg.Error, match="3 dimensions, corpus 'wiki' uses 384") as info:
            conn.execute("SELECT * FROM pgrag.dense('wiki', '[1,2,3]'::vector, 5)")
        assert info.value.sqlstate == "PR002"
    # a corpus recorded with another dimension than its model gives
    with db.transaction() as conn:
        conn.execute("UPDATE pgrag.corpus SET embedding_dim = 768 WHERE name = 'wiki'")
    with pytest.raises(pgrag.EmbeddingMismatch, match="384-dimensional.*768"):
        db.corpus("wiki").ingest([{"id": "x", "text": "more"}], progress=False)
    with pytest.raises(pgrag.EmbeddingMismatch, match="built with 'all-MiniLM-L6-v2'"):
        db.corpus("wiki", embedding_model="some/other-model")


def test_dense_uses_the_corpus_hnsw_index(kb, database_uri):
    with psycopg.connect(database_uri) as conn:
        conn.execute("SET enable_seqscan = off")
        plan = conn.execute(
            "EXPLAIN SELECT chunk_id FROM pgrag.chunk c WHERE c.corpus_id = %s "
            "ORDER BY c.embedding::vector(384) <=> %s::vector LIMIT 5",
            (kb.id, "[" + ",".join(["0.05"] * 384) + "]")).fetchall()
    assert any(f"chunk_embedding_hnsw_{kb.id}" in line[0] for line in plan), plan


def test_bm25_reads_the_chunk_lengths_from_their_index(kb, database_uri):
    """pgrag.bm25 needs every chunk's length (N, the mean) and each posting's:
    chunk_length_idx holds them beside the key, so no wide chunk row is read."""
    plans: list[str] = []
    with psycopg.connect(database_uri, autocommit=True) as conn:
        conn.execute("VACUUM pgrag.chunk")   # index-only once the pages are all-visible
        conn.execute("LOAD 'auto_explain'")
        for setting in ("auto_explain.log_min_duration = 0", "auto_explain.log_nested_statements = on",
                        "auto_explain.log_level = notice", "enable_seqscan = off"):   # planned as on a large corpus
            conn.execute(f"SET {setting}")
        conn.add_notice_handler(lambda notice: plans.append(notice.message_primary or ""))
        hits = conn.execute("SELECT chunk_id FROM pgrag.bm25('wiki', 'Lothair mother Ermengarde', 3)").fetchall()
    scoring = [plan for plan in plans if "pgrag.chunk_token" in plan]
    assert hits and len(scoring) == 1
    assert scoring[0].count("Index Only Scan using chunk_length_idx on chunk") == 2, scoring[0]


@pytest.mark.slow  # ingests enough documents to pass the HNSW default
def test_dense_returns_more_than_the_hnsw_default_of_40(db):
    from pgrag.demo import sample_documents

    kb = db.corpus("sample")
    report = kb.ingest(sample_documents(), progress=False)
    assert report.chunks > 40
    hits = kb.retrieve("a film directed in 1961", method="dense", k=report.chunks)
    assert len(hits) == report.chunks
    assert len({h.provenance.chunk_id for h in hits}) == report.chunks
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


@pytest.mark.parametrize("name", ["x'; DROP TABLE pgrag.chunk; --", 'quo"te', "naïve 语料 %(k)s {0}"])
def test_corpus_names_are_data_not_sql(db, wiki_docs, name):
    kb = db.corpus(name)
    kb.ingest(wiki_docs[:2], progress=False)
    assert kb.retrieve("Lothair mother", method="bm25", k=1)[0].provenance.external_id in {"lothair", "ermengarde"}
    assert kb.retrieve("Lothair mother", method="dense", k=1)
    assert sorted(c["name"] for c in db.corpora()) == sorted([name, "wiki"])     # "wiki": the module's corpus
    db.drop_corpus(name)
    assert [c["name"] for c in db.corpora()] == ["wiki"]
    with pytest.raises(pgrag.CorpusNotFound):
        kb.retrieve("Lothair", method="bm25", k=1)


def test_hostile_questions_are_just_text(kb):
    for question in ["%(k)s", "'; SELECT pg_sleep(10); --", "\u202e\u0000"[:1] + "ülß ΣΊΣΥΦΟΣ", "x" * 10_000]:
        assert isinstance(kb.retrieve(question, method="bm25", k=3), list)
    # a document sent as a question is refused plainly, not run through every stage
    with pytest.raises(pgrag.InputError, match="at most 10,000 characters, this one has 100,000"):
        kb.retrieve("x" * 100_000, method="bm25", k=3)
    hits = kb.retrieve("Lothair\x00mother", method="bm25", k=3)
    assert hits and hits.trace.steps[0]["query_terms"] == ["lothair", "mother"]


def test_dense_matches_an_exact_cosine_ranking(db):
    """Scores are cosine similarities of the stored chunk embeddings, and the HNSW
    search (ef_search 200 by default) returns the exact top-k on the sample."""
    import numpy as np

    from pgrag.demo import sample_documents
    from pgrag.text import chunk_search_text

    kb = db.corpus("sample")
    kb.ingest(sample_documents(), progress=False)
    with db.transaction() as conn:
        rows = conn.execute(
            "SELECT c.chunk_id, d.title, c.text "
            "FROM pgrag.chunk c JOIN pgrag.document d USING (corpus_id, document_id) "
            "WHERE c.corpus_id = %s", (kb.id,)).fetchall()
    matrix = kb.embedder.encode([chunk_search_text(title, text) for _, title, text in rows])
    for question in ["Who was the mother of Lothair II?", "Which film came out first?", "rapper born in Trinidad"]:
        q = kb.embedder.encode([question])[0]
        sims = matrix @ q
        order = np.argsort(-sims, kind="stable")[:10]
        hits = kb.retrieve(question, method="dense", k=10)
        assert [h.provenance.chunk_id for h in hits] == [rows[i][0] for i in order]
        for h, i in zip(hits, order):
            assert h.score == pytest.approx(float(sims[i]), abs=1e-5)
