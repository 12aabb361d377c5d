"""The page and its pictures without a browser: Starlette's test client against
`pgrag.ui.app` on a real database, and the picture of each method family from
real runs (T2RAG and CIRAG through a scripted LLM, ThreadRAG over its nodes)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from pgrag import prompts
from pgrag.cli import main
from pgrag.llm import LLMSettings
from pgrag.ui import render
from pgrag.ui.app import create_app
from pgrag.ui.explain import explain
from tests.conftest import WIKI, seeded_database
from tests.fake_llm import FakeLLM

QUESTION = "When did Lothair II's mother die?"
HOSTILE = {"id": "h", "title": "<i>Lothair</i>",
           "text": "Lothair II wrote <script>alert('x')</script> and <img src=x onerror=alert(1)> letters."}


database_uri = seeded_database("wiki", docs=[*WIKI, HOSTILE], methods=("threadrag",), triples=True)


@pytest.fixture
def kb(db):
    """Corpus "wiki", built once (conftest.seeded_database)."""
    return db.corpus("wiki")


def client(db) -> TestClient:
    return TestClient(create_app(db), base_url="http://127.0.0.1:8000")


def test_ui_page_escapes_documents_and_answers_errors_with_pages(db, kb):
    with client(db) as http:
        home = http.get("/")
        assert home.status_code == 200 and '<option value="wiki" selected>wiki</option>' in home.text
        assert "script-src" not in home.headers["content-security-policy"]  # no script at all: default-src 'none'
        page = http.get("/ask", params=[("corpus", "wiki"), ("question", "Lothair wrote letters"),
                                        ("method", "bm25"), ("method", "tigrag")])
        assert page.status_code == 200
        assert 'data-method="bm25"' in page.text and 'data-method="tigrag"' in page.text
        assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in page.text
        assert "&lt;i&gt;Lothair&lt;/i&gt;" in page.text
        assert "<script" not in page.text and "<img" not in page.text and "<i>" not in page.text

        missing = http.get("/ask", params={"corpus": "nope", "question": "x"})
        assert missing.status_code == 404 and "corpus &#39;nope&#39; does not exist" in missing.text
        bad = http.get("/ask", params={"corpus": "wiki", "question": "x", "k": "many"})
        assert bad.status_code == 400
        unknown = http.get("/ask", params={"corpus": "wiki", "question": "x", "method": "<b>nope</b>"})
        assert unknown.status_code == 200
        assert "&lt;b&gt;nope&lt;/b&gt;" in unknown.text and "<b>nope" not in unknown.text
        assert http.get("/nowhere").status_code == 404
        # another name for this address (DNS rebinding) is refused
        assert http.get("/", headers={"host": "evil.example"}).status_code == 400


def test_ui_page_keeps_to_a_metadata_filter(db, kb):
    keep = '{"$external_id": {"$in": ["ermengarde", "h"]}}'
    with client(db) as http:
        page = http.get("/ask", params=[("corpus", "wiki"), ("question", QUESTION), ("method", "tigrag"),
                                        ("filter", keep)])
        assert page.status_code == 200 and 'data-method="tigrag"' in page.text
        shown = set(re.findall(r'data-title="([^"]*)"', page.text))
        assert shown and shown <= {"Ermengarde of Tours", "&lt;i&gt;Lothair&lt;/i&gt;"}, shown
        assert 'value="{&#34;$external_id&#34;' in page.text   # the form keeps the filter, escaped
        threads = http.get("/ask", params=[("corpus", "wiki"), ("question", QUESTION), ("method", "threadrag"),
                                           ("filter", keep)])
        assert threads.status_code == 200 and 'data-method="threadrag"' in threads.text
        assert set(re.findall(r'data-title="([^"]*)"', threads.text)) <= {"Ermengarde of Tours",
                                                                          "&lt;i&gt;Lothair&lt;/i&gt;"}
        bad = http.get("/ask", params=[("corpus", "wiki"), ("question", QUESTION), ("filter", "{kind: film")])
        assert bad.status_code == 400 and "the filter is not JSON" in bad.text


def test_ui_listens_on_loopback_by_default():
    for name in ("ui", "mcp"):
        host = next(p for p in main.commands[name].params if p.name == "host")
        assert host.default == "127.0.0.1", name


def layers_of(view) -> dict[str, tuple[str, ...]]:
    return {layer.key: layer.items for layer in view.layers}


def t2rag_script(request: dict[str, Any]) -> str:
    system = request["messages"][0]["content"]
    if system == prompts.T2RAG_DECOMPOSE_SYSTEM:
        return json.dumps({"triples": [["Lothair II", "mother", "?mother"], ["?mother", "died on", "?date"]]})
    if system == prompts.T2RAG_RESOLVE_SYSTEM:
        still_open = request["messages"][-1]["content"].split("Known:")[0]
        return json.dumps({"values": {"?mother": "Ermengarde of Tours"} if "?mother" in still_open
                           else {"?date": "20 March 851"}})
    return "Answer: 20 March 851."


def cirag_script(request: dict[str, Any]) -> str:
    if prompts.identify(request["messages"])[0] == "cirag_integrate":
        return json.dumps({"thought": "Ermengarde of Tours died on 20 March 851.", "core": [1, 2], "next_query": None})
    return "Answer: 20 March 851"


def test_ui_pictures_of_t2rag_and_cirag_show_their_rounds_and_triples(kb):
    with FakeLLM(t2rag_script) as fake:
        view = explain(kb, QUESTION, "t2rag", llm=kb.llm(LLMSettings(base_url=fake.base_url, model=fake.model)))
    layers = layers_of(view)
    assert view.answer and "20 March 851" in view.answer
    assert any("?mother" in t for t in layers["decompose"])
    assert layers["round-1-queries"] and layers["round-1-evidence"]
    last = max(k for k in layers if k.endswith("-triples"))
    assert any("Ermengarde of Tours" in t for t in layers[last])

    with FakeLLM(cirag_script) as fake:
        view = explain(kb, QUESTION, "cirag", llm=kb.llm(LLMSettings(base_url=fake.base_url, model=fake.model)))
    layers = layers_of(view)
    assert view.answer == "20 March 851"
    assert layers["round-1-query"] == (QUESTION,)
    assert len(layers["round-1-kept"]) == 2 and set(layers["round-1-kept"]) <= set(layers["round-1-candidates"])
    html = render.standalone(view, "wiki")
    assert 'data-layer="round-1-kept"' in html


def test_ui_picture_of_threadrag_shows_anchors_and_paths(kb):
    view = explain(kb, QUESTION, "threadrag")
    layers = layers_of(view)
    assert layers["round-1-anchors"] and layers["round-1-paths"]
    assert any(p.startswith("Lothair II nodes ") for p in layers["round-1-paths"])


def test_explain_command_prints_layers_and_writes_html(database_uri, db, kb, tmp_path):
    result = CliRunner().invoke(main, ["explain", QUESTION, "-c", "wiki", "--dsn", database_uri],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "hop 1: seed tokens: lothair" in result.output and "hop 2: chunks:" in result.output
    out = tmp_path / "x.html"
    result = CliRunner().invoke(main, ["explain", QUESTION, "-c", "wiki", "-m", "bm25", "--html", str(out),
                                       "--dsn", database_uri], catch_exceptions=False)
    assert result.exit_code == 0 and out.read_text().startswith("<!doctype html>")
    result = CliRunner().invoke(main, ["explain", QUESTION, "-c", "nope", "--dsn", database_uri])
    assert result.exit_code == 1 and "corpus 'nope' does not exist" in result.output
