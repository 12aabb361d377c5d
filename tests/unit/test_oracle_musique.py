"""The oracle reader on MuSiQue records (pgrag.bench.oracle.gold): evidence
triples derived from ``question_decomposition``, hop-1 subjects the question
names, accepted answers, and the reader's replies on them. The records are
copied verbatim from ../shared/bench/musique/questions.jsonl."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pgrag import prompts
from pgrag.bench.oracle import Gold, Oracle, grounded, load_gold, plan_for
from pgrag.bench.oracle.matching import contains
from pgrag.methods import threadrag_agent
from pgrag.methods.t2rag import parse_decomposition

BENCH = Path(__file__).resolve().parents[2] / ".." / "shared" / "bench" / "musique"

NO_ESCAPE = json.loads('''{"id": "2hop__765678_310556", "type": "2hop", "question": "Who was married to the star of No
Escape?", "answer": "John Profumo", "answer_aliases": [], "supporting_titles": ["No Escape (1936 film)", "David
Profumo"], "supporting_corpus_indices": [1561, 1549], "question_decomposition": [{"question": "No Escape >> cast
member", "answer": "Valerie Hobson", "title": "No Escape (1936 film)", "corpus_index": 1561}, {"question": "#1 >>
spouse", "answer": "John Profumo", "title": "David Profumo", "corpus_index": 1549}]}'''.replace("\n", " "))
MANCHURIA = json.loads('''{"id": "2hop__33288_157788", "type": "2hop", "question": "What is an example of a railroad
line in the country first to invade Manchuria?", "answer": "Yamanote Line loop", "answer_aliases": ["Yamanote Line"],
"supporting_titles": ["Modern history", "Tokyo"], "supporting_corpus_indices": [1297, 1303], "question_decomposition":
[{"question": "Who was first to invade Manchuria?", "answer": "Japan", "title": "Modern history", "corpus_index": 1297},
{"question": "What is one railway line in #1 ?", "answer": "Yamanote Line loop", "title": "Tokyo", "corpus_index":
1303}]}'''.replace("\n", " "))
PHU_LUONG = json.loads('''{"id": "3hop2__782397_467331_162182", "type": "3hop", "question": "In what region of the
country that contains Phu Luong, is the city that has the Zone 5 Military Museum located?", "answer": "South Central
Coast", "answer_aliases": [], "supporting_titles": ["Ph\\u00fa L\\u01b0\\u01a1ng (mountain)", "Zone 5 Military Museum,
Danang", "South Central Coast"], "supporting_corpus_indices": [146, 140, 151], "question_decomposition": [{"question":
"Phu Luong >> country", "answer": "Vietnam", "title": "Ph\\u00fa L\\u01b0\\u01a1ng (mountain)", "corpus_index": 146},
{"question": "Zone 5 Military Museum >> located in the administrative territorial entity", "answer": "Da Nang", "title":
"Zone 5 Military Museum, Danang", "corpus_index": 140}, {"question": "In what region of #1 is #2 located?", "answer":
"South Central Coast", "title": "South Central Coast", "corpus_index": 151}]}'''.replace("\n", " "))
ASCHENBRODEL = json.loads('''{"id": "3hop1__404363_705261_126049", "type": "3hop", "question": "Who was in charge of
the country where the composer of Aschenbrodel was a citizen?", "answer": "Karl Renner", "answer_aliases": [],
"supporting_titles": ["Aschenbr\\u00f6del", "Vienna Walzer Orchestra", "Austria"], "supporting_corpus_indices": [1944,
1942, 973], "question_decomposition": [{"question": "Aschenbr\\u00f6del >> composer", "answer": "Johann Strauss II",
"title": "Aschenbr\\u00f6del", "corpus_index": 1944}, {"question": "#1 >> country of citizenship", "answer": "Austria",
"title": "Vienna Walzer Orchestra", "corpus_index": 1942}, {"question": "Who was in charge of #2 ?", "answer": "Karl
Renner", "title": "Austria", "corpus_index": 973}]}'''.replace("\n", " "))
STUDY_IN_BROWN = json.loads('''{"id": "4hop1__567737_141375_458768_33637", "type": "4hop", "question": "How many
ethnic minorities were looked at differently in the city where the headquarters of the company that Study in Brown's
record label is a part of?", "answer": "two", "answer_aliases": [], "supporting_titles": ["Study in Brown", "EmArcy
Records", "The Right Stuff Records", "Santa Monica, California"], "supporting_corpus_indices": [1832, 1173, 1167, 1176],
"question_decomposition": [{"question": "Study in Brown >> record label", "answer": "EmArcy Records", "title": "Study
in Brown", "corpus_index": 1832}, {"question": "What company is #1 part of?", "answer": "Universal Music Group",
"title": "EmArcy Records", "corpus_index": 1173}, {"question": "#2 >> headquarters location", "answer": "Santa Monica",
"title": "The Right Stuff Records", "corpus_index": 1167}, {"question": "How many ethnic minorities were looked at
differently in #3 ?", "answer": "two", "title": "Santa Monica, California",
"corpus_index": 1176}]}'''.replace("\n", " "))
ANTARCTICA = json.loads('''{"id": "2hop__161500_15014", "type": "2hop", "question": "What is the continental limit of
the continent with the lowest average temperature?", "answer": "60th parallel south", "answer_aliases": [],
"supporting_titles": ["Antarctica"], "supporting_corpus_indices": [2796, 2807], "question_decomposition": [{"question":
"Which continent has the lowest average temperature?", "answer": "Antarctica", "title": "Antarctica", "corpus_index":
2796}, {"question": "Where is the continental limit of #1 ?", "answer": "60th parallel south", "title": "Antarctica",
"corpus_index": 2807}]}'''.replace("\n", " "))


def chat(kind: str, **fields: str) -> list[dict[str, str]]:
    system, user = prompts.KINDS[kind]
    messages = [{"role": "system", "content": system}] if system else []
    return messages + [{"role": "user", "content": user.format(**fields)}]


# -- derived triples ---------------------------------------------------------------

def test_two_hops_in_wikidata_form_give_the_subject_before_the_arrows():
    gold = Gold.from_json(NO_ESCAPE)
    assert gold.evidences == (("No Escape", "cast member", "Valerie Hobson"),
                              ("Valerie Hobson", "spouse", "John Profumo"))
    assert grounded(plan_for(gold))


def test_a_question_form_first_hop_takes_the_entity_the_question_names():
    gold = Gold.from_json(MANCHURIA)
    assert gold.evidences == (("Manchuria", "first to invade", "Japan"),
                              ("Japan", "one railway line in", "Yamanote Line loop"))
    assert gold.answer_aliases == ("Yamanote Line",)
    plan = plan_for(gold)
    assert [e.asked for e in plan.entities] == ["Manchuria", None, None]
    assert grounded(plan)


def test_three_hops_with_two_roots_give_one_triple_per_reference():
    gold = Gold.from_json(PHU_LUONG)
    relation = "In what region of is located"
    assert gold.evidences == (("Phu Luong", "country", "Vietnam"),
                              ("Zone 5 Military Museum", "located in the administrative territorial entity", "Da Nang"),
                              ("Vietnam", relation, "South Central Coast"),
                              ("Da Nang", relation, "South Central Coast"))
    plan = plan_for(gold)
    assert [e.asked for e in plan.entities if e.named] == ["Phu Luong", "Zone 5 Military Museum"]
    assert grounded(plan)


def test_a_subject_spelled_without_accents_is_named_in_the_question_s_spelling():
    gold = Gold.from_json(ASCHENBRODEL)
    assert gold.evidences == (("Aschenbrodel", "composer", "Johann Strauss II"),
                              ("Johann Strauss II", "country of citizenship", "Austria"),
                              ("Austria", "in charge of", "Karl Renner"))
    plan = plan_for(gold)
    assert plan.entities[0].surfaces == ["Aschenbrodel", "Aschenbrödel"]
    assert plan.entities[0].asked == "Aschenbrodel"
    assert grounded(plan)


def test_four_hops_chain_each_answer_to_the_next():
    gold = Gold.from_json(STUDY_IN_BROWN)
    assert gold.evidences == (("Study in Brown", "record label", "EmArcy Records"),
                              ("EmArcy Records", "company is part of", "Universal Music Group"),
                              ("Universal Music Group", "headquarters location", "Santa Monica"),
                              ("Santa Monica", "ethnic minorities were looked at differently in", "two"))
    assert grounded(plan_for(gold))


def test_a_first_hop_the_question_does_not_name_falls_back_to_the_title_and_is_not_grounded():
    gold = Gold.from_json(ANTARCTICA)
    assert gold.evidences[0] == ("Antarctica", "continent has the lowest average temperature", "Antarctica")
    plan = plan_for(gold)
    assert not grounded(plan)
    assert not any(e.named for e in plan.entities)


# -- the reader on them ------------------------------------------------------------

HOP1 = "[Modern history] Japan was the first to invade Manchuria in 1931."
HOP2_ALIAS = "[Tokyo] Japan's capital Tokyo is served by the Yamanote Line."


def test_the_reader_answers_with_an_accepted_answer_only_when_the_chain_is_in_the_prompt():
    oracle = Oracle([Gold.from_json(MANCHURIA)])
    q = MANCHURIA["question"]
    decomposition = parse_decomposition(json.loads(oracle.answer(chat("t2rag_decompose", question=q))), limit=8)
    assert [(t.subject, t.object) for t in decomposition] == [("Manchuria", "?first_to_invade"),
                                                              ("?first_to_invade", "?one_railway_line_in")]
    assert oracle.answer(chat("threadrag_answer", question=q, context=HOP1)) == "unknown"
    assert threadrag_agent.parse_verdict(json.loads(oracle.answer(chat("threadrag_sufficient", question=q,
                                                                       context=HOP1)))) == (False, ["Japan"])
    # the gold answer ("Yamanote Line loop") is not in the prompt: the alias is the reply
    assert oracle.answer(chat("threadrag_answer", question=q, context=f"{HOP1}\n\n{HOP2_ALIAS}")) == "Yamanote Line"
    # the second hop's line without the bridge ("Japan") does not support it
    assert oracle.answer(chat("threadrag_answer", question=q,
                              context=f"{HOP1}\n\n[Tokyo] Tokyo has the Yamanote Line.")) == "unknown"


def test_an_answer_extending_a_bridge_is_its_own_entity():
    raw = {"id": "q", "question": "From where do buses leave the city CKIS-FM serves?", "answer": "Toronto Coach "
           "Terminal", "question_decomposition": [
               {"question": "What town or city does CKIS-FM serve?", "answer": "Toronto", "title": "CKIS-FM"},
               {"question": "Greyhound buses leave from where in #1 ?", "answer": "Toronto Coach Terminal",
                "title": "Toronto"}]}
    plan = plan_for(Gold.from_json(raw))
    assert len(plan.entities) == 3 and plan.triples[1][0] != plan.triples[1][2]
    oracle = Oracle([Gold.from_json(raw)])
    hop1 = "[CKIS-FM] CKIS-FM is a radio station in Toronto."
    assert oracle.answer(chat("threadrag_answer", question=raw["question"], context=hop1)) == "unknown"


@pytest.mark.skipif(not (BENCH / "questions.jsonl").exists(),
                    reason="../shared/bench/musique is absent (the shared benchmark data)")
def test_every_musique_record_loads_and_its_question_entities_come_from_the_question():
    golds = load_gold(BENCH / "questions.jsonl")
    oracle = Oracle(golds)                  # every reply below passes the leak guard
    for g in golds:
        plan = plan_for(g)
        assert all(e.asked and contains(g.question, e.asked) for e in plan.entities if e.named)
        triples = parse_decomposition(json.loads(oracle.answer(chat("t2rag_decompose", question=g.question))),
                                      limit=8)
        assert len(triples) == len(g.evidences)
        entities = json.loads(oracle.answer(chat("threadrag_entities", question=g.question)))["entities"]
        assert all(contains(g.question, name) for name in entities)


def test_an_alias_that_spells_the_bridge_is_not_a_surface_of_the_answer():
    raw = {"id": "q", "question": "The Consulate General of the United States, in the city Sarah Sorge was born, is "
           "located in what territory?", "answer": "Frankfurt am Main", "answer_aliases": ["Frankfurt", "FaM"],
           "question_decomposition": [
               {"question": "Sarah Sorge >> place of birth", "answer": "Frankfurt", "title": "Sarah Sorge"},
               {"question": "Consulate General of the United States, #1 >> located in the administrative territorial "
                "entity", "answer": "Frankfurt am Main", "title": "Consulate General of the United States, Frankfurt"}]}
    gold = Gold.from_json(raw)
    plan = plan_for(gold)
    assert plan.entities[-1].surfaces == ["Frankfurt am Main"]
    oracle = Oracle([gold])
    hop1 = "[Sarah Sorge] Sarah Sorge (born 1969 in Frankfurt) is a German politician."
    assert oracle.answer(chat("threadrag_answer", question=raw["question"], context=hop1)) == "unknown"
    hop2 = "[Consulate] The consulate in Frankfurt serves the city of Frankfurt am Main."
    assert oracle.answer(chat("threadrag_answer", question=raw["question"],
                              context=f"{hop1}\n\n{hop2}")) == "Frankfurt am Main"


def test_an_alias_the_question_names_is_not_a_surface_of_the_answer():
    raw = {"id": "3hop1__379315_160713_77246", "question": "What is the Arabic dictionary meaning of the word "
           "referring to the majority religion in the area of British India, that became India when the country "
           "containing Barawal was formed?", "answer": "the country of India",
           "answer_aliases": ["IND", "IN", "India", "in", "Republic of India"], "question_decomposition": [
               {"question": "Barawal >> country", "answer": "Pakistan", "title": "Barawal (union council)"},
               {"question": "What was the majority religion in the area of British India that become India when #1 "
                "was created?", "answer": "Hindu", "title": "Partition of India"},
               {"question": "what is the meaning of #2 in arabic dictionary", "answer": "the country of India",
                "title": "Hindus"}]}
    plan = plan_for(Gold.from_json(raw))
    assert plan.entities[-1].surfaces == ["the country of India", "Republic of India"]


def test_the_oracle_names_tigrag_readers_next_bridge_from_the_passages_shown():
    """TIGRAG's reader prompt gets ThreadRAG's judgement: the bridge the passages
    establish and the search still needs, then sufficient once the chain is there."""
    oracle = Oracle([Gold.from_json(MANCHURIA)])
    q = MANCHURIA["question"]
    assert prompts.identify(chat("tigrag_reader", question=q, context=HOP1))[0] == "tigrag_reader"
    verdict = threadrag_agent.parse_verdict(json.loads(oracle.answer(chat("tigrag_reader", question=q, context=HOP1))))
    assert verdict == (False, ["Japan"])
    both = oracle.answer(chat("tigrag_reader", question=q, context=f"{HOP1}\n\n{HOP2_ALIAS}"))
    assert threadrag_agent.parse_verdict(json.loads(both)) == (True, [])
