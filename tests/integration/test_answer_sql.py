"""Answers from SQL: pgrag.answer runs an answering method's LLM loop inside the
server, with the LLM set for the session, against a scripted OpenAI-compatible
server on 127.0.0.1 (the same wire protocol as any real endpoint)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import errors

import pgrag
from pgrag import prompts
from pgrag.llm import LLMSettings
from tests.conftest import TEMPLATE, WIKI, scratch_database, use_shared_models
from tests.fake_llm import FakeLLM, Status

QUESTION = "When did the mother of Lothair II die?"
SECRET = "sk-test-5ecret-never-stored"


def t2rag_script(request: dict[str, Any]) -> str:
    system = request["messages"][0]["content"]
    user = request["messages"][-1]["content"]
    if system == prompts.T2RAG_DECOMPOSE_SYSTEM:
        return json.dumps({"triples": [["Lothair II", "mother", "?mother"], ["?mother", "died on", "?date"]]})
    if system == prompts.T2RAG_RESOLVE_SYSTEM:
        still_open = user.split("Known:")[0]
        return json.dumps({"values": {"?mother": "Ermengarde of Tours"} if "?mother" in still_open
                           else {"?date": "20 March 851"}})
    return "Answer: 20 March 851."


def every_method_script(request: dict[str, Any]) -> str:
    """Replies in each answering method's format; an answer echoes the question's
    last word, so an answer that went to another session's question shows."""
    found = prompts.identify(request["messages"])
    assert found is not None, request["messages"]
    kind, fields = found
    if kind.startswith("t2rag"):
        if kind == "t2rag_decompose" or kind == "t2rag_resolve":
            return t2rag_script(request)
    if kind == "cirag_integrate":
        return json.dumps({"thought": "enough", "core": [1, 2], "next_query": None})
    if kind == "threadrag_entities":
        return json.dumps({"entities": ["Lothair II"]})
    if kind == "threadrag_sufficient":
        return json.dumps({"sufficient": True, "missing": []})
    return "Answer: " + fields["question"].rstrip("?").split()[-1]


@pytest.fixture(scope="module")
def uri(pg_uri: str, template_uri: str, shared_models: str) -> Iterator[str]:
    """The sample with every family; its backends embed through the session's
    model runtime (the loops here open a fresh backend per test)."""
    with scratch_database(pg_uri, "pgrag_answer_", TEMPLATE) as u:
        db = pgrag.connect(u)
        db.corpus("wiki", methods=["threadrag"]).ingest(WIKI, progress=False, extract_triples="spacy")
        db.close()
        use_shared_models(u, shared_models)
        yield u


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeLLM]:
    with FakeLLM(t2rag_script) as server:
        yield server


@pytest.fixture
def conn(uri: str, fake: FakeLLM) -> Iterator[psycopg.Connection]:
    with psycopg.connect(uri, autocommit=True) as c:
        c.execute("SELECT set_config('pgrag.llm_base_url', %s, false), "
                  "set_config('pgrag.llm_model', 'fake-model', false),"
                  " set_config('pgrag.llm_api_key', %s, false)", (fake.base_url, SECRET))
        yield c


def ask(conn: psycopg.Connection, question: str = QUESTION, method: str = "t2rag",
        options: dict[str, Any] | None = None) -> tuple:
    return conn.execute("SELECT answer, hits, trace, llm_calls, prompt_tokens, completion_tokens, finish "
                        "FROM pgrag.answer('wiki', %s, %s, %s::jsonb)",
                        (question, method, json.dumps(options or {}))).fetchone()


def test_the_answer_from_sql_equals_python_and_the_cache_is_shared(uri, fake, conn):
    db = pgrag.connect(uri)
    kb = db.corpus("wiki", create=False)
    python = kb.answer(QUESTION, method="t2rag", llm=kb.llm(LLMSettings(base_url=fake.base_url, model="fake-model",
                                                                     api_key=SECRET)))
    db.close()
    assert python.text == "20 March 851"
    calls = len(fake.requests)
    answer, hits, trace, llm_calls, prompt_tokens, completion_tokens, finish = ask(conn)
    assert len(fake.requests) == calls               # every reply came from the shared cache
    assert answer == python.text and finish == "natural"
    assert [h["chunk_id"] for h in hits] == [h.provenance.chunk_id for h in python.evidence]
    assert (llm_calls, prompt_tokens, completion_tokens) == (
        python.trace.llm_calls, python.trace.prompt_tokens, python.trace.completion_tokens) and llm_calls >= 3
    assert [s["step"] for s in trace["steps"]] == [s["step"] for s in python.trace.steps]


def test_the_key_is_never_stored_returned_traced_or_in_an_error(uri, conn):
    def echo_key(request: dict[str, Any]) -> "str | Status":
        return Status(401, f"Incorrect API key provided: {SECRET}")

    with FakeLLM(echo_key) as refusing:
        conn.execute("SELECT set_config('pgrag.llm_base_url', %s, false)", (refusing.base_url,))
        row = ask(conn, "Who refused the key of Lothair II?")
        assert row[6] == "llm_error" and row[0] is None and row[1]     # the retrieval-only hits
        assert SECRET not in json.dumps(row) and "***" in json.dumps(row[2])   # the error is traced, masked
        with pytest.raises(psycopg.Error) as caught:
            ask(conn, "Who refused the key of Lothair II?", options={"strict": True})
        assert caught.value.sqlstate == "PR010" and SECRET not in str(caught.value)
    settings = {r[0]: r[1:] for r in conn.execute("SELECT * FROM pgrag.llm_settings()")}
    assert settings["api_key"] == ("(set)", "pgrag.llm_api_key") and settings["model"][0] == "fake-model"
    stored = conn.execute("SELECT string_agg(request::text || response, ' ') FROM pgrag.llm_cache").fetchone()[0]
    assert stored and SECRET not in stored
    tables = conn.execute("SELECT string_agg(format('%I.%I', schemaname, relname), ',') FROM pg_stat_user_tables "
                          "WHERE schemaname = 'pgrag'").fetchone()[0].split(",")
    for table in tables:
        assert conn.execute(f"SELECT count(*) FROM {table} t WHERE t::text LIKE %s",
                            (f"%{SECRET}%",)).fetchone() == (0,), table


@pytest.mark.slow
def test_an_unreachable_endpoint_falls_back_or_raises_when_strict(conn):
    conn.execute("SELECT set_config('pgrag.llm_base_url', 'http://127.0.0.1:9/v1', false)")
    answer, hits, trace, *_rest, finish = ask(conn, "Where did Lothair II die?")
    assert answer is None and finish == "llm_error" and hits
    assert any("cannot reach the LLM endpoint" in json.dumps(s) for s in trace["steps"])
    with pytest.raises(psycopg.Error) as caught:
        ask(conn, "Where did Lothair II die?", options={"strict": True})
    assert caught.value.sqlstate == "PR010" and "could not answer" in str(caught.value)


def test_a_read_only_transaction_answers_without_writing_the_cache(uri, fake):
    with psycopg.connect(uri) as c:
        c.execute("SELECT set_config('pgrag.llm_base_url', %s, false), set_config('pgrag.llm_model', 'fake-model', "
                  "false)", (fake.base_url,))
        before = c.execute("SELECT count(*) FROM pgrag.llm_cache").fetchone()[0]
        c.commit()
        c.execute("BEGIN READ ONLY")
        calls = len(fake.requests)
        answer, *_rest, finish = ask(c, "When did the mother of Lothair II die, read only?")
        assert answer == "20 March 851" and finish == "natural" and len(fake.requests) > calls
        c.rollback()
        assert c.execute("SELECT count(*) FROM pgrag.llm_cache").fetchone()[0] == before


def test_statement_timeout_bounds_the_llm_wait(uri):
    def slow(request: dict[str, Any]) -> str:
        time.sleep(6)
        return "{}"

    with FakeLLM(slow) as sleepy, psycopg.connect(uri, autocommit=True) as c:
        c.execute("SELECT set_config('pgrag.llm_base_url', %s, false), set_config('pgrag.llm_model', 'fake-model', "
                  "false)", (sleepy.base_url,))
        # Warm the backend first (import, model): a cold start is not the LLM wait being measured.
        c.execute("SELECT pgrag.embed('wiki', 'warm up')")
        c.execute("SET statement_timeout = '1500ms'")
        # The LLM request's own timeout is cut to what is left of the statement's.
        [(value, source)] = c.execute("SELECT value, source FROM pgrag.llm_settings() "
                                      "WHERE setting = 'timeout'").fetchall()
        assert float(value) <= 1.5 and "bounded by statement_timeout" in source
        t0 = time.perf_counter()
        with pytest.raises(errors.QueryCanceled):
            ask(c, "Who waited for Lothair II?")
        assert time.perf_counter() - t0 < 4.5    # not the 6 s of the reply, nor retries
        c.execute("RESET statement_timeout")
        assert c.execute("SELECT 1").fetchone() == (1,)


def test_pg_cancel_backend_during_the_llm_wait_ends_the_call_at_once(uri):
    """A cancel during an LLM request ends the statement within a second, not
    after the request's 2 s timeout, the 8 s reply or the loop's further requests;
    the backend stays usable."""
    import threading

    waiting, arrived, cancelled = threading.Event(), [], []

    def slow(request: dict[str, Any]) -> str:
        arrived.append(time.perf_counter())
        waiting.set()
        time.sleep(8)
        return "{}"

    def cancel_once_waiting() -> None:
        if waiting.wait(60):
            time.sleep(0.3)
            cancelled.append(time.perf_counter())
            admin.execute("SELECT pg_cancel_backend(%s)", (pid,))

    with FakeLLM(slow) as sleepy, psycopg.connect(uri, autocommit=True) as c, \
            psycopg.connect(uri, autocommit=True) as admin:
        c.execute("SELECT set_config('pgrag.llm_base_url', %s, false), set_config('pgrag.llm_model', 'fake-model', "
                  "false), set_config('pgrag.llm_timeout', '2', false)", (sleepy.base_url,))
        c.execute("SELECT pgrag.embed('wiki', 'warm up')")
        pid = c.info.backend_pid
        canceller = threading.Thread(target=cancel_once_waiting)
        canceller.start()
        with pytest.raises(errors.QueryCanceled):
            ask(c, "Who was cancelled waiting for Lothair II?")
        ended = time.perf_counter()
        canceller.join()
        assert waiting.is_set()
        assert ended - cancelled[0] < 1.0, ended - cancelled[0]
        assert len(sleepy.requests) == 1
        assert c.execute("SELECT 1").fetchone() == (1,)


def test_a_retrieval_only_method_is_refused(conn):
    with pytest.raises(psycopg.Error) as caught:
        ask(conn, method="tigrag")
    assert caught.value.sqlstate == "PR005" and "does not answer" in str(caught.value)
    with pytest.raises(psycopg.Error) as caught:
        ask(conn, method="nope")
    assert caught.value.sqlstate == "PR004"


def _token_counts(model: Path, texts: list[str]) -> list[int]:
    """The model's tokenizer count of each text, from a child process: importing
    llama_cpp opens two files it never closes (llama_cpp._utils), which this
    process would report as ResourceWarnings when it exits."""
    script = ("import json, sys, llama_cpp\n"
              "t = llama_cpp.Llama(model_path=sys.argv[1], vocab_only=True, verbose=False)\n"
              "print(json.dumps([len(t.tokenize(x.encode(), add_bos=False)) for x in json.load(sys.stdin)]))")
    done = subprocess.run([sys.executable, "-c", script, str(model)], input=json.dumps(texts),
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def check_real_llm_answers(c: psycopg.Connection, base_url: str, question: str) -> None:
    """What the SmolLM2 test asserts about pgrag.answer's request/reply path (not
    answer quality): the endpoint spoke the protocol, every reply the server cached
    is the model's own (the same request sent again from here gets the same text at
    temperature 0), its completion tokens are the model's tokenizer count of that
    text (within a token or two), the row's totals are the cached replies' sums, and a repeat comes from the
    cache. A server replying garbage must fail it (the test after this one)."""
    import openai

    from pgrag.local_llm import MODEL_ALIAS, model_path

    c.execute("SELECT set_config('pgrag.llm_base_url', %s, false), set_config('pgrag.llm_model', %s, false), "
              "set_config('pgrag.llm_timeout', '120', false)", (base_url, MODEL_ALIAS))
    keys = {r[0] for r in c.execute("SELECT key FROM pgrag.llm_cache")}
    first = ask(c, question, method="cirag", options={"rounds": 1})
    answer, hits, trace, llm_calls, prompt_tokens, completion_tokens, finish = first
    # Any outcome the model's quality explains (its replies may be unusable: llm_error after
    # the repair request); but every call got a reply, which the server cached.
    assert finish in ("natural", "repeat", "cap", "malformed", "no_candidates", "llm_error") and hits
    written = [r for r in c.execute("SELECT key, request, response, prompt_tokens, completion_tokens "
                                    "FROM pgrag.llm_cache") if r[0] not in keys]
    assert llm_calls >= 1 and len(written) == llm_calls, (llm_calls, len(written), trace["steps"][-2:])
    assert (sum(r[3] for r in written), sum(r[4] for r in written)) == (prompt_tokens, completion_tokens)
    counts = _token_counts(model_path(), [r[2] for r in written])
    client = openai.OpenAI(base_url=base_url, api_key="not-needed", timeout=120)
    for (_key, request, response, prompt, completion), counted in zip(written, counts):
        # Re-tokenizing decoded text can split a token or two differently.
        assert prompt > 20 and abs(completion - counted) <= 2 + counted // 100, (completion, counted, response)
        params = {k: v for k, v in request["params"].items() if v is not None}
        if "response_format" in params:
            # The reply's schema went out in the order the prompt declares its
            # properties (the grammar's order); jsonb keeps them sorted, so send
            # the declared schema, which must be the one stored.
            kind = prompts.identify(request["messages"])[0]
            assert params["response_format"] == {"type": "json_object", "schema": prompts.SCHEMAS[kind].schema}
            params["response_format"] = {"type": "json_object", "schema": prompts.SCHEMAS[kind].schema}
        direct = client.chat.completions.create(model=request["model"], messages=request["messages"], **params)
        assert direct.choices[0].message.content == response
    again = ask(c, question, method="cirag", options={"rounds": 1})
    assert again[:2] == (answer, hits) and again[3:6] == first[3:6]   # same replies, from the cache
    assert c.execute("SELECT count(*) FROM pgrag.llm_cache").fetchone()[0] == len(keys) + len(written)


def test_the_real_local_llm_answers_from_sql(uri, local_llm_url):
    """SmolLM2 through pgrag.answer (marked slow and llm by conftest)."""
    with psycopg.connect(uri, autocommit=True) as c:
        check_real_llm_answers(c, local_llm_url, "Who was the mother of Lothair II?")


def test_the_real_llm_check_fails_against_a_garbage_server(uri):
    """The same check against a server that replies random words for every call,
    with made-up token counts: it must fail."""
    import random

    from pgrag.local_llm import MODEL_ALIAS

    rng = random.Random(7)
    words = ["lorem", "zq", "###", "{", "Answer", "ipsum", "]]", "Teutberga", "null", "851"]

    def garbage(_request: dict[str, Any]) -> str:
        return " ".join(rng.choice(words) for _ in range(rng.randint(1, 12)))

    with FakeLLM(garbage, model=MODEL_ALIAS) as server, psycopg.connect(uri, autocommit=True) as c:
        with pytest.raises(AssertionError):
            check_real_llm_answers(c, server.base_url, "Whose mother was Ermengarde of Tours?")


@pytest.mark.parametrize("method", ["t2rag", "threadrag", "cirag"])
def test_each_answering_method_from_sql_equals_python(uri, method):
    """Same answer, hits and token counts as kb.answer, for each of the three loops,
    and the SQL call makes no request of its own (the cache is one table)."""
    question = f"Who was the mother of Lothair II, asked of {method}?"
    with FakeLLM(every_method_script) as server, psycopg.connect(uri, autocommit=True) as c:
        db = pgrag.connect(uri)
        kb = db.corpus("wiki", create=False)
        python = kb.answer(question, method=method, llm=kb.llm(LLMSettings(base_url=server.base_url,
                                                                           model="fake-model")))
        db.close()
        assert python.text == method and python.trace.llm_calls >= 2
        calls = len(server.requests)
        c.execute("SELECT set_config('pgrag.llm_base_url', %s, false), set_config('pgrag.llm_model', "
                  "'fake-model', false)", (server.base_url,))
        answer, hits, trace, llm_calls, prompt_tokens, completion_tokens, finish = ask(c, question, method)
        assert len(server.requests) == calls
        assert answer == python.text and finish != "llm_error"
        assert [h["chunk_id"] for h in hits] == [h.provenance.chunk_id for h in python.evidence]
        assert (llm_calls, prompt_tokens, completion_tokens) == (
            python.trace.llm_calls, python.trace.prompt_tokens, python.trace.completion_tokens)


@pytest.mark.slow
def test_four_sessions_asking_at_once_get_their_own_answers(uri):
    """4 sessions, each asking its own questions in a loop for 30 s: no
    errors, and every answer belongs to the question that asked it."""
    import threading

    failures: list[str] = []
    answered: list[int] = []
    with FakeLLM(every_method_script) as server:
        def session(n: int) -> None:
            try:
                with psycopg.connect(uri, autocommit=True) as c:
                    c.execute("SELECT set_config('pgrag.llm_base_url', %s, false), set_config('pgrag.llm_model', "
                              "'fake-model', false)", (server.base_url,))
                    deadline, i = time.perf_counter() + 30, 0
                    while time.perf_counter() < deadline:
                        word = f"s{n}q{i}"
                        answer = ask(c, f"Who was the mother of Lothair II in {word}?", "threadrag")[0]
                        if answer != word:
                            failures.append(f"{word} got {answer!r}")
                        answered.append(n)
                        i += 1
            except Exception as exc:  # reported below: a session must not die silently
                failures.append(f"session {n}: {type(exc).__name__}: {exc}")

        threads = [threading.Thread(target=session, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not failures, failures[:5]
    assert sorted(set(answered)) == [0, 1, 2, 3]
