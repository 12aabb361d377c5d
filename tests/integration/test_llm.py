"""The LLM client against a scripted fake OpenAI-compatible server: cache,
retries, errors, usage accounting and defensive parsing."""

from __future__ import annotations

import socket

import pytest

from pgrag.llm import LLM, LLMError, LLMReplyError, LLMSettings, LLMUnavailable, parse_json
from tests.fake_llm import FakeLLM, Status, replies

HELLO = [{"role": "user", "content": "Say hello"}]


def client(db, fake, corpus="llm", **settings):
    kb = db.corpus(corpus)
    return LLM(db, kb.id, LLMSettings(base_url=fake.base_url, model=fake.model, **settings))


def test_replies_are_cached_per_request_and_corpus(db):
    with FakeLLM(replies("hello there")) as fake:
        llm = client(db, fake)
        first = llm.chat(HELLO)
        second = llm.chat(HELLO)
        assert first.text == second.text == "hello there"
        assert not first.cached and second.cached
        assert len(fake.requests) == 1                       # the second call cost nothing
        assert fake.requests[0]["temperature"] == 0.0
        assert llm.usage.calls == 2 and llm.usage.cached == 1
        assert llm.usage.prompt_tokens == 2 * first.prompt_tokens > 0
        llm.chat(HELLO, max_tokens=7)                        # other parameters: another request
        assert len(fake.requests) == 2
        client(db, fake, corpus="other").chat(HELLO)         # another corpus: its own cache
        assert len(fake.requests) == 3


def test_transient_errors_are_retried(db):
    with FakeLLM(replies(Status(500), Status(429), "ok")) as fake:
        reply = client(db, fake, max_retries=3).chat(HELLO)
        assert reply.text == "ok" and len(fake.requests) == 3


def test_persistent_server_errors_become_clear_errors(db):
    with FakeLLM(replies(Status(503))) as fake:
        with pytest.raises(LLMError, match="HTTP 503"):
            client(db, fake, max_retries=1).chat(HELLO)
        assert len(fake.requests) == 2


def test_unknown_model_and_unreachable_endpoint(db):
    with FakeLLM(replies("x")) as fake:
        kb = db.corpus("llm")
        wrong = LLM(db, kb.id, LLMSettings(base_url=fake.base_url, model="no-such-model", max_retries=0))
        with pytest.raises(LLMError, match="no-such-model.*not served"):
            wrong.chat(HELLO)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]                            # closed again: nothing listens there
    down = LLM(db, kb.id, LLMSettings(base_url=f"http://127.0.0.1:{port}/v1", model="m", max_retries=0,
                                      timeout=2))
    with pytest.raises(LLMUnavailable, match=f"cannot reach the LLM endpoint http://127.0.0.1:{port}/v1"):
        down.chat(HELLO)


def test_missing_configuration_is_explained(db):
    kb = db.corpus("llm")
    with pytest.raises(Exception, match="no LLM model configured"):
        LLM(db, kb.id, LLMSettings(base_url="http://localhost:1/v1"))


def shape(value):
    if not isinstance(value, dict) or not isinstance(value.get("n"), int):
        raise ValueError('expected {"n": <int>}')
    return value["n"]


def test_malformed_reply_gets_one_repair(db):
    with FakeLLM(replies("sure! here it is: {n: 3", '```json\n{"n": 3}\n```')) as fake:
        llm = client(db, fake)
        assert llm.structured(HELLO, shape) == 3
        assert llm.usage.repairs == 1 and llm.usage.failures == 0
        repair = fake.requests[1]["messages"]
        assert repair[-2] == {"role": "assistant", "content": "sure! here it is: {n: 3"}
        assert "could not be used" in repair[-1]["content"]


def test_unusable_reply_is_a_typed_failure(db):
    with FakeLLM(replies("", '{"m": 1}')) as fake:
        llm = client(db, fake)
        with pytest.raises(LLMReplyError, match=r'expected \{"n"') as info:
            llm.structured(HELLO, shape)
        assert info.value.reply == '{"m": 1}'
        assert llm.usage.failures == 1 and llm.usage.repairs == 1


@pytest.mark.parametrize("text, value", [
    ('{"a": 1}', {"a": 1}),
    ('Here you go:\n```json\n[1, 2]\n```\nAnything else?', [1, 2]),
    ('noise {"a": [1, {"b": 2}]} trailing', {"a": [1, {"b": 2}]}),
    ('{broken {"ok": true}', {"ok": True}),
    ('{"a": "two\nlines"}', {"a": "two\nlines"}),     # a raw line break in a string (llama.cpp's grammar allows it)
])
def test_parse_json_finds_the_value(text, value):
    assert parse_json(text) == value


@pytest.mark.parametrize("text", ["", "   ", "no json here", '{"a": 1', "[1, 2"])
def test_parse_json_rejects_what_has_none(text):
    with pytest.raises(ValueError):
        parse_json(text)
