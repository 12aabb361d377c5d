"""A fresh backend's first pgrag call (issue 45, item 3).

The embedded server imports pgrag in its postmaster (pgrag/preload.py), so a
backend forks with every module its calls need: its first call imports
nothing. A database that records another pgrag than the preloaded one (or a
server without the library) imports its own, and then only what the called
method needs: no other method's module, no LLM client, no client-side driver.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tests.conftest import skip_unless_required

MODULES = r"""
import json, sys
plpy.notice("MODULES " + json.dumps(sorted(sys.modules)))
"""

CLIENT_ONLY = {"sqlalchemy", "psycopg", "torch", "sentence_transformers", "spacy", "openai", "httpx"}
OTHER_METHODS = {"pgrag.methods.t2rag", "pgrag.methods.threadrag", "pgrag.methods.threadrag_retrieval",
                 "pgrag.methods.threadrag_graph", "pgrag.methods.threadrag_agent", "pgrag.methods.cirag",
                 "pgrag.llm", "pgrag.prompts", "pgrag.methods.tigrag"}


def _modules(conn: psycopg.Connection, notices: list[str]) -> set[str]:
    conn.execute(sql.SQL("DO {} LANGUAGE plpython3u").format(sql.Literal(MODULES)))
    found = [n for n in notices if n.startswith("MODULES ")][-1]
    return set(json.loads(found.split(" ", 1)[1]))


def _first_call(uri: str, method: str) -> tuple[dict, set[str], set[str]]:
    """A fresh backend's ping, its modules before its first retrieve, and after."""
    notices: list[str] = []
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        ping = conn.execute("SELECT pgrag_internal._py('ping', '{}')").fetchone()[0]
        before = _modules(conn, notices)
        assert conn.execute("SELECT count(*) FROM pgrag.retrieve('first', 'Who was the mother of Lothair II?', %s, 3)",
                            (method,)).fetchone()[0] > 0
        return ping, before, _modules(conn, notices)


@pytest.fixture
def uri(db, wiki_docs, shared_models, monkeypatch) -> str:
    monkeypatch.setenv("PGRAG_MODEL_RUNTIME", shared_models)   # the client embeds through the session's runtime
    kb = db.corpus("first")
    kb.ingest(wiki_docs[:2], progress=False, methods=["threadrag"])   # its semantic nodes
    kb.extract_triples(progress=False)   # t2rag and cirag retrieve them
    return db.dsn


def test_a_preloaded_backends_first_call_imports_nothing(uri):
    from pgrag import preload
    from pgrag.plpython import pginstall

    if not preload.library_file(pginstall()).exists():
        skip_unless_required("preload", "pgrag_preload is not built here (python -m pgrag.preload says why)")
    from pgrag.methods import MAIN

    for method in MAIN:
        ping, before, after = _first_call(uri, method)
        assert ping["preloaded"] is True and ping["pgrag"] == str(Path(preload.__file__).resolve().parent)
        assert after - before == set(), (method, after - before)
        assert not after & CLIENT_ONLY, after & CLIENT_ONLY


DRAW = r"""
import random, numpy
plpy.notice("%r %r" % (random.random(), numpy.random.random()))
"""


def test_backends_forked_from_the_postmaster_draw_different_random_numbers(uri):
    seen: list[str] = []
    for _ in range(2):
        with psycopg.connect(uri, autocommit=True) as conn:
            conn.add_notice_handler(lambda d: seen.append(d.message_primary or ""))
            conn.execute(sql.SQL("DO {} LANGUAGE plpython3u").format(sql.Literal(DRAW)))
    first, second = (s.split() for s in seen)
    assert first[0] != second[0] and first[1] != second[1], seen


@pytest.fixture
def other_pgrag() -> Iterator[Path]:
    """Another installation of pgrag: a folder the server's OS user can read
    (pytest's tmp_path is private to this user) whose pgrag links to this one's files."""
    import pgrag

    with tempfile.TemporaryDirectory(prefix="pgrag-other-") as tmp:
        os.chmod(tmp, 0o755)
        (Path(tmp) / "pgrag").symlink_to(Path(pgrag.__file__).resolve().parent)
        yield Path(tmp)


def test_a_database_recording_another_pgrag_imports_its_own_and_only_what_the_method_needs(uri, other_pgrag):
    import sysconfig

    tmp_path = other_pgrag
    paths = [str(tmp_path), sysconfig.get_paths()["purelib"]]
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute("SELECT pgrag_internal._record_python_path(%s)", (paths,))
    ping, before, after = _first_call(uri, "bm25")
    assert ping["pgrag"] == str(tmp_path / "pgrag") and ping["preloaded"] is False
    unwanted = after & (CLIENT_ONLY | OTHER_METHODS)
    assert "pgrag.methods.bm25" in after and not unwanted, unwanted
