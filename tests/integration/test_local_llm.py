"""The real local LLM (llama.cpp + SmolLM2-135M): real replies flow through the
client, cache, usage accounting, JSON parsing and the extraction pipeline. The
model is weak, so these tests tolerate any answer quality, but assert what the
code guarantees: every request reaches the server and its reply comes back
unchanged, the tokens counted are the ones the server reported (a recording proxy
sits in between), a repeat is a cache hit that sends nothing, and a server that
answers garbage to every call is reported as such."""

from __future__ import annotations

import json

import pytest

from pgrag.llm import LLMReplyError, LLMSettings
from pgrag.local_llm import MODEL_ALIAS
from tests.fake_llm import FakeLLM, RecordingProxy


@pytest.fixture
def proxy(local_llm_url):
    with RecordingProxy(local_llm_url) as recording:
        yield recording


@pytest.fixture
def settings(proxy):
    return LLMSettings(base_url=proxy.base_url, model=MODEL_ALIAS, max_tokens=96, timeout=120)


def test_real_reply_usage_and_cache(db, settings, proxy):
    llm = db.corpus("real").llm(settings)
    messages = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
    first = llm.chat(messages)
    [(request, reply)] = proxy.exchanges                       # one request went out ...
    assert request["messages"] == messages and request["model"] == MODEL_ALIAS and request["max_tokens"] == 96
    assert first.text == reply["choices"][0]["message"]["content"] and first.text.strip()   # ... and came back
    assert (first.prompt_tokens, first.completion_tokens) == (reply["usage"]["prompt_tokens"],
                                                              reply["usage"]["completion_tokens"])
    assert first.finish_reason == reply["choices"][0]["finish_reason"] and not first.cached
    second = llm.chat(messages)
    assert len(proxy.exchanges) == 1                            # the repeat never reached the server
    assert second.cached and second.text == first.text
    assert llm.usage.calls == 2 and llm.usage.cached == 1
    assert (llm.usage.prompt_tokens, llm.usage.completion_tokens) == tuple(2 * n for n in proxy.usage())


def test_structured_reply_parses_or_fails_typed(db, settings, proxy):
    llm = db.corpus("real").llm(settings)

    def names(value):
        if not isinstance(value, dict) or not isinstance(value.get("entities"), list):
            raise ValueError('expected {"entities": [...]}')
        return value["entities"]

    messages = [{"role": "user", "content": 'List the people in "Alice met Bob in Paris." as JSON: '
                                            '{"entities": ["..."]}'}]
    try:
        result = llm.structured(messages, names)
    except LLMReplyError as exc:              # a garbage reply is a handled, typed failure, after one repair
        assert llm.usage.failures == 1 and llm.usage.repairs == 1 and len(proxy.exchanges) == 2
        assert exc.reply == proxy.exchanges[1][1]["choices"][0]["message"]["content"]
    else:
        assert isinstance(result, list) and llm.usage.failures == 0
        assert len(proxy.exchanges) == 1 + llm.usage.repairs
    if llm.usage.repairs:                     # the repair request carries the bad reply back to the model
        repair = proxy.exchanges[1][0]["messages"]
        assert repair[:1] == messages
        assert repair[1]["content"] == proxy.exchanges[0][1]["choices"][0]["message"]["content"]
    assert llm.usage.calls == len(proxy.exchanges)
    assert (llm.usage.prompt_tokens, llm.usage.completion_tokens) == proxy.usage()


def test_llm_extraction_runs_end_to_end(db, wiki_docs, settings, proxy):
    kb = db.corpus("real")
    kb.ingest(wiki_docs[:3], progress=False)
    llm = kb.llm(settings)
    report = kb.extract_triples("llm", llm=llm, progress=False)
    chunks = db.corpora()[0]["chunks"]
    assert report.chunks == chunks
    assert report.llm_calls == len(proxy.exchanges) >= 2 * (chunks - report.failed_chunks)
    assert (report.llm_prompt_tokens, report.llm_completion_tokens) == proxy.usage()
    assert len(report.errors) == report.failed_chunks
    with db.transaction() as conn:
        rows = conn.execute("SELECT subject, predicate, object FROM pgrag.triple WHERE corpus_id = %s",
                            (kb.id,)).fetchall()
        assert len(rows) == report.triples
        assert all(s and p and o for s, p, o in rows)
        # the cache: extracting again from scratch sends nothing new to the server
        conn.execute("DELETE FROM pgrag.chunk_extraction WHERE corpus_id = %s", (kb.id,))
        conn.execute("DELETE FROM pgrag.triple WHERE corpus_id = %s", (kb.id,))
    sent = len(proxy.exchanges)
    again = kb.llm(settings)
    redo = kb.extract_triples("llm", llm=again, progress=False)
    assert len(proxy.exchanges) == sent
    assert redo.triples == report.triples
    assert again.usage.cached == again.usage.calls == report.llm_calls


def test_t2rag_loop_runs_against_the_real_model(db, wiki_docs, settings, proxy):
    """Decomposition, rounds and synthesis with real (weak) replies: whatever the
    model writes, the loop ends, every call is counted and the trace is whole."""
    kb = db.corpus("real-t2")
    kb.ingest(wiki_docs, progress=False, extract_triples="spacy")
    for question in ("When did the mother of Lothair II die?", "Where was Nicki Minaj born?"):
        llm = kb.llm(settings)
        before = len(proxy.exchanges)
        hits = kb.retrieve(question, method="t2rag", k=3, llm=llm)
        sent = proxy.exchanges[before:]
        names = [s["step"] for s in hits.trace.steps]
        assert names[0] == "settings" and "finish" in names and names[-1] in ("answer", "fill")
        assert "decompose" in names or "decompose_failed" in names
        assert hits.trace.outcome["finish"] in ("natural", "early", "max_rounds", "llm_error")
        assert hits.trace.llm_calls == len(sent) >= 2                # no cache: each call reached the server
        assert (hits.trace.prompt_tokens, hits.trace.completion_tokens) == (
            sum(r["usage"]["prompt_tokens"] for _, r in sent), sum(r["usage"]["completion_tokens"] for _, r in sent))
        assert question in json.dumps(sent[0][0]["messages"])       # the question went out
        assert 1 <= len(hits) <= 3 and all(h.provenance.external_id for h in hits)
        assert hits.answer is None or isinstance(hits.answer, str)


# -- a server that answers garbage to every call (scripted, so not slow) --------------

GARBAGE = "Sure! Here is what I think about that: bananas."
EXPECTED_FINISH = {"t2rag": "llm_error", "threadrag": "llm_error", "cirag": "malformed"}


@pytest.mark.parametrize("method", sorted(EXPECTED_FINISH))
def test_a_server_answering_garbage_to_every_call_is_reported(db, wiki_docs, method):
    kb = db.corpus("garbage", methods=[method])
    kb.ingest(wiki_docs, progress=False, extract_triples="spacy")
    with FakeLLM(lambda request: GARBAGE) as fake:
        llm = kb.llm(LLMSettings(base_url=fake.base_url, model=fake.model, max_retries=0))
        hits = kb.retrieve("When did the mother of Lothair II die?", method=method, k=3, llm=llm)
        sent = len(fake.requests)
    assert hits.trace.outcome["finish"] == EXPECTED_FINISH[method], hits.trace.outcome
    assert sent >= 2 and hits.trace.llm_calls == sent               # one call and its repair at least
    assert llm.usage.failures >= 1 and llm.usage.repairs >= llm.usage.failures
    assert len(hits) > 0                                            # the retrieval still stands
    if method == "threadrag":                                       # no sufficiency verdict: no answer
        assert hits.answer is None
