"""Triples and propositions: the spaCy and LLM extractors, resumability,
provenance, incremental updates, and pgrag.propositions' chunk budget."""

from __future__ import annotations

import json
import re

import pytest

from pgrag.llm import LLMSettings, LLMUnavailable
from tests.conftest import seeded_database
from tests.fake_llm import FakeLLM, Status

database_uri = seeded_database("ex")


@pytest.fixture
def kb(db):
    """Corpus "ex": the sample, built once (conftest.seeded_database)."""
    return db.corpus("ex")


def triples(db, kb, extractor=None):
    with db.transaction() as conn:
        return conn.execute(
            "SELECT t.subject, t.predicate, t.object, t.proposition, t.char_start, t.char_end, d.external_id, "
            "d.body, t.extractor FROM pgrag.triple t JOIN pgrag.chunk c USING (corpus_id, chunk_id) "
            "JOIN pgrag.document d ON d.corpus_id = c.corpus_id AND d.document_id = c.document_id "
            "WHERE t.corpus_id = %s AND (%s::text IS NULL OR t.extractor = %s) ORDER BY t.triple_id",
            (kb.id, extractor, extractor)).fetchall()


def test_spacy_triples_with_provenance_and_resume(db, kb):
    report = kb.extract_triples("spacy", progress=False)
    n_chunks = db.corpora()[0]["chunks"]
    assert report.chunks == n_chunks and report.triples > 5 and report.failed_chunks == 0
    rows = triples(db, kb)
    assert len(rows) == report.triples
    facts = {(s.lower(), o.lower()) for s, _, o, *_ in rows}
    assert ("lothair ii", "teutberga") in facts
    for s, p, o, prop, start, end, _ext, body, _ in rows:
        assert prop == f"{s} {p} {o}"
        assert 0 <= start <= end <= len(body)
    again = kb.extract_triples("spacy", progress=False)     # nothing left to do
    assert again.chunks == 0 and len(triples(db, kb)) == len(rows)


def test_triples_follow_document_updates(db, kb, wiki_docs):
    kb.extract_triples("spacy", progress=False)
    before = {r[6] for r in triples(db, kb)}
    assert "minaj" in before
    kb.delete(["minaj"])
    assert "minaj" not in {r[6] for r in triples(db, kb)}
    changed = dict(wiki_docs[0], text="Lothair II founded the Abbey of Example. It stands in Metz.")
    kb.ingest([changed], progress=False)
    assert not [r for r in triples(db, kb) if r[6] == "lothair"]   # old triples gone with the old chunks
    report = kb.extract_triples("spacy", progress=False)            # only the new chunk is pending
    assert report.chunks == 1
    assert any(r[6] == "lothair" and "Abbey of Example" in r[2] for r in triples(db, kb))


def test_propositions_stop_at_the_chunk_budget(db, kb):
    kb.extract_triples("spacy", progress=False)
    for budget in (1, 2, 3):
        props = kb.propositions("Who did Lothair II marry?", unique_chunks=budget)
        chunks = list(dict.fromkeys(p.chunk_id for p in props))
        assert len(chunks) == budget
        assert props[-1].chunk_id == chunks[-1] and props[-1].chunk_id not in [p.chunk_id for p in props[:-1]]
        assert [p.score for p in props] == sorted((p.score for p in props), reverse=True)
        assert [p.rank for p in props] == list(range(1, len(props) + 1))
    top = kb.propositions("Who did Lothair II marry?", unique_chunks=1)
    assert top[0].external_id == "lothair" and top[0].title == "Lothair II"
    # several queries share one pool; each row says which query it matched best
    multi = kb.propositions(["Who did Lothair II marry?", "Onika Tanya Maraj was born in Port of Spain"],
                            unique_chunks=2)
    assert {p.external_id for p in multi} == {"lothair", "minaj"}
    assert {p.query for p in multi} == {1, 2}


def test_propositions_from_sql(db, kb):
    kb.extract_triples("spacy", progress=False)
    vector = kb.embedder.encode(["Onika Tanya Maraj was born in Port of Spain"])[0]
    with db.transaction() as conn:
        rows = conn.execute("SELECT rank, proposition, external_id FROM pgrag.propositions(%s, %s, 1)",
                            (kb.name, vector)).fetchall()
    assert rows and {r[2] for r in rows} == {"minaj"}
    assert kb.propositions("anything", unique_chunks=0) == []


def test_empty_corpus_has_no_propositions(db):
    assert db.corpus("nothing").propositions("Lothair") == []


def scripted_openie(request):
    """NER then OpenIE replies derived from the passage, like a well-behaved model."""
    prompt = request["messages"][-1]["content"]
    if "named entities of the passage" in prompt:
        return json.dumps({"entities": ["Lothair II"]})
    if any("Garbage" in m["content"] for m in request["messages"]):
        return "I cannot do that."
    title = prompt.split("Passage:\n", 1)[1].split("\n", 1)[0]        # the chunk's title line
    return json.dumps({"triples": [[title, "is the subject of", "a passage"], ["x", "", "y"],
                                   ["Marie Curie", "was born in", "Warsaw"]]})


def test_llm_extraction_with_cache_and_failures(db, kb):
    with FakeLLM(scripted_openie) as fake:
        llm = kb.llm(LLMSettings(base_url=fake.base_url, model=fake.model, max_retries=0))
        kb.ingest([{"id": "junk", "title": "Garbage", "text": "Garbage in, garbage out."}], progress=False)
        report = kb.extract_triples("llm", llm=llm, progress=False)
        n_chunks = sum(c["chunks"] for c in db.corpora())
        assert report.chunks == n_chunks
        assert report.failed_chunks == 1 and len(report.errors) == 1   # the junk chunk, after a repair
        # per good chunk: one valid triple kept, one malformed dropped, one not in the passage dropped
        assert report.triples == n_chunks - 1 and report.ungrounded == n_chunks - 1
        assert report.llm_prompt_tokens > 0 and report.llm_calls == len(fake.requests)
        rows = triples(db, kb, "llm")
        assert {(s, p, o) for s, p, o, *_ in rows} == {
            (title, "is the subject of", "a passage") for title in
            ("Lothair II", "Ermengarde of Tours", "Nicki Minaj", "Changed It", "A long document")}
        # the cache: forget what was extracted and run again -> not one new request
        requests = len(fake.requests)
        with db.transaction() as conn:
            conn.execute("DELETE FROM pgrag.chunk_extraction WHERE corpus_id = %s", (kb.id,))
            conn.execute("DELETE FROM pgrag.triple WHERE corpus_id = %s", (kb.id,))
        again = kb.extract_triples("llm", llm=kb.llm(LLMSettings(base_url=fake.base_url, model=fake.model)),
                                   progress=False)
        assert len(fake.requests) == requests and again.triples == report.triples


def test_endpoint_down_mid_extraction_keeps_work_and_resumes(db, kb):
    calls = {"n": 0}

    def flaky(request):
        calls["n"] += 1
        return Status(503) if calls["n"] > 4 else scripted_openie(request)

    with FakeLLM(flaky) as fake:
        llm = kb.llm(LLMSettings(base_url=fake.base_url, model=fake.model, max_retries=0))
        with pytest.raises(LLMUnavailable.__mro__[1], match="503"):
            kb.extract_triples("llm", llm=llm, batch_size=1, progress=False)
    done = len(triples(db, kb, "llm"))
    assert done == 2                                   # two chunks (2 calls each) finished and stayed
    with FakeLLM(scripted_openie) as fake:
        report = kb.extract_triples("llm", llm=kb.llm(LLMSettings(base_url=fake.base_url, model=fake.model)),
                                    progress=False)
        assert report.chunks == sum(c["chunks"] for c in db.corpora()) - 2
        assert all("named entities" in r["messages"][-1]["content"] or "triples" in r["messages"][-1]["content"]
                   for r in fake.requests)


def test_ingest_can_extract_triples(db, wiki_docs, monkeypatch):
    monkeypatch.delenv("PGRAG_LLM_MODEL", raising=False)
    kb = db.corpus("ingest-triples")
    report = kb.ingest(wiki_docs[:2], progress=False, extract_triples=True)   # no LLM configured: spaCy
    assert report.triples.extractor == "spacy" and report.triples.triples > 0
    assert len(triples(db, kb)) == report.triples.triples
    again = kb.ingest(wiki_docs[:3], progress=False, extract_triples="spacy")  # only the new document's chunks
    assert again.added == 1 and 0 < again.triples.chunks <= 2


def test_cli_ingest_with_triples_and_propositions(database_uri, tmp_path, wiki_docs):
    from click.testing import CliRunner

    from pgrag.cli import main

    path = tmp_path / "docs.json"
    path.write_text(json.dumps(wiki_docs))
    runner = CliRunner()
    result = runner.invoke(main, ["ingest", str(path), "--corpus", "cli-t", "--triples", "spacy",
                                  "--no-progress", "--dsn", database_uri], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert re.search(r"triples \(spacy\): \d+ from \d+ chunks", result.output)
    result = runner.invoke(main, ["propositions", "Who did Lothair II marry?", "--corpus", "cli-t",
                                  "--chunks", "1", "--dsn", database_uri, "--json"], catch_exceptions=False)
    rows = json.loads(result.stdout)
    assert rows and {r["external_id"] for r in rows} == {"lothair"}
    result = runner.invoke(main, ["extract", "--corpus", "cli-t", "--dsn", database_uri], catch_exceptions=False)
    assert "triples (spacy): 0 from 0 chunks" in result.output
