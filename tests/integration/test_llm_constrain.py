"""Constrained decoding (pgrag.llm, pgrag.prompts.SCHEMAS): every structured prompt
of the LLM-driven methods is sent with its reply's JSON schema as
``response_format``; a reply that breaks the schema is still repaired or refused
clearly; an endpoint that refuses ``response_format`` gets the request again
without it, once, and the trace says so; the schema is part of the cache key.
A recording fake server (tests/fake_llm.py) holds every request body."""

from __future__ import annotations

import json

import pytest

from pgrag import prompts
from pgrag.exceptions import ConfigError
from pgrag.extract import ExtractionReport, _llm_chunk
from pgrag.llm import LLM, LLMError, LLMReplyError, LLMSettings, response_format, strict
from pgrag.methods import cirag, t2rag, threadrag_agent, tigrag_reader
from pgrag.methods.cirag import CiragSettings
from pgrag.methods.t2rag import T2ragSettings
from pgrag.methods.threadrag_settings import ThreadragSettings
from pgrag.methods.tigrag_settings import TigragSettings
from pgrag.results import Trace
from tests.fake_llm import FakeLLM, Status

QUESTION = "When did Lothair II's mother die?"
PASSAGE = "Lothair II was the son of Ermengarde of Tours. Ermengarde of Tours died on 20 March 851."

# A valid reply for each prompt kind (the shape its schema describes).
VALID = {
    "ner": {"entities": ["Lothair II", "Ermengarde of Tours"]},
    "triples": {"triples": [["Lothair II", "son of", "Ermengarde of Tours"]]},
    "t2rag_decompose": {"triples": [["Lothair II", "mother", "?mother"], ["?mother", "died on", "?date"]]},
    "t2rag_resolve": {"values": {"?mother": "Ermengarde of Tours"}},
    "cirag_integrate": {"thought": "The mother is known.", "core": [1], "next_query": None},
    "threadrag_entities": {"entities": ["Lothair II"]},
    "threadrag_sufficient": {"sufficient": False, "missing": ["Ermengarde of Tours"]},
    "tigrag_reader": {"sufficient": True, "missing": []},
}


def by_kind(request):
    """The scripted endpoint: a valid reply to whichever prompt this is."""
    found = prompts.identify(request["messages"])
    assert found is not None, request["messages"]
    return json.dumps(VALID[found[0]])


class Chunks:
    """What tigrag's reader asks of a context: the chunks' titles and texts."""

    def chunk_texts(self, ids):
        return {i: ("Lothair II", PASSAGE) for i in ids}


def ask_every_structured_prompt(llm: LLM) -> None:
    """Each caller of LLM.structured in the four methods (and T2RAG's LLM
    extraction), once, through its own code."""
    trace = Trace(method="test", query=QUESTION)
    assert _llm_chunk(llm, PASSAGE, ExtractionReport(extractor="llm"))
    settings = T2ragSettings()
    triples = t2rag._decompose(llm, QUESTION, settings, trace)
    values, error = t2rag._resolve(None, llm, QUESTION, settings, t2rag._State(triples=triples), [], trace)
    assert error is None and values == {"?mother": "Ermengarde of Tours"}
    candidate = cirag.Candidate(number=1, triple_id=1, score=1.0, subject="Lothair II", predicate="son of",
                                object="Ermengarde of Tours", chunk_id=1, document_id=1, title="Lothair II",
                                sentence_ordinal=0, char_start=0, char_end=10, sentence=PASSAGE)
    rounds = [cirag.Round(number=1, query=QUESTION, candidates=[candidate], documents=[])]
    assert cirag.integrate(llm, QUESTION, rounds, CiragSettings(), trace).core == (1,)
    assert threadrag_agent.question_entities(None, QUESTION, llm, ThreadragSettings(), trace) == ["Lothair II"]
    assert threadrag_agent.check_sufficiency(llm, QUESTION, [], ThreadragSettings(), trace, 1) == (
        False, ["Ermengarde of Tours"])
    reader = tigrag_reader.Reader(llm=llm, settings=TigragSettings())
    verdict = tigrag_reader.read(Chunks(), reader, QUESTION, [1], 1, trace)
    assert verdict is not None and verdict.sufficient


def client(db, fake, **settings) -> LLM:
    return db.corpus("constrain").llm(LLMSettings(base_url=fake.base_url, model=fake.model, max_retries=0,
                                                  **settings))


def test_every_structured_prompt_sends_its_schema(db):
    with FakeLLM(by_kind) as fake:
        llm = client(db, fake)                              # the default form: json_object with the schema
        ask_every_structured_prompt(llm)
    kinds = [prompts.identify(r["messages"])[0] for r in fake.requests]
    assert sorted(kinds) == sorted(prompts.SCHEMAS)        # every structured prompt, each once
    for kind, request in zip(kinds, fake.requests):
        assert request["response_format"] == {"type": "json_object", "schema": prompts.SCHEMAS[kind].schema}, kind
    assert (llm.usage.replies, llm.usage.parse_failures, llm.usage.constrained) == (8, 0, 8)


def test_the_json_schema_form_and_off(db):
    with FakeLLM(by_kind) as fake:
        ask_every_structured_prompt(client(db, fake, constrain="json_schema"))
    for request in fake.requests:
        kind = prompts.identify(request["messages"])[0]
        form = request["response_format"]
        assert form["type"] == "json_schema" and form["json_schema"]["name"] == kind
        assert form["json_schema"]["schema"] == prompts.SCHEMAS[kind].schema
        # OpenAI's strict mode takes every schema but T2RAG's map of placeholder names
        assert form["json_schema"]["strict"] is (kind != "t2rag_resolve")
    with FakeLLM(by_kind) as fake:
        off = db.corpus("off").llm(LLMSettings(base_url=fake.base_url, model=fake.model, constrain="off"))
        ask_every_structured_prompt(off)
    assert len(fake.requests) == 8 and not any("response_format" in r for r in fake.requests)
    assert off.usage.constrained == 0 and off.usage.replies == 8
    with pytest.raises(ConfigError, match="unknown LLM constrain mode 'grammar'"):
        LLMSettings(model="m", base_url="http://x", constrain="grammar")


def test_the_mode_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv("PGRAG_LLM_CONSTRAIN", raising=False)
    assert LLMSettings.from_env().constrain == "json_object"
    monkeypatch.setenv("PGRAG_LLM_CONSTRAIN", "json_schema")
    assert LLMSettings.from_env().constrain == "json_schema"
    assert LLMSettings.from_env(constrain="off").constrain == "off"
    monkeypatch.setenv("PGRAG_LLM_CONSTRAIN", "yes")
    with pytest.raises(ConfigError, match="PGRAG_LLM_CONSTRAIN: one of off, json_object, json_schema"):
        LLMSettings.from_env()


def test_strict_is_what_openai_accepts():
    assert strict(prompts.VERDICT) and not strict(prompts.T2RAG_RESOLVE_REPLY.schema)
    assert not strict({"type": "object", "properties": {"a": {"type": "string"}}, "required": [],
                       "additionalProperties": False})
    assert response_format("off", prompts.NER_REPLY) is None and response_format("json_schema", None) is None


def test_a_reply_that_breaks_the_schema_is_repaired_or_refused(db):
    """An endpoint that ignores the schema (or a model cut off mid-value): the
    reply is checked as before, repaired once with the schema again, else a
    typed failure that the caller handles; every reply that did not parse counts."""
    sent = iter(['{"sufficient": "maybe"}', '{"sufficient": false, "missing": ["Ermengarde of Tours"]}',
                 '{"sufficient": fal', '{"missing": []}'])
    with FakeLLM(lambda request: next(sent)) as fake:
        llm = client(db, fake)
        trace = Trace(method="threadrag", query=QUESTION)
        assert threadrag_agent.check_sufficiency(llm, QUESTION, [], ThreadragSettings(), trace, 1) == (
            False, ["Ermengarde of Tours"])
        # another question (the same one again would be answered from the cache)
        assert threadrag_agent.check_sufficiency(llm, "Who?", [], ThreadragSettings(), trace, 2) is None
        trace.charge(llm.usage)
    assert len(fake.requests) == 4
    assert all(r["response_format"]["schema"] == prompts.VERDICT for r in fake.requests)   # repairs too
    assert "could not be used" in fake.requests[1]["messages"][-1]["content"]
    assert (llm.usage.repairs, llm.usage.failures) == (2, 1)
    assert (trace.llm_replies, trace.parse_failures, trace.constrained_calls) == (4, 3, 4)
    assert [s for s in trace.steps if s["step"] == "sufficiency"][1]["error"].startswith(
        "unusable LLM reply after a repair attempt")
    with FakeLLM(lambda request: "{") as fake:
        with pytest.raises(LLMReplyError):
            client(db, fake).structured([{"role": "user", "content": "x"}], threadrag_agent.parse_verdict,
                                        schema=prompts.TIGRAG_READER_REPLY)


@pytest.mark.parametrize("status", [400, 422])
def test_an_endpoint_that_refuses_response_format_gets_it_without_once(db, status):
    def refuses(request):
        if "response_format" in request:
            return Status(status, "response_format is not supported", "invalid_request_error")
        return by_kind(request)

    with FakeLLM(refuses) as fake:
        llm = client(db, fake)
        trace = Trace(method="tigrag-reader", query=QUESTION)
        reader = tigrag_reader.Reader(llm=llm, settings=TigragSettings())
        for hop in (1, 2):
            reader.shown.clear()
            assert tigrag_reader.read(Chunks(), reader, f"{QUESTION} {hop}", [1], hop, trace).sufficient
        trace.charge(llm.usage)
    # the first request refused, sent again without it; the second question never asks again
    assert ["response_format" in r for r in fake.requests] == [True, False, False]
    assert llm.constraint_refused and f"HTTP {status}" in llm.constraint_refused
    assert llm.usage.unconstrained == 1 and llm.usage.calls == 2 and trace.constrained_calls == 0
    [step] = [s for s in trace.steps if s["step"] == "llm_unconstrained"]
    assert step["requests"] == 1 and trace.outcome["constraint"] == "refused"


def test_other_errors_are_not_taken_for_a_refusal(db):
    with FakeLLM(lambda request: Status(400, "the prompt is too long", "invalid_request_error")) as fake:
        llm = client(db, fake)
        with pytest.raises(LLMError, match="HTTP 400"):
            llm.structured([{"role": "user", "content": "x"}], threadrag_agent.parse_verdict,
                           schema=prompts.TIGRAG_READER_REPLY)
    # asked without response_format too, which failed as well: the error stands, and
    # the client still constrains its next request
    assert ["response_format" in r for r in fake.requests] == [True, False]
    assert llm.constraint_refused is None and llm.usage.unconstrained == 0


def test_an_unconstrained_cached_reply_is_not_reused_for_a_constrained_request(db):
    messages = [{"role": "user", "content": prompts.TIGRAG_READER.format(context=PASSAGE, question=QUESTION)}]
    with FakeLLM(by_kind) as fake:
        for mode, sent in (("off", 1), ("json_object", 2), ("json_object", 2), ("json_schema", 3), ("off", 3)):
            llm = client(db, fake, constrain=mode)
            llm.structured(messages, threadrag_agent.parse_verdict, schema=prompts.TIGRAG_READER_REPLY)
            assert len(fake.requests) == sent, mode


def real_prompts():
    """(kind, messages, validator) for every structured prompt, filled as its caller fills it."""
    from pgrag.extract import _entity_list, _triple_list

    candidate = cirag.Candidate(number=1, triple_id=1, score=1.0, subject="Lothair II", predicate="son of",
                                object="Ermengarde of Tours", chunk_id=1, document_id=1, title="Lothair II",
                                sentence_ordinal=0, char_start=0, char_end=10, sentence=PASSAGE)
    rounds = [cirag.Round(number=1, query=QUESTION, candidates=[candidate], documents=[])]
    evidence = "- Lothair II son of Ermengarde of Tours [Lothair II]\n- Ermengarde of Tours died on 20 March 851"
    return [
        ("ner", [{"role": "system", "content": prompts.NER_SYSTEM},
                 {"role": "user", "content": prompts.NER_USER.format(passage=PASSAGE)}], _entity_list),
        ("triples", [{"role": "system", "content": prompts.TRIPLES_SYSTEM},
                     {"role": "user", "content": prompts.TRIPLES_USER.format(
                         passage=PASSAGE, entities='["Lothair II", "Ermengarde of Tours"]')}], _triple_list),
        ("t2rag_decompose", [{"role": "system", "content": prompts.T2RAG_DECOMPOSE_SYSTEM},
                             {"role": "user", "content": prompts.T2RAG_DECOMPOSE_USER.format(question=QUESTION)}],
         lambda v: t2rag.parse_decomposition(v, 8)),
        ("t2rag_resolve", [{"role": "system", "content": prompts.T2RAG_RESOLVE_SYSTEM},
                           {"role": "user", "content": prompts.T2RAG_RESOLVE_USER.format(
                               question=QUESTION,
                               triples="- (Lothair II, mother, ?mother)\n- (?mother, died on, ?date)",
                               known="(none yet)", evidence=evidence)}],
         lambda v: t2rag.parse_values(v, {"?mother", "?date"})),
        ("cirag_integrate", cirag.integration_messages(QUESTION, rounds),
         lambda v: cirag.parse_decision(v, [candidate])),
        ("threadrag_entities", [{"role": "user", "content": prompts.THREADRAG_ENTITIES.format(question=QUESTION)}],
         threadrag_agent.parse_entities),
        ("threadrag_sufficient", [{"role": "user", "content": prompts.THREADRAG_SUFFICIENT.format(
            context=PASSAGE, question=QUESTION)}], threadrag_agent.parse_verdict),
        ("tigrag_reader", [{"role": "user", "content": prompts.TIGRAG_READER.format(
            context=PASSAGE, question=QUESTION)}], threadrag_agent.parse_verdict),
    ]


def test_the_real_small_model_held_to_each_schema_replies_what_parses(db, local_llm_url):
    """SmolLM2-135M through llama.cpp's server (llama-cpp-python): unconstrained it
    parsed 3 of 400 replies of the oracle-free loops (issue 72); held to each
    prompt's schema (json_object, the default), every reply parses at once."""
    from pgrag.local_llm import MODEL_ALIAS
    from tests.fake_llm import RecordingProxy

    with RecordingProxy(local_llm_url) as proxy:
        llm = db.corpus("real-constrained").llm(LLMSettings(base_url=proxy.base_url, model=MODEL_ALIAS,
                                                            timeout=300))
        for kind, messages, validate in real_prompts():
            assert prompts.identify(messages)[0] == kind
            llm.structured(messages, validate, schema=prompts.SCHEMAS[kind])
    assert len(proxy.exchanges) == 8                       # no repair was needed
    assert all(request["response_format"]["type"] == "json_object" for request, _ in proxy.exchanges)
    assert (llm.usage.replies, llm.usage.parse_failures, llm.usage.repairs) == (8, 0, 0)
    assert all(reply["choices"][0]["finish_reason"] == "stop" for _, reply in proxy.exchanges)
