"""The oracle reader (pgrag.bench.oracle) without a database: prompt identification,
the reading rules, the leak guard, and that every reply parses with the
parser of the method that asked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pgrag import prompts
from pgrag.bench.oracle import Gold, Oracle, OracleCannotAnswer, OracleLeak, guard, load_gold, plan_for
from pgrag.llm import short_answer
from pgrag.methods import cirag, threadrag_agent
from pgrag.methods.t2rag import parse_decomposition, parse_values

BENCH = Path(__file__).resolve().parents[2] / ".." / "shared" / "bench" / "2wiki"

LOTHAIR = Gold(id="q1", type="compositional", question="When did Lothair Ii's mother die?", answer="20 March 851",
               evidences=(("Lothair II", "mother", "Ermengarde of Tours"),
                          ("Ermengarde of Tours", "date of death", "20 March 851")),
               supporting_titles=("Lothair II", "Ermengarde of Tours"))
ISLANDS = Gold(id="q2", type="comparison",
               question="Are Vasilyevsky Island and Preobrazheniya Island located in the same country?", answer="yes",
               evidences=(("Vasilyevsky Island", "country", "Russia"), ("Preobrazheniya Island", "country", "Russia")),
               supporting_titles=("Vasilyevsky Island", "Preobrazheniya Island"))
HOP1 = "[Lothair II] Lothair II was the second son of Emperor Lothair I and Ermengarde of Tours."
HOP2 = "[Ermengarde of Tours] Ermengarde of Tours married Lothair I. She died on 20 March 851."
NOISE = "[Nicki Minaj] Nicki Minaj was born in Port of Spain, Trinidad and Tobago."


def chat(kind: str, **fields: str) -> list[dict[str, str]]:
    system, user = prompts.KINDS[kind]
    messages = [{"role": "system", "content": system}] if system else []
    return messages + [{"role": "user", "content": user.format(**fields)}]


def t2rag_resolve(gold: Gold, triples: str, known: str, evidence: str) -> list[dict[str, str]]:
    return chat("t2rag_resolve", question=gold.question, triples=triples, known=known, evidence=evidence)


def cirag_integrate(question: str, candidates: str, history: str = prompts.CIRAG_NO_HISTORY,
                    query: str | None = None) -> list[dict[str, str]]:
    return chat("cirag_integrate", question=question, history=history, round="1", query=query or question,
                candidates=candidates)


def candidates(*lines: str) -> list[cirag.Candidate]:
    """CIRAG candidates numbered like the prompt lines (for parse_decision)."""
    return [cirag.Candidate(number=n, triple_id=n, score=0.5, subject="s", predicate="p", object=line, chunk_id=n,
                            document_id=n, title="t", sentence_ordinal=0, char_start=0, char_end=1, sentence=line)
            for n, line in enumerate(lines, start=1)]


# -- identification -------------------------------------------------------------------

def test_every_prompt_kind_is_identified_with_its_fields_even_when_repaired():
    for kind, (_system, user) in prompts.KINDS.items():
        import string
        names = {f for _, f, _, _ in string.Formatter().parse(user) if f}
        fields = {name: f"<{name} of {kind}>\nsecond line" for name in names}
        messages = chat(kind, **fields)
        assert prompts.identify(messages) == (kind, fields)
        repaired = messages + [{"role": "assistant", "content": "oops"},
                               {"role": "user", "content": prompts.REPAIR.format(error="bad")}]
        assert prompts.identify(repaired) == (kind, fields)
    assert prompts.identify([{"role": "user", "content": "Tell me a joke"}]) is None


# -- reading rules and the leak guard ----------------------------------------------------

def test_decomposition_names_only_what_the_question_names():
    oracle = Oracle([LOTHAIR, ISLANDS])
    reply = oracle.answer(chat("t2rag_decompose", question=LOTHAIR.question))
    triples = parse_decomposition(json.loads(reply), limit=8)
    assert [t.elements for t in triples] == [("Lothair II", "mother", "?mother"),
                                             ("?mother", "date of death", "?date_of_death")]
    # Two values that happen to be equal (both Russia) are two unknowns: one shared
    # placeholder would tell the answer of "the same country?" before any retrieval.
    reply = oracle.answer(chat("t2rag_decompose", question=ISLANDS.question))
    assert json.loads(reply)["triples"] == [["Vasilyevsky Island", "country", "?country"],
                                            ["Preobrazheniya Island", "country", "?country_2"]]


def test_the_oracle_cannot_answer_from_a_prompt_without_the_evidence():
    oracle = Oracle([LOTHAIR])
    q = LOTHAIR.question
    open_triples = "- (Lothair II, mother, ?mother)\n- (?mother, date of death, ?date_of_death)"
    for evidence in ("(no evidence found)", NOISE, HOP2.replace("Ermengarde of Tours", "She")):
        assert json.loads(oracle.answer(t2rag_resolve(LOTHAIR, open_triples, "(none yet)", evidence))) == {
            "values": {}}
        for kind, field in (("t2rag_answer", "facts"), ("cirag_answer", "evidence"),
                            ("threadrag_answer", "context")):
            extra = {"granularity": "passages"} if kind == "cirag_answer" else {}
            reply = oracle.answer(chat(kind, question=q, **{field: evidence}, **extra))
            assert reply != LOTHAIR.answer and (kind != "cirag_answer" or cirag.is_refusal(reply))
        assert json.loads(oracle.answer(chat("threadrag_sufficient", question=q, context=evidence)))[
            "sufficient"] is False
    # One hop of two is not enough to answer, though it resolves the bridge.
    assert json.loads(oracle.answer(t2rag_resolve(LOTHAIR, open_triples, "(none yet)", HOP1))) == {
        "values": {"?mother": "Ermengarde of Tours"}}
    assert oracle.answer(chat("threadrag_answer", question=q, context=HOP1)) == "unknown"
    # The second hop alone: the date is there, but nothing links it to the question.
    assert json.loads(oracle.answer(t2rag_resolve(LOTHAIR, open_triples, "(none yet)", HOP2))) == {"values": {}}
    # Both hops: the answer.
    assert oracle.answer(chat("threadrag_answer", question=q, context=f"{HOP1}\n\n{HOP2}")) == "20 March 851"
    assert oracle.answer(chat("t2rag_answer_forced", question=q, facts="(none)", open=open_triples,
                              evidence=f"{NOISE}\n{HOP1}\n{HOP2}")) == "20 March 851"


def test_the_second_hop_is_resolved_once_the_bridge_is_known():
    oracle = Oracle([LOTHAIR])
    reply = oracle.answer(t2rag_resolve(LOTHAIR, "- (Ermengarde of Tours, date of death, ?date_of_death)",
                                        "?mother = Ermengarde of Tours", HOP2))
    assert parse_values(json.loads(reply), {"?date_of_death"}) == {"?date_of_death": "20 March 851"}


def test_the_leak_guard_refuses_a_value_the_prompt_does_not_contain():
    guard("Evidence: she died on 20 March 851", ["20 march 851"])       # normalised match passes
    with pytest.raises(OracleLeak, match="Port of Spain"):
        guard("Evidence: she died on 20 March 851", ["Port of Spain"])
    with pytest.raises(OracleLeak):
        guard("Is it the same country?", ["yes"])                      # yes/no only for yes/no answers
    guard("Is it the same country?", ["yes"], yes_no_ok=True)

    # Wired in: a reader that would answer from its gold record alone is stopped.
    class Cheat(Oracle):
        def _final(self, kind, plan, lines):
            out = super()._final(kind, plan, lines)
            out.reply, out.values = plan.gold.answer, [plan.gold.answer]
            return out

    with pytest.raises(OracleLeak):
        Cheat([LOTHAIR]).answer(chat("threadrag_answer", question=LOTHAIR.question, context=NOISE))


def test_unknown_questions_and_extraction_prompts_are_refused():
    oracle = Oracle([LOTHAIR])
    with pytest.raises(OracleCannotAnswer, match="no gold record"):
        oracle.answer(chat("t2rag_decompose", question="Who wrote Hamlet?"))
    with pytest.raises(OracleCannotAnswer, match="does not answer 'ner'"):
        oracle.answer(chat("ner", passage="Marie Curie was born in Warsaw."))


# -- every reply parses with the method's own parser -------------------------------------

def test_each_prompt_kind_gets_a_reply_its_parser_accepts():
    oracle = Oracle([LOTHAIR])
    q = LOTHAIR.question
    both = f"{HOP1}\n{HOP2}"
    triples = parse_decomposition(json.loads(oracle.answer(chat("t2rag_decompose", question=q))), limit=8)
    assert len(triples) == 2
    values = parse_values(json.loads(oracle.answer(t2rag_resolve(
        LOTHAIR, "- (Lothair II, mother, ?mother)\n- (?mother, date of death, ?date_of_death)", "(none yet)",
        both))), {"?mother", "?date_of_death"})
    assert values == {"?mother": "Ermengarde of Tours", "?date_of_death": "20 March 851"}
    facts = "- (Lothair II, mother, Ermengarde of Tours)\n- (Ermengarde of Tours, date of death, 20 March 851)"
    assert short_answer(oracle.answer(chat("t2rag_answer", question=q, facts=facts))) == "20 March 851"
    assert short_answer(oracle.answer(chat("t2rag_answer", question=q, facts="(none)"))) == "unknown"

    lines = ["1. (Lothair II; was; king of Lotharingia) [Lothair II]",
             "2. (He; was; the second son of Emperor Lothair I and Ermengarde of Tours) [Lothair II]",
             "3. (Nicki Minaj; was born in; Port of Spain) [Nicki Minaj]"]
    cands = candidates(*lines)
    decision = cirag.parse_decision(json.loads(oracle.answer(cirag_integrate(q, "\n".join(lines)))), cands)
    assert 2 in decision.core and 3 not in decision.core
    assert decision.next_query == "What is the date of death of Ermengarde of Tours?"
    history = ("Round 1 (query: When did Lothair Ii's mother die?): kept (He; was; the second son of Emperor "
               "Lothair I and Ermengarde of Tours). Thought: Found: Lothair II mother: Ermengarde of Tours. "
               "Next query: What is the date of death of Ermengarde of Tours?")
    lines2 = ["1. (She; died on; 20 March 851) [Ermengarde of Tours]"]
    decision = cirag.parse_decision(json.loads(oracle.answer(cirag_integrate(
        q, "\n".join(lines2), history=history, query="What is the date of death of Ermengarde of Tours?"))),
        candidates(*lines2))
    assert decision.core == (1,) and decision.next_query is None
    answer = short_answer(oracle.answer(chat("cirag_answer", granularity="sentences", question=q,
                                             evidence=f"- {HOP1}\n- {HOP2}")))
    assert answer == "20 March 851" and not cirag.is_refusal(answer)
    assert cirag.is_refusal(short_answer(oracle.answer(chat("cirag_answer", granularity="triples", question=q,
                                                            evidence="- (She; died on; 20 March 851)"))))

    assert threadrag_agent.parse_entities(json.loads(oracle.answer(chat("threadrag_entities", question=q)))) == [
        "Lothair II"]
    assert threadrag_agent.parse_verdict(json.loads(oracle.answer(chat("threadrag_sufficient", question=q,
                                                                       context=HOP1)))) == (
        False, ["Ermengarde of Tours"])
    assert threadrag_agent.parse_verdict(json.loads(oracle.answer(chat("threadrag_sufficient", question=q,
                                                                       context=f"{HOP1}\n\n{HOP2}")))) == (True, [])
    assert short_answer(oracle.answer(chat("threadrag_answer", question=q, context=both))) == "20 March 851"


def test_a_question_entity_worded_otherwise_is_named_as_the_question_words_it():
    gold = Gold(id="q", type="compositional", question="Where was the place of death of Maurice, Prince Of Orange's "
                "father?", answer="Delft", evidences=(("Maurice of Nassau", "father", "William the Silent"),
                                                      ("William the Silent", "place of death", "Delft")))
    plan = plan_for(gold)
    assert plan.entities[0].asked == "Maurice, Prince Of Orange"
    assert [e.placeholder for e in plan.entities] == [None, "?father", "?place_of_death"]


# -- the whole question set (skipped without ../shared/bench) -----------------------------

@pytest.mark.skipif(not (BENCH / "questions.jsonl").exists(),
                    reason="../shared/bench/2wiki is absent (the shared benchmark data)")
def test_on_every_bench_question_gold_passages_answer_and_no_evidence_refuses():
    golds = load_gold(BENCH / "questions.jsonl")
    texts = {d["title"]: d["text"] for d in json.loads((BENCH / "corpus.json").read_text(encoding="utf-8"))}
    oracle = Oracle(golds)
    for g in golds:
        gold_context = "\n\n".join(f"[{t}] {texts[t]}" for t in g.supporting_titles)
        first_only = f"[{g.supporting_titles[0]}] {texts[g.supporting_titles[0]]}"
        decomposition = parse_decomposition(json.loads(oracle.answer(chat("t2rag_decompose", question=g.question))),
                                            limit=8)
        assert len(decomposition) == len(g.evidences)
        assert oracle.answer(chat("threadrag_answer", question=g.question, context=gold_context)) == g.answer
        assert json.loads(oracle.answer(chat("threadrag_sufficient", question=g.question,
                                             context=gold_context))) == {"sufficient": True}
        assert oracle.answer(chat("threadrag_answer", question=g.question, context=first_only)) == "unknown", \
            g.question
        assert oracle.answer(chat("threadrag_answer", question=g.question, context="(nothing)")) == "unknown"
