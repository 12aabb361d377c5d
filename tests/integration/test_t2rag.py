"""T2RAG's state machine, driven by a scripted OpenAI-compatible server: two-hop
resolution with a fuzzy triple promoted, a comparison with two named
placeholders in one pool, the fallback to the question's embedding, forced
termination at N, early stop, malformed replies; and the retrieval-only mode."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from pgrag import PgragError, prompts
from pgrag.llm import LLMSettings, short_answer
from pgrag.methods.t2rag import QueryTriple, parse_decomposition, parse_values
from tests.conftest import seeded_database
from tests.fake_llm import FakeLLM, Status

database_uri = seeded_database("t2", triples=True)


@pytest.fixture
def kb(db):
    """Corpus "t2": the sample, built once (conftest.seeded_database)."""
    return db.corpus("t2")


def stage(request: dict[str, Any]) -> str:
    system = request["messages"][0]["content"]
    return {prompts.T2RAG_DECOMPOSE_SYSTEM: "decompose", prompts.T2RAG_RESOLVE_SYSTEM: "resolve",
            prompts.T2RAG_ANSWER_SYSTEM: "answer"}[system]


def user_text(request: dict[str, Any]) -> str:
    return request["messages"][-1]["content"]


class Script:
    """Replies per stage: the decomposition, a list of resolver replies (one per
    round, the last repeating), and the answer; records every request."""

    def __init__(self, decompose: Any, resolve: list[Any], answer: "str | Status" = "Answer: 20 March 851.") -> None:
        self.decompose, self.resolve, self.answer = decompose, list(resolve), answer
        self.seen: list[tuple[str, str]] = []

    def __call__(self, request: dict[str, Any]) -> "str | Status":
        kind = stage(request)
        self.seen.append((kind, user_text(request)))
        if kind == "decompose":
            return self.decompose if isinstance(self.decompose, (str, Status)) else json.dumps(self.decompose)
        if kind == "resolve":
            reply = self.resolve.pop(0) if len(self.resolve) > 1 else self.resolve[0]
            return reply if isinstance(reply, (str, Status)) else json.dumps(reply)
        return self.answer

    def users(self, kind: str) -> list[str]:
        return [u for k, u in self.seen if k == kind]


def run(kb, script: Script, question: str, k: int = 5, **options):
    with FakeLLM(script) as fake:
        llm = kb.llm(LLMSettings(base_url=fake.base_url, model="fake-model", max_retries=0))
        return kb.retrieve(question, method="t2rag", k=k, llm=llm, **options)


def steps(hits, name: str) -> list[dict]:
    return [s for s in hits.trace.steps if s["step"] == name]


def test_two_hop_question_resolves_in_two_rounds_and_promotes_the_fuzzy_triple(kb):
    script = Script(
        {"triples": [["Lothair II", "mother", "?mother"], ["?mother", "died on", "?date"]]},
        [{"values": {"?mother": "Ermengarde of Tours"}}, {"values": {"?date": "20 March 851"}}])
    hits = run(kb, script, "When did the mother of Lothair II die?")

    assert hits.answer == "20 March 851"
    rounds = steps(hits, "round")
    assert [r["round"] for r in rounds] == [1, 2] and all(r["kind"] == "searchable" for r in rounds)
    # Round 1 searches only the searchable triple; the fuzzy one waits, then is promoted.
    assert rounds[0]["queries"] == ["Lothair II mother"]
    assert rounds[0]["promoted"] == ["(?mother, died on, ?date)"]
    assert rounds[1]["queries"] == ["Ermengarde of Tours died on"]
    assert steps(hits, "decompose")[0]["triples"][1]["state"] == "fuzzy"
    assert {t["state"] for t in rounds[1]["triples"]} == {"resolved"}
    assert hits.trace.outcome == {"finish": "natural"}
    # The resolver saw the evidence (propositions and their passages) and the known value.
    resolve = script.users("resolve")
    assert len(resolve) == 2 and "Passages:" in resolve[0] and "?mother = Ermengarde of Tours" in resolve[1]
    assert "(Ermengarde of Tours, died on, ?date)" in resolve[1]
    # Natural finish: the answer comes from the resolved triples alone, no passages.
    answer_prompt = script.users("answer")[0]
    assert "(Lothair II, mother, Ermengarde of Tours)" in answer_prompt
    assert "(Ermengarde of Tours, died on, 20 March 851)" in answer_prompt and "Passages" not in answer_prompt
    # Evidence has provenance to chunk and document; hits are those chunks first.
    docs = [h.provenance.external_id for h in hits]
    assert {"lothair", "ermengarde"} <= set(docs) and len(hits) == 5
    assert all(e["chunk_id"] and e["document"] for r in rounds for e in r["evidence"])
    assert hits[0].details["round"] == 1 and "via" in hits[0].details
    # Tokens: every call is counted, per round and in total.
    assert hits.trace.llm_calls == 4
    assert hits.trace.prompt_tokens == sum(
        s.get("prompt_tokens", 0) for s in hits.trace.steps if s["step"] in ("decompose", "round", "answer"))
    assert hits.trace.prompt_tokens > 0 and hits.trace.completion_tokens > 0


def test_comparison_question_searches_two_named_placeholders_in_one_pool(kb):
    script = Script(
        {"triples": [["Lothair II", "king of", "?realm"], ["Ermengarde of Tours", "married in", "?place"],
                     ["?realm", "same as", "?place"]]},
        [{"values": {"?realm": "Lotharingia", "?place": "Thionville"}}], answer="no")
    hits = run(kb, script, "Did Lothair II rule the place where Ermengarde of Tours married?")
    rounds = steps(hits, "round")
    assert len(rounds) == 1 and rounds[0]["queries"] == ["Lothair II king of", "Ermengarde of Tours married in"]
    assert rounds[0]["promoted"] == ["(?realm, same as, ?place)"]
    # One global pool over both queries, cut at 5 distinct chunks.
    assert len({e["chunk_id"] for e in rounds[0]["evidence"]}) == 5
    assert hits.answer == "no" and hits.trace.outcome["finish"] == "natural"
    assert "(Lotharingia, same as, Thionville)" in script.users("answer")[0]


def test_only_fuzzy_triples_fall_back_to_the_question_embedding(kb):
    question = "Who married whom in Thionville?"
    script = Script({"triples": [["?husband", "married", "?wife"]]},
                    [{"values": {"?husband": "Lothair I", "?wife": "Ermengarde of Tours"}}], answer="Lothair I")
    hits = run(kb, script, question)
    rounds = steps(hits, "round")
    assert rounds[0]["kind"] == "fallback" and rounds[0]["queries"] == [question]
    assert hits.trace.outcome["finish"] == "natural" and hits.answer == "Lothair I"


def test_a_fruitless_fallback_is_not_repeated(kb):
    script = Script({"triples": [["?someone", "visited", "?place"]]}, [{"values": {}}], answer="nobody")
    hits = run(kb, script, "Who visited where?")
    assert [r["kind"] for r in steps(hits, "round")] == ["fallback"]
    assert hits.trace.outcome["finish"] == "early" and len(script.users("resolve")) == 1


def test_forced_termination_after_n_rounds_answers_with_open_triples_and_evidence(kb):
    chain = [["Lothair II", "father", "?a"], ["?a", "wife", "?b"], ["?b", "father", "?c"], ["?c", "family", "?d"]]
    script = Script({"triples": chain},
                    [{"values": {"?a": "Lothair I"}}, {"values": {"?b": "Ermengarde of Tours"}},
                     {"values": {"?c": "Hugh of Tours"}}], answer="Etichonen")
    hits = run(kb, script, "Which family did the father of the wife of the father of Lothair II belong to?")
    assert len(steps(hits, "round")) == 3 and len(script.users("resolve")) == 3
    assert hits.trace.outcome["finish"] == "max_rounds"
    finish = steps(hits, "finish")[0]
    assert {"triple": "(Hugh of Tours, family, ?d)", "state": "searchable"} in finish["triples"]
    prompt = script.users("answer")[0]
    assert "Still open:\n- (Hugh of Tours, family, ?d)" in prompt and "Passages:" in prompt
    assert steps(hits, "answer")[0]["context"] == "triples + evidence" and hits.answer == "Etichonen"


def test_no_value_found_stops_early_without_re_searching(kb):
    script = Script({"triples": [["Lothair II", "favourite colour", "?colour"]]}, [{"values": {}}], answer="unknown")
    hits = run(kb, script, "What was the favourite colour of Lothair II?", max_rounds=3)
    assert len(steps(hits, "round")) == 1 and hits.trace.outcome["finish"] == "early"
    assert len(script.users("resolve")) == 1


def test_values_are_monotonic_and_unknown_names_ignored(kb):
    script = Script({"triples": [["Lothair II", "mother", "?mother"], ["?mother", "father", "?grandfather"]]},
                    [{"values": {"?mother": "Ermengarde of Tours", "?nobody": "x"}},
                     {"values": {"?mother": "Teutberga", "?grandfather": "Hugh of Tours"}}], answer="Hugh of Tours")
    hits = run(kb, script, "Who was the father of Lothair II's mother?")
    assert steps(hits, "finish")[0]["values"] == {"?mother": "Ermengarde of Tours", "?grandfather": "Hugh of Tours"}
    assert steps(hits, "round")[0]["new_values"] == {"?mother": "Ermengarde of Tours"}


def test_malformed_decomposition_degrades_to_one_round_and_is_traced(kb):
    script = Script("I think the answer is about kings.", [{"values": {}}], answer="Lotharingia")
    hits = run(kb, script, "Which kingdom did Lothair II rule?")
    failed = steps(hits, "decompose_failed")[0]
    assert "unusable LLM reply" in failed["error"] and failed["reply"]
    assert len(script.users("decompose")) == 2           # the reply, then one repair request
    assert hits.trace.outcome["finish"] == "llm_error" and hits.answer == "Lotharingia"
    assert len(hits) == 5 and steps(hits, "fallback")[0]["evidence"]
    assert "Passages:" in script.users("answer")[0]


def test_malformed_resolver_reply_is_recorded_and_the_loop_stops(kb):
    script = Script({"triples": [["Lothair II", "mother", "?mother"]]}, ["{not json", "still {not json"],
                    answer="Ermengarde")
    hits = run(kb, script, "Who was the mother of Lothair II?")
    rounds = steps(hits, "round")
    assert len(rounds) == 1 and "LLMReplyError" in rounds[0]["error"] and rounds[0]["new_values"] == {}
    assert hits.trace.outcome["finish"] == "early" and hits.answer == "Ermengarde"


def test_endpoint_errors_never_crash_retrieval(kb):
    down = Status(500, "boom")
    hits = run(kb, Script(down, [down], answer=down), "Who was the mother of Lothair II?")
    assert hits.trace.outcome["finish"] == "llm_error" and hits.answer is None and len(hits) == 5
    assert "HTTP 500" in steps(hits, "decompose_failed")[0]["error"]
    assert "HTTP 500" in steps(hits, "answer")[0]["error"]


def test_without_an_llm_it_retrieves_propositions_within_the_chunk_budget(kb, monkeypatch):
    for name in ("PGRAG_LLM_BASE_URL", "PGRAG_LLM_MODEL"):
        monkeypatch.delenv(name, raising=False)
    question = "Who was the mother of Lothair II?"
    hits = kb.retrieve(question, method="t2rag", k=3)
    props = kb.propositions(question, unique_chunks=3)
    assert [h.provenance.chunk_id for h in hits] == list(dict.fromkeys(p.chunk_id for p in props))
    assert hits.answer is None and hits.trace.outcome == {"finish": "no_llm"}
    assert "no LLM configured" in steps(hits, "no_llm")[0]["note"]
    assert kb.answer(question, method="t2rag", llm=False).text is None


def test_without_an_llm_the_order_is_the_propositions_cosine_recomputed_with_numpy(kb, db):
    """Independently of pgrag.propositions: every stored proposition vector against
    the question's, in numpy; chunks in order of their first proposition, each
    scored by its best one."""
    question = "Who was the mother of Lothair II?"
    hits = kb.retrieve(question, method="t2rag", k=3, llm=False)
    with db.transaction() as conn:
        rows = conn.execute("SELECT chunk_id, embedding FROM pgrag.triple WHERE corpus_id = %s "
                            "ORDER BY triple_id", (kb.id,)).fetchall()
    vectors = np.array([np.asarray(e.to_numpy(), dtype=np.float64) for _, e in rows])
    q = kb.embedder.encode([question])[0].astype(np.float64)
    cosines = vectors @ q / (np.linalg.norm(vectors, axis=1) * np.linalg.norm(q))
    best: dict[int, float] = {}
    for i in np.argsort(-cosines, kind="stable"):
        best.setdefault(rows[i][0], float(cosines[i]))
    expected = list(best.items())[:3]
    assert [h.provenance.chunk_id for h in hits] == [c for c, _ in expected]
    assert np.allclose([h.score for h in hits], [s for _, s in expected], atol=1e-5)


def test_settings_and_parsers():
    assert [t.state for t in parse_decomposition(
        {"triples": [["a", "b", "c"], ["a", "b", "?x"], ["?", "b", "?"]]}, 8)] == ["resolved", "searchable", "fuzzy"]
    # Bare marks are distinct unknowns; named ones are shared and case-insensitive.
    assert parse_decomposition([["?", "p", "?"]], 8)[0].placeholders == ["?x1", "?x2"]
    assert parse_decomposition([["?Film", "p", "?film"]], 8)[0].placeholders == ["?film"]
    assert len(parse_decomposition({"triples": [["a", "b", "?c"]] * 20}, 8)) == 8
    for bad in ({}, {"triples": []}, {"triples": [["a", "b"]]}, {"triples": [["a", "", "?c"]]}, "x"):
        with pytest.raises(ValueError):
            parse_decomposition(bad, 8)
    assert parse_values({"values": {"?X": "Paris", "y": 1912, "?z": "unknown", "?w": "a"}}, {"?x", "?y", "?z"}) == {
        "?x": "Paris", "?y": "1912"}
    with pytest.raises(ValueError):
        parse_values(["Paris"], {"?x"})
    assert QueryTriple("?a", "born in", "Paris").query() == "born in Paris"
    assert short_answer('\n  Answer: "Dean Miller".\nbecause...') == "Dean Miller" and short_answer("  \n") is None
    assert short_answer("I think so. Answer: Paris\n") == "Paris" and short_answer("**1912**") == "1912"


def test_bad_options_are_reported(kb):
    with pytest.raises(PgragError, match="max_rounds"):
        kb.retrieve("q", method="t2rag", llm=False, max_rounds=0)
    with pytest.raises(PgragError, match="settings: unique_chunks"):
        kb.retrieve("q", method="t2rag", llm=False, gamma=3)
