"""A fresh backend's first pgrag.retrieve imports only what its method needs
(issue 45, item 3): no other method's module, no LLM client, no client-side
database drivers, and no HTTP client for a method that embeds nothing."""

from __future__ import annotations

import json

import psycopg
import pytest
from psycopg import sql

MODULES = r"""
import json, sys
plpy.notice("MODULES " + json.dumps(sorted(sys.modules)))
"""


def _loaded_after_first_call(uri: str, method: str) -> set[str]:
    notices: list[str] = []
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        assert conn.execute("SELECT count(*) FROM pgrag.retrieve('first', 'Who was the mother of Lothair II?', %s, 3)",
                            (method,)).fetchone()[0] > 0
        conn.execute(sql.SQL("DO {} LANGUAGE plpython3u").format(sql.Literal(MODULES)))
    return set(json.loads(next(n for n in notices if n.startswith("MODULES ")).split(" ", 1)[1]))


@pytest.fixture
def uri(db, wiki_docs, shared_models, monkeypatch) -> str:
    monkeypatch.setenv("PGRAG_MODEL_RUNTIME", shared_models)   # the client embeds through the session's runtime
    db.corpus("first").ingest(wiki_docs[:2], progress=False)
    return db.dsn


CLIENT_ONLY = {"sqlalchemy", "psycopg", "torch", "sentence_transformers", "spacy", "openai", "httpx"}
OTHER_METHODS = {"pgrag.methods.t2rag", "pgrag.methods.threadrag", "pgrag.methods.threadrag_retrieval",
                 "pgrag.methods.threadrag_graph", "pgrag.methods.threadrag_agent", "pgrag.methods.cirag",
                 "pgrag.llm", "pgrag.prompts"}


def test_a_fresh_backends_first_call_imports_only_what_its_method_needs(uri):
    bm25 = _loaded_after_first_call(uri, "bm25")
    assert "pgrag.methods.bm25" in bm25
    assert not bm25 & (CLIENT_ONLY | OTHER_METHODS | {"pgrag.methods.tigrag", "http.client"}), \
        bm25 & (CLIENT_ONLY | OTHER_METHODS | {"pgrag.methods.tigrag", "http.client"})
    tigrag = _loaded_after_first_call(uri, "tigrag")
    assert {"pgrag.methods.tigrag", "http.client"} <= tigrag   # it embeds, through the runtime
    assert not tigrag & (CLIENT_ONLY | OTHER_METHODS), tigrag & (CLIENT_ONLY | OTHER_METHODS)
