"""TIGRAG's reader (``tigrag-reader``, pgrag.methods.tigrag_reader) on the chain
corpus of test_tigrag_chain: a scripted LLM names each hop's bridges, the real
local LLM drives it end to end, and every failure leaves the NER's names."""

from __future__ import annotations

import json

import pytest

from pgrag.exceptions import PgragError
from pgrag.llm import LLMSettings
from tests.fake_llm import FakeLLM, Status

# the chain corpus, its fixtures and helper (pytest takes fixtures from a module's names)
from tests.integration.test_tigrag_chain import QUESTION, _steps, database_uri, kb  # noqa: F401


def _replies(*replies):
    """A script that gives ``replies`` in turn, the last one again after them."""
    queue = list(replies)

    def script(_request):
        return queue.pop(0) if len(queue) > 1 else queue[0]
    return script


def _run(kb, script, **options):
    """tigrag-reader's hits and the requests made (each test's database is fresh,
    so no reply comes from another test's cache)."""
    with FakeLLM(script) as fake:
        llm = kb.llm(LLMSettings(base_url=fake.base_url, model="fake-model", max_retries=0))
        hits = kb.retrieve(QUESTION, method="tigrag-reader", k=6, llm=llm, **options)
        return hits, fake.requests


def _ids(hits):
    return [h.provenance.external_id for h in hits]


def test_the_readers_names_drive_the_next_hop_instead_of_the_ner(kb):
    """Hop 1's reader names Anton Weller (so does the NER); after hop 2 it names
    only Hollstadt where the NER names German, Hollstadt and Leipzig: hop 3 looks
    up Hollstadt alone, so the wrong bridge Leipzig, fourth for tigrag, falls to
    sixth (its hop-3 cosine to the remaining part + Hollstadt, 0.31)."""
    plain = kb.retrieve(QUESTION, method="tigrag", k=6)
    assert _ids(plain)[3] == "leipzig"
    hits, requests = _run(kb, _replies('{"sufficient": false, "missing": ["Anton Weller"]}',
                                       '{"sufficient": false, "missing": ["Hollstadt"]}',
                                       '{"sufficient": true}'))
    assert [(e["hop"], e["new"]) for e in _steps(hits, "entities")] == [(1, ["Anton Weller"]), (2, ["Hollstadt"])]
    assert _ids(hits) == ["harbour", "weller", "hollstadt", "brenner", "forest", "leipzig"]
    # two calls, one a hop that hands on; the second is shown the first hop's passages too
    assert len(requests) == 2 and hits.trace.llm_calls == 2 and hits.trace.prompt_tokens > 0
    second = requests[1]["messages"][-1]["content"]
    assert QUESTION in second and "[Harbour Suite]" in second and "[Anton Weller]" in second
    assert [s["names"] for s in _steps(hits, "reader")] == [["Anton Weller"], ["Hollstadt"]]


def test_sufficient_stops_the_hops_from_the_second_on(kb):
    """"Sufficient" after hop 1 does not cut the second hop the LLM-free method
    always runs (its lead needs it); after hop 2 it stops the third."""
    hits, requests = _run(kb, _replies('{"sufficient": true}'))
    assert [s["hop"] for s in _steps(hits, "reader")] == [1, 2] and len(requests) == 2
    assert _steps(hits, "stop") == [{"step": "stop", "hop": 2, "reason": "the reader: the passages suffice"}]
    # with no name from the reader, hop 1 keeps the NER's
    assert _steps(hits, "entities")[0]["new"] == ["Anton Weller"]
    assert "hollstadt" not in _ids(hits)[:3]


def test_a_reader_asking_again_for_a_name_searched_leaves_the_ner_names(kb):
    hits, _ = _run(kb, _replies('{"sufficient": false, "missing": ["Anton Weller"]}'))
    assert [(e["hop"], e["new"]) for e in _steps(hits, "entities")] == [
        (1, ["Anton Weller"]), (2, ["German", "Hollstadt", "Leipzig"])]


def test_a_name_in_neither_the_passages_nor_the_question_is_dropped(kb):
    """A weak model's guess ("Mozart") does not steer a hop, and the trace keeps
    it; "the Hollstadt" is kept (Anton Weller's passage names Hollstadt)."""
    hits, _ = _run(kb, _replies('{"sufficient": false, "missing": ["Mozart", "Anton Weller"]}',
                                '{"sufficient": false, "missing": ["Mozart", "the Hollstadt"]}',
                                '{"sufficient": true}'))
    assert [(r["names"], r["dropped"]) for r in _steps(hits, "reader")] == [
        (["Anton Weller"], ["Mozart"]), (["the Hollstadt"], ["Mozart"])]
    assert [(e["hop"], e["new"]) for e in _steps(hits, "entities")] == [(1, ["Anton Weller"]), (2, ["the Hollstadt"])]


def test_a_reader_that_names_nothing_it_was_shown_leaves_the_ner_names(kb):
    guess, _ = _run(kb, _replies('{"sufficient": false, "missing": ["Mozart"]}'))
    assert [(e["hop"], e["new"]) for e in _steps(guess, "entities")] == [
        (1, ["Anton Weller"]), (2, ["German", "Hollstadt", "Leipzig"])]


@pytest.mark.parametrize("script", [lambda request: "not json at all", lambda request: Status(500, "down")])
def test_a_failing_reader_degrades_to_tigrag_and_the_trace_says_so(kb, script):
    hits, requests = _run(kb, script)
    plain = kb.retrieve(QUESTION, method="tigrag", k=6)
    assert _ids(hits) == _ids(plain)
    errors = _steps(hits, "reader")
    assert errors and all(e["fallback"] == "the NER's names" and e["error"] for e in errors)
    assert len(requests) >= len(errors)


def test_without_an_llm_it_is_tigrag_and_the_trace_says_why(kb):
    hits = kb.retrieve(QUESTION, method="tigrag-reader", k=6, llm=False)
    assert _ids(hits) == _ids(kb.retrieve(QUESTION, method="tigrag", k=6))
    assert _steps(hits, "fallback")[0]["note"] == "LLM disabled (llm=False)" and not _steps(hits, "reader")
    with pytest.raises(PgragError, match="does not take option"):
        kb.retrieve(QUESTION, method="tigrag", llm=False)


def test_the_real_local_llm_drives_the_reader(kb, local_llm_url):
    """SmolLM2-135M (marked slow and llm by conftest): whatever it says, every
    call reached the server, its tokens are counted, and the hits are ranked."""
    from pgrag.local_llm import MODEL_ALIAS
    from tests.fake_llm import RecordingProxy

    with RecordingProxy(local_llm_url) as proxy:
        llm = kb.llm(LLMSettings(base_url=proxy.base_url, model=MODEL_ALIAS, max_tokens=48, timeout=120))
        hits = kb.retrieve(QUESTION, method="tigrag-reader", k=6, llm=llm, reader_chars=1500, reader_tokens=48)
    trace = hits.trace
    assert trace.llm_calls == len(proxy.exchanges) >= 2
    assert (trace.prompt_tokens, trace.completion_tokens) == proxy.usage()
    readers = _steps(hits, "reader")
    assert readers and all("names" in r or r["fallback"] == "the NER's names" for r in readers)
    assert len(hits) == 6 and _ids(hits)[0] == "harbour"
    json.dumps(trace.steps, default=str)
