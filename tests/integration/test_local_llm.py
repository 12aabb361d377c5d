"""The real local LLM (llama.cpp + SmolLM2-135M): real replies flow through the
client, cache, usage accounting, JSON parsing and the extraction pipeline. The
model is weak, so these tests check the plumbing, not answer quality."""

from __future__ import annotations

import pytest

from pgrag.llm import LLMReplyError, LLMSettings
from pgrag.local_llm import MODEL_ALIAS


@pytest.fixture
def settings(local_llm_url):
    return LLMSettings(base_url=local_llm_url, model=MODEL_ALIAS, max_tokens=96, timeout=120)


def test_real_reply_usage_and_cache(db, settings):
    llm = db.corpus("real").llm(settings)
    messages = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
    first = llm.chat(messages)
    assert isinstance(first.text, str) and first.text.strip()
    assert first.prompt_tokens > 5 and first.completion_tokens > 0 and not first.cached
    second = llm.chat(messages)
    assert second.cached and second.text == first.text
    assert llm.usage.calls == 2 and llm.usage.cached == 1
    assert llm.usage.prompt_tokens == 2 * first.prompt_tokens


def test_structured_reply_parses_or_fails_typed(db, settings):
    llm = db.corpus("real").llm(settings)

    def names(value):
        if not isinstance(value, dict) or not isinstance(value.get("entities"), list):
            raise ValueError('expected {"entities": [...]}')
        return value["entities"]

    messages = [{"role": "user", "content": 'List the people in "Alice met Bob in Paris." as JSON: '
                                            '{"entities": ["..."]}'}]
    try:
        result = llm.structured(messages, names)
        assert isinstance(result, list)
    except LLMReplyError as exc:              # a garbage reply is a handled, typed failure
        assert llm.usage.failures == 1 and exc.reply is not None
    assert llm.usage.repairs <= 1 and llm.usage.calls in (1, 2)


def test_llm_extraction_runs_end_to_end(db, wiki_docs, settings):
    kb = db.corpus("real")
    kb.ingest(wiki_docs[:3], progress=False)
    llm = kb.llm(settings)
    report = kb.extract_triples("llm", llm=llm, progress=False)
    chunks = db.corpora()[0]["chunks"]
    assert report.chunks == chunks
    assert report.llm_calls >= 2 * (chunks - report.failed_chunks)
    assert report.llm_prompt_tokens > 0 and report.llm_completion_tokens > 0
    assert len(report.errors) == report.failed_chunks
    with db.transaction() as conn:
        rows = conn.execute("SELECT subject, predicate, object FROM pgrag.triple WHERE corpus_id = %s",
                            (kb.id,)).fetchall()
        assert len(rows) == report.triples
        assert all(s and p and o for s, p, o in rows)
        # the cache: extracting again from scratch sends nothing new to the server
        conn.execute("DELETE FROM pgrag.chunk_extraction WHERE corpus_id = %s", (kb.id,))
        conn.execute("DELETE FROM pgrag.triple WHERE corpus_id = %s", (kb.id,))
    again = kb.llm(settings)
    redo = kb.extract_triples("llm", llm=again, progress=False)
    assert redo.triples == report.triples
    assert again.usage.cached == again.usage.calls > 0


def test_t2rag_loop_runs_against_the_real_model(db, wiki_docs, settings):
    """Decomposition, rounds and synthesis with real (weak) replies: whatever the
    model writes, the loop ends, every call is counted and the trace is whole."""
    kb = db.corpus("real-t2")
    kb.ingest(wiki_docs, progress=False, extract_triples="spacy")
    llm = kb.llm(settings)
    for question in ("When did the mother of Lothair II die?", "Where was Nicki Minaj born?"):
        hits = kb.retrieve(question, method="t2rag", k=3, llm=llm)
        names = [s["step"] for s in hits.trace.steps]
        assert names[0] == "settings" and "finish" in names and names[-1] in ("answer", "fill")
        assert "decompose" in names or "decompose_failed" in names
        assert hits.trace.outcome["finish"] in ("natural", "early", "max_rounds", "llm_error")
        assert hits.trace.llm_calls >= 2 and hits.trace.prompt_tokens > 0 and hits.trace.completion_tokens > 0
        assert 1 <= len(hits) <= 3 and all(h.provenance.external_id for h in hits)
        assert hits.answer is None or isinstance(hits.answer, str)
