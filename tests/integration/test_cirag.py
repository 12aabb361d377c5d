"""CIRAG against a real corpus (spaCy triples, real embeddings) with a scripted
fake LLM: construction in SQL, the integration loop and its history, the
refusal cascade, the round cap, malformed replies, the no-LLM fallback and the
trajectory export."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from pgrag.exceptions import PgragError
from pgrag.llm import LLMSettings
from pgrag.methods import cirag
from pgrag.methods.cirag import Candidate, is_refusal, parse_decision
from tests.conftest import seeded_database
from tests.fake_llm import FakeLLM

QUESTION = "When did Lothair II's mother die?"
NEXT = "When did Ermengarde of Tours die?"


database_uri = seeded_database("ci", triples=True)


@pytest.fixture
def kb(db):
    """Corpus "ci": the sample, built once (conftest.seeded_database)."""
    return db.corpus("ci")


def llm_for(kb, fake):
    return kb.llm(LLMSettings(base_url=fake.base_url, model=fake.model, max_retries=0))


def user(request):
    return request["messages"][-1]["content"]


def is_integration(request):
    return request["messages"][0]["content"] == cirag.prompts.CIRAG_INTEGRATE_SYSTEM


def numbers_of(prompt, word):
    """Numbers of the candidate lines of an integration prompt that mention ``word``."""
    return [int(m.group(1)) for m in re.finditer(r"^(\d+)\. (.*)$", prompt, re.MULTILINE) if word in m.group(2)]


class Chain:
    """A scripted integrator for a two-round chain (Lothair II -> his mother ->
    her death) and an answerer that refuses until the given granularity."""

    def __init__(self, answer_at="triples"):
        self.answer_at = answer_at

    def __call__(self, request):
        prompt = user(request)
        if is_integration(request):
            if "(round 1," in prompt:
                return json.dumps({"thought": "Lothair II's mother is Ermengarde of Tours.",
                                   "core": numbers_of(prompt, "Ermengarde")[:2], "next_query": NEXT})
            return json.dumps({"thought": "She died on 20 March 851.", "core": numbers_of(prompt, "died")[:2],
                               "next_query": None})
        level = re.search(r"Evidence \((\w+)\)", prompt).group(1)
        order = cirag.GRANULARITIES
        if self.answer_at is None or order.index(level) < order.index(self.answer_at):
            return "Unanswerable."
        return "Answer: 20 March 851"


def test_two_round_chain_passes_history_and_accumulates(kb):
    with FakeLLM(Chain()) as fake:
        hits = kb.retrieve(QUESTION, method="cirag", k=5, llm=llm_for(kb, fake))
        integrations = [r for r in fake.requests if is_integration(r)]
    assert len(integrations) == 2
    first, second = user(integrations[0]), user(integrations[1])
    assert "Earlier rounds:\n(none)" in first and f"query: {QUESTION}" in first
    # the second round: constructed from the next-hop query, with round 1 as history
    assert f"(round 2, query: {NEXT})" in second
    history = second.split("Earlier rounds:\n")[1].split("\n\nCandidate facts")[0]
    assert history.startswith(f"Round 1 (query: {QUESTION}): kept ")
    assert "Ermengarde" in history and "Lothair II's mother is Ermengarde of Tours." in history
    assert f"Next query: {NEXT}" in history

    trace = hits.trace
    assert trace.outcome == {"finish": "natural", "granularity": "triples"}
    assert hits.answer == "20 March 851"
    assert [s["query"] for s in trace.steps if s["step"] == "construct"] == [QUESTION, NEXT]
    assert trace.llm_calls == 3 and trace.prompt_tokens > 0 and trace.completion_tokens > 0
    # hits: core chunks first, round by round; both gold documents are among them
    core = [h for h in hits if h.details["core"]]
    assert core and hits[: len(core)] == core
    assert [h.details["round"] for h in core] == sorted(h.details["round"] for h in core)
    assert "ermengarde" in {h.provenance.external_id for h in core}
    assert [h.rank for h in hits] == list(range(1, len(hits) + 1)) and len(hits) <= 5


@pytest.mark.parametrize("answer_at", ["triples", "sentences", "passages", None])
def test_refusal_cascade_escalates_granularity(kb, answer_at):
    with FakeLLM(Chain(answer_at)) as fake:
        hits = kb.retrieve(QUESTION, method="cirag", k=5, llm=llm_for(kb, fake))
        asked = [re.search(r"Evidence \((\w+)\)", user(r)).group(1) for r in fake.requests if not is_integration(r)]
    order = list(cirag.GRANULARITIES)
    expected = order[: order.index(answer_at) + 1] if answer_at else order
    assert asked == expected
    assert hits.trace.outcome["granularity"] == (answer_at or "passages")
    if answer_at is None:   # every level refused: the passage-level reply stands
        assert hits.answer == "Unanswerable" and hits.trace.outcome["answered"] == "refused"
    else:
        assert hits.answer == "20 March 851"
    [step] = [s for s in hits.trace.steps if s["step"] == "answer"]
    assert [lv["refusal"] for lv in step["levels"]] == [True] * (len(expected) - 1) + [answer_at is None]


def test_round_cap(kb):
    count = iter(range(1, 100))

    def endless(request):
        if is_integration(request):
            return json.dumps({"thought": "more", "core": [1], "next_query": f"Who is person {next(count)}?"})
        return "851"

    with FakeLLM(endless) as fake:
        hits = kb.retrieve(QUESTION, method="cirag", k=5, llm=llm_for(kb, fake))
        assert sum(is_integration(r) for r in fake.requests) == 4          # L = 4
        capped = kb.retrieve(QUESTION + " (two)", method="cirag", k=5, llm=llm_for(kb, fake), rounds=2)
    assert hits.trace.outcome["finish"] == "cap"
    assert len([s for s in hits.trace.steps if s["step"] == "construct"]) == 4
    assert len([s for s in capped.trace.steps if s["step"] == "integrate"]) == 2


def test_malformed_integrator_output_degrades(kb):
    def garbage(request):
        return "I think the answer is somewhere above." if is_integration(request) else "851"

    with FakeLLM(garbage) as fake:
        hits = kb.retrieve(QUESTION, method="cirag", k=5, llm=llm_for(kb, fake))
        assert sum(is_integration(r) for r in fake.requests) == 2            # one repair, then give up
    assert hits.trace.outcome == {"finish": "malformed", "granularity": "triples"}
    stop = next(s for s in hits.trace.steps if s["step"] == "stop")
    assert stop["reason"] == "malformed integrator reply" and "somewhere" in stop["reply"]
    assert any(s["step"] == "evidence" for s in hits.trace.steps)          # first round's candidates used
    assert hits.answer == "851" and len(hits) == 5


def test_unreachable_llm_never_crashes(kb):
    settings = LLMSettings(base_url="http://127.0.0.1:9/v1", model="m", max_retries=0, timeout=2)
    hits = kb.retrieve(QUESTION, method="cirag", k=5, llm=kb.llm(settings))
    assert hits.trace.outcome["finish"] == "llm_error" and hits.trace.outcome["granularity"] == "error"
    assert hits.answer is None and len(hits) == 5


def test_empty_corpus_makes_no_llm_call(db):
    empty = db.corpus("ci-empty")
    with FakeLLM(Chain()) as fake:
        hits = empty.retrieve(QUESTION, method="cirag", k=5, llm=llm_for(empty, fake))
        assert fake.requests == []
    assert len(hits) == 0 and hits.answer is None
    assert hits.trace.outcome == {"finish": "no_candidates", "granularity": "none"}


def test_without_llm_construction_only(kb):
    hits = kb.retrieve(QUESTION, method="cirag", k=5, llm=False)
    assert hits.answer is None and hits.trace.outcome == {"finish": "no_llm", "granularity": "none"}
    [fallback] = [s for s in hits.trace.steps if s["step"] == "fallback"]
    assert "llm=False" in fallback["note"]
    assert len([s for s in hits.trace.steps if s["step"] == "construct"]) == 1
    scores = [h.score for h in hits if "triple" in h.details]
    assert scores == sorted(scores, reverse=True) and hits[0].provenance.external_id == "lothair"
    with pytest.raises(PgragError, match=r"'cirag' does not take option\(s\) 'rouns'"):
        kb.retrieve(QUESTION, method="cirag", k=5, llm=False, rouns=2)
    with pytest.raises(PgragError, match="cirag option 'documents' takes an integer of at least 1, not 0"):
        kb.retrieve(QUESTION, method="cirag", k=5, llm=False, documents=0)


def test_missing_triples_are_extracted_on_the_fly_for_retrieved_documents_only(db, wiki_docs):
    kb = db.corpus("fly")
    kb.ingest(wiki_docs, progress=False)                     # no triples at all
    hits = kb.retrieve(QUESTION, method="cirag", k=3, llm=False, documents=2)
    with db.transaction() as conn:
        done = conn.execute("SELECT DISTINCT d.external_id FROM pgrag.chunk_extraction e "
                            "JOIN pgrag.chunk c USING (corpus_id, chunk_id) JOIN pgrag.document d "
                            "USING (corpus_id, document_id) WHERE e.corpus_id = %s", (kb.id,)).fetchall()
    assert len(done) == 2 and {h.provenance.external_id for h in hits} <= {d for (d,) in done}
    assert next(s for s in hits.trace.steps if s["step"] == "construct")["extracted_chunks"] >= 2
    again = kb.retrieve(QUESTION, method="cirag", k=3, llm=False, documents=2)
    assert next(s for s in again.trace.steps if s["step"] == "construct")["extracted_chunks"] == 0


def test_sql_construction_has_provenance(db, kb):
    """Each candidate points at its sentence: the stored pgrag.sentence row named by
    (document, sentence_ordinal) is the sentence returned, its offsets cut exactly
    that text out of the body, and the triple's span starts inside it."""
    vector = kb.embedder.encode([QUESTION])[0]
    with db.transaction() as conn:
        rows = conn.execute("SELECT c.rank, c.document_rank, c.char_start, c.char_end, c.sentence, d.body, "
                            "s.char_start, s.char_end, s.text, t.subject, t.object "
                            "FROM pgrag.cirag_candidates('ci', %s, documents => 2, candidates => 5) c "
                            "JOIN pgrag.document d ON d.corpus_id = %s AND d.document_id = c.document_id "
                            "JOIN pgrag.triple t ON t.corpus_id = d.corpus_id AND t.triple_id = c.triple_id "
                            "LEFT JOIN pgrag.sentence s ON s.corpus_id = d.corpus_id "
                            " AND s.document_id = d.document_id AND s.ordinal = c.sentence_ordinal "
                            "ORDER BY c.rank", (vector, kb.id)).fetchall()
    assert [r[0] for r in rows] == list(range(1, len(rows) + 1)) and 0 < len(rows) <= 5
    assert {r[1] for r in rows} <= {1, 2}
    for _, _, start, end, sentence, body, s_start, s_end, s_text, subject, obj in rows:
        assert s_text is not None, "sentence_ordinal names no stored sentence"
        assert sentence == s_text == body[s_start:s_end]
        assert s_start <= start < end <= s_end          # the triple's span lies in that sentence
        span = body[start:end]
        assert span.strip() and (obj in span or subject in span), (span, subject, obj)


def test_parse_decision_and_refusals():
    cands = [Candidate(number=i, triple_id=i, score=0.5, subject=f"s{i}", predicate="p", object=f"o{i}",
                       chunk_id=1, document_id=1, title="T", sentence_ordinal=0, char_start=0, char_end=1,
                       sentence="x") for i in (1, 2, 3)]
    d = parse_decision({"thought": "t", "core": [3, "1", "(s2; p; o2)", ["s1", "p", "o1"], 9], "next_query": "None"},
                       cands)
    assert d.core == (3, 1, 2) and d.next_query is None
    assert parse_decision({"core": [], "next_query": " Who  is X? "}, cands).next_query == "Who is X?"
    for bad in (["core"], {"thought": "no core"}, {"core": [1], "next_query": 5}):
        with pytest.raises(ValueError):
            parse_decision(bad, cands)
    for refusal in ("Unanswerable", "unanswerable.", "UNANSWERABLE!", "The question cannot be answered.",
                    "There is not enough information.", "Unknown", "I don't know", ""):
        assert is_refusal(refusal), refusal
    for answer in ("20 March 851", "Unknown Pleasures", "Nonesuch Records", "Paris"):
        assert not is_refusal(answer), answer


def test_export_trajectories(database_uri, db, kb, tmp_path):
    from pgrag.cli import main

    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"id": "q1", "question": QUESTION, "answer": "20 March 851",
                                     "supporting_titles": ["Lothair II", "Ermengarde of Tours"]}) + "\n")
    out = tmp_path / "traj.jsonl"
    with FakeLLM(Chain()) as fake:
        result = CliRunner().invoke(main, ["export-trajectories", "--corpus", "ci", "--questions", str(questions),
                                           "--out", str(out), "--llm", fake.base_url, "--llm-model", fake.model,
                                           "--dsn", database_uri, "--no-progress"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["meta"]["round"] for line in lines] == [1, 2]
    assert all([m["role"] for m in line["messages"]] == ["system", "user", "assistant"] for line in lines)
    decision = json.loads(lines[1]["messages"][2]["content"])
    assert decision["next_query"] is None and decision["core"]
    assert "Round 1 (query:" in lines[1]["messages"][1]["content"]
    assert lines[0]["meta"]["question_id"] == "q1" and lines[0]["meta"]["correct"] is True

    result = CliRunner().invoke(main, ["export-trajectories", "--corpus", "ci", "--questions", str(questions),
                                       "--out", str(out), "--dsn", database_uri])
    assert result.exit_code != 0 and "needs an LLM" in result.output


def test_real_local_llm_runs_the_loop(db, wiki_docs, local_llm_url):
    """SmolLM2-135M drives integration and the cascade for real: replies may be
    garbage, the loop must still run end to end and account for its tokens
    exactly as the server reported them."""
    from pgrag.local_llm import MODEL_ALIAS
    from tests.fake_llm import RecordingProxy

    kb = db.corpus("ci-real")
    kb.ingest(wiki_docs, progress=False)      # triples extracted on the fly (spaCy)
    with RecordingProxy(local_llm_url) as proxy:
        llm = kb.llm(LLMSettings(base_url=proxy.base_url, model=MODEL_ALIAS, timeout=120))
        hits = kb.retrieve(QUESTION, method="cirag", k=3, llm=llm, documents=2, candidates=4, rounds=2,
                           max_tokens=48)
    trace = hits.trace
    assert trace.outcome["finish"] in {"natural", "cap", "repeat", "malformed", "no_candidates"}
    assert trace.outcome["granularity"] in cirag.GRANULARITIES
    assert isinstance(hits.answer, str)
    integrations = [s for s in trace.steps if s["step"] in ("integrate", "stop")]
    assert integrations and 1 <= len([s for s in trace.steps if s["step"] == "construct"]) <= 2
    assert trace.llm_calls == len(proxy.exchanges) >= 2
    assert (trace.prompt_tokens, trace.completion_tokens) == proxy.usage() and trace.prompt_tokens > 100
    assert sum(is_integration(request) for request, _ in proxy.exchanges) >= 1
    assert 1 <= len(hits) <= 3


def test_a_triple_stored_twice_in_a_document_is_one_candidate(db, kb):
    """A sentence that two overlapping chunks share gives the same triple twice;
    it must take one of the N candidate slots, not two (the first row is kept)."""
    with db.transaction() as conn:
        first = conn.execute(
            "SELECT t.triple_id, t.chunk_id, k.document_id FROM pgrag.triple t "
            "JOIN pgrag.chunk k USING (corpus_id, chunk_id) WHERE t.corpus_id = %s ORDER BY t.triple_id LIMIT 1",
            (kb.id,)).fetchone()
        conn.execute(
            "INSERT INTO pgrag.triple (corpus_id, chunk_id, extractor, ordinal, subject, predicate, object, "
            "proposition, char_start, char_end, embedding) "
            "SELECT corpus_id, chunk_id, extractor, 1000, subject, predicate, object, proposition, char_start, "
            "char_end, embedding FROM pgrag.triple WHERE corpus_id = %s AND triple_id = %s", (kb.id, first[0]))
        stored = conn.execute("SELECT count(*) FROM pgrag.triple t JOIN pgrag.chunk k USING (corpus_id, chunk_id) "
                              "WHERE t.corpus_id = %s AND k.document_id = %s", (kb.id, first[2])).fetchone()[0]
    vector = kb.embedder.encode([QUESTION])[0]
    rows = db.fetchall("cirag_triples", {"corpus": kb.name, "embedding": vector, "document_ids": [first[2]],
                                         "candidates": 100, "extractor": None})
    assert len(rows) == stored - 1
    keys = [(r[9], r[3], r[4], r[5]) for r in rows]
    assert len(keys) == len(set(keys))
    assert first[0] in [r[1] for r in rows]          # the first stored row stands for both
    assert [r[0] for r in rows] == list(range(1, len(rows) + 1))


def test_without_an_llm_the_order_is_recomputed_with_numpy_from_the_stored_vectors(kb, db):
    """Independently of the SQL: the ten documents by their best chunk's cosine,
    their triples (one per document and subject, predicate, object) by cosine,
    the top 30 as candidates; hits are the candidates' chunks by triple cosine
    plus the document's, then each document's best chunk."""
    import numpy as np

    question = "When did Lothair II's mother die?"
    hits = kb.retrieve(question, method="cirag", k=8, llm=False)
    q = kb.embedder.encode([question])[0].astype(np.float64)

    def cosine(vector) -> float:
        v = np.asarray(vector.to_numpy(), dtype=np.float64)
        return float(v @ q / (np.linalg.norm(v) * np.linalg.norm(q)))

    with db.transaction() as conn:
        chunks = conn.execute("SELECT chunk_id, document_id, embedding FROM pgrag.chunk WHERE corpus_id = %s",
                              (kb.id,)).fetchall()
        triples = conn.execute("SELECT t.triple_id, t.chunk_id, c.document_id, t.subject, t.predicate, t.object, "
                               "t.embedding FROM pgrag.triple t JOIN pgrag.chunk c USING (corpus_id, chunk_id) "
                               "WHERE t.corpus_id = %s ORDER BY t.triple_id", (kb.id,)).fetchall()
    best: dict[int, tuple[float, int]] = {}
    for chunk_id, doc, vector in chunks:
        s = cosine(vector)
        if doc not in best or (s, -chunk_id) > (best[doc][0], -best[doc][1]):
            best[doc] = (s, chunk_id)
    documents = sorted(best, key=lambda d: (-best[d][0], d))[:10]
    seen, candidates = set(), []
    for triple_id, chunk_id, doc, s, p, o, vector in triples:
        if doc in documents and (doc, s, p, o) not in seen:
            seen.add((doc, s, p, o))
            candidates.append((cosine(vector), triple_id, chunk_id, doc))
    candidates = sorted(candidates, key=lambda c: (-c[0], c[1]))[:30]
    order: dict[int, float] = {}
    for score, _tid, chunk_id, doc in sorted(candidates, key=lambda c: -(c[0] + best[c[3]][0])):
        order.setdefault(chunk_id, score + best[doc][0])
    for doc in documents:
        order.setdefault(best[doc][1], 0.0)
    expected = list(order.items())[:8]
    assert [h.provenance.chunk_id for h in hits] == [c for c, _ in expected]
    assert np.allclose([h.score for h in hits], [s for _, s in expected], atol=1e-5)
