"""`pgrag mcp`, driven by the MCP SDK's own client over both transports (stdio and
streamable HTTP) against the bundled sample in a real PostgreSQL: the tools are
listed, retrieve returns Lothair II with provenance that points into his
document, answer goes through a scripted LLM, and a pgrag error comes back as
the tool's error with pgrag's message."""

from __future__ import annotations

import contextlib
import json
import sys
import uuid
from collections.abc import Iterator

import anyio
import psycopg
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from psycopg import sql

import pgrag
from pgrag import prompts
from pgrag.demo import SAMPLE_CORPUS, sample_documents
from tests.conftest import TEMPLATE, scratch_database
from tests.fake_llm import FakeLLM
from tests.serving import ROOT, as_role, child_env, free_port, listening

QUESTION = "When did Lothair II's mother die?"
BODIES = {d["title"]: d["text"] for d in sample_documents()}


@pytest.fixture(scope="module")
def sample_uri(pg_uri: str, template_uri: str) -> Iterator[str]:
    """A database holding the bundled sample (with spaCy triples, for CIRAG)."""
    with scratch_database(pg_uri, "pgrag_mcp_", TEMPLATE) as uri:
        db = pgrag.connect(uri)
        db.corpus(SAMPLE_CORPUS).ingest(sample_documents(), progress=False, extract_triples="spacy")
        db.close()
        yield uri


def stdio(uri: str, *args: str) -> Client:
    return Client(StdioServerParameters(command=sys.executable, args=["-m", "pgrag", "mcp", "--dsn", uri, *args],
                                        env=child_env(), cwd=str(ROOT)), read_timeout_seconds=120)


def check_lothair(hits: list[dict]) -> None:
    """Lothair II is among the hits, and its provenance cuts the hit's text out of its document."""
    titles = [h["provenance"]["title"] for h in hits]
    assert "Lothair II" in titles, titles
    for h in hits:
        p = h["provenance"]
        assert BODIES[p["title"]][p["char_start"]:p["char_end"]] == h["text"]
        assert p["sentences"] and p["chunk_id"] > 0


def test_mcp_stdio_lists_tools_retrieves_with_provenance_and_reports_errors(sample_uri):
    async def session() -> None:
        async with stdio(sample_uri) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert set(tools) == {"list_corpora", "retrieve", "answer", "explain"}
            schema = tools["retrieve"].input_schema
            assert set(schema["properties"]) == {"corpus", "question", "method", "k", "options"}
            assert set(schema["required"]) == {"corpus", "question"}

            corpora = (await client.call_tool("list_corpora", {})).structured_content
            assert [c["name"] for c in corpora["corpora"]] == [SAMPLE_CORPUS]

            for method in ("tigrag", "bm25"):
                result = await client.call_tool("retrieve", {"corpus": SAMPLE_CORPUS, "question": QUESTION,
                                                             "method": method, "k": 5})
                assert not result.is_error, result.content
                data = result.structured_content
                assert data["trace"]["method"] == method and 1 <= len(data["hits"]) <= 5
                check_lothair(data["hits"])

            # options reach the method: one hop only, so no hit comes from hop 2
            one = (await client.call_tool("retrieve", {"corpus": SAMPLE_CORPUS, "question": QUESTION,
                                                       "method": "tigrag", "k": 5,
                                                       "options": {"hops": 1}})).structured_content
            assert {h["details"]["hop"] for h in one["hits"]} == {1}

            missing = await client.call_tool("retrieve", {"corpus": "nope", "question": QUESTION})
            assert missing.is_error and "corpus 'nope' does not exist" in missing.content[0].text
            bad = await client.call_tool("retrieve", {"corpus": SAMPLE_CORPUS, "question": QUESTION,
                                                      "method": "tigrag", "options": {"bogus": 1}})
            assert bad.is_error and "bogus" in bad.content[0].text
            unknown = await client.call_tool("retrieve", {"corpus": SAMPLE_CORPUS, "question": QUESTION,
                                                          "method": "nope"})
            assert unknown.is_error and "nope" in unknown.content[0].text

    anyio.run(session)


def integrate_then_answer(request: dict) -> str:
    """A scripted CIRAG: one integration round that keeps the first candidate and stops, then the answer."""
    if prompts.identify(request["messages"])[0] == "cirag_integrate":
        return json.dumps({"thought": "Ermengarde of Tours died on 20 March 851.", "core": [1], "next_query": None})
    return "Answer: 20 March 851"


@pytest.mark.slow
def test_mcp_answer_goes_through_the_scripted_llm(sample_uri):
    with FakeLLM(integrate_then_answer) as fake:
        async def session() -> dict:
            async with stdio(sample_uri, "--llm", fake.base_url, "--llm-model", fake.model) as client:
                result = await client.call_tool("answer", {"corpus": SAMPLE_CORPUS, "question": QUESTION,
                                                           "method": "cirag", "k": 5})
                assert not result.is_error, result.content
                retrieval_only = await client.call_tool("answer", {"corpus": SAMPLE_CORPUS, "question": QUESTION,
                                                                   "method": "bm25"})
                assert retrieval_only.is_error and "retrieves but does not answer" in retrieval_only.content[0].text
                return result.structured_content

        data = anyio.run(session)
        assert fake.requests, "the LLM was never called"
    assert data["method"] == "cirag"
    assert data["answer"] == "20 March 851" and data["trace"]["outcome"]["finish"] == "natural", data["trace"]
    assert data["trace"]["llm_calls"] == len(fake.requests)
    assert data["hits"] and all(h["provenance"]["title"] in BODIES for h in data["hits"])


@contextlib.contextmanager
def http_server(uri: str) -> Iterator[str]:
    port = free_port()
    with listening("mcp", "--transport", "http", "--port", str(port), "--dsn", uri, port=port):
        yield f"http://127.0.0.1:{port}/mcp"


@pytest.mark.slow
def test_mcp_streamable_http_explains_tigrag(sample_uri):
    with http_server(sample_uri) as url:
        async def session() -> dict:
            async with Client(url, read_timeout_seconds=120) as client:
                assert {t.name for t in (await client.list_tools()).tools} >= {"retrieve", "explain"}
                result = await client.call_tool("explain", {"corpus": SAMPLE_CORPUS, "question": QUESTION,
                                                            "method": "tigrag", "k": 5})
                assert not result.is_error, result.content
                return result.structured_content

        data = anyio.run(session)
    assert data["method"] == "tigrag" and data["question"] == QUESTION
    assert data["steps"] and "Lothair II" in [h["title"] for h in data["hits"]]
    layers = {layer["key"]: layer["items"] for layer in data["layers"]}
    assert "lothair" in layers["hop-1-seeds"] and "Lothair II" in layers["hop-1-chunks"]
    assert layers["hop-2-chunks"] and layers["hits"]
    for h in data["hits"]:
        p = h["provenance"]
        assert p["title"] == h["title"] and 0 <= p["char_start"] < p["char_end"] <= len(BODIES[h["title"]])


def test_mcp_reads_only_what_its_role_may_read(sample_uri):
    """Row-level security holds through the server: a reader granted no corpus sees
    none, and retrieving from the sample is pgrag's own error."""
    role = f"pgrag_mcp_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(sample_uri, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    db = pgrag.connect(sample_uri)
    try:
        db.grant_reader(role)
        db.enable_tenant_isolation()
        async def session() -> None:
            async with stdio(as_role(sample_uri, role)) as client:
                assert (await client.call_tool("list_corpora", {})).structured_content == {"corpora": []}
                hidden = await client.call_tool("retrieve", {"corpus": SAMPLE_CORPUS, "question": QUESTION,
                                                             "method": "bm25"})
                assert hidden.is_error and f"corpus '{SAMPLE_CORPUS}' does not exist" in hidden.content[0].text

        anyio.run(session)
    finally:
        db.disable_tenant_isolation()
        db.close()
        with psycopg.connect(sample_uri, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
