"""An application in another language, for real: examples/nodejs/app.mjs, run by
node with node-postgres (`pg` from npm) against a real PostgreSQL with pgrag in
the server. It attaches its own table, asks pgrag.retrieve, edits a row and sees
the corpus follow, and asks pgrag.answer through a scripted LLM.

Where node is not installed the test skips, except under CI (CI set, or nodejs in
PGRAG_TEST_REQUIRE as .ci/run sets it), where it fails."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from pgrag import prompts
from pgrag.demo import sample_documents
from tests.conftest import TEMPLATE, scratch_database, skip_unless_required
from tests.fake_llm import FakeLLM

APP = Path(__file__).resolve().parents[2] / "examples" / "nodejs"
BODIES = {d["title"]: d["text"] for d in sample_documents()}


def require(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{tool} is not installed, and CI is set: the Node.js example must run here")
        skip_unless_required("nodejs", f"{tool} is not installed")
    assert path is not None
    return path


@pytest.fixture(scope="module")
def node() -> str:
    """node, with the example's packages installed (npm ci from its package-lock.json, once)."""
    node = require("node")
    if not (APP / "node_modules" / "pg" / "package.json").is_file():
        subprocess.run([require("npm"), "ci", "--no-audit", "--no-fund"], cwd=APP, check=True,
                       capture_output=True, timeout=600)
    return node


@pytest.fixture
def uri(pg_uri: str, template_uri: str) -> Iterator[str]:
    with scratch_database(pg_uri, "pgrag_node_", TEMPLATE) as u:
        yield u


def libpq_env(uri: str) -> dict[str, str]:
    """The database as the PG* variables node-postgres reads."""
    info = psycopg.conninfo.conninfo_to_dict(uri)
    env = dict(os.environ)
    for key, var in (("host", "PGHOST"), ("port", "PGPORT"), ("dbname", "PGDATABASE"), ("user", "PGUSER"),
                     ("password", "PGPASSWORD")):
        if info.get(key):
            env[var] = str(info[key])
    return env


def answer_script(request: dict) -> str:
    """CIRAG: one integration round that keeps the first candidate and stops, then the answer."""
    if prompts.identify(request["messages"])[0] == "cirag_integrate":
        return json.dumps({"thought": "He was raised by his aunt Gisela in Friuli.", "core": [1], "next_query": None})
    return "Answer: Friuli"


@pytest.mark.slow
def test_nodejs_app_attaches_its_table_retrieves_follows_and_answers(node, uri):
    with FakeLLM(answer_script) as fake:
        run = subprocess.run([node, "app.mjs", fake.base_url, fake.model], cwd=APP, env=libpq_env(uri),
                             input=json.dumps(sample_documents()), capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stderr
        requests = list(fake.requests)
    out = json.loads(run.stdout)

    # retrieve: Lothair II with provenance that cuts the hit out of the row's text
    before = out["before"]
    assert "Lothair II" in [h["title"] for h in before]
    for h in before:
        assert BODIES[h["title"]][h["char_start"]:h["char_end"]] == h["text"]
        assert h["details"]["hop"] in (1, 2)

    # the edited row, followed: the corpus holds its new text, not the old one
    [after] = out["after"]
    assert after["title"] == "Lothair II" and "Gisela in Friuli" in after["text"]
    with psycopg.connect(uri) as conn:
        bodies = [r[0] for r in conn.execute(
            "SELECT d.body FROM pgrag.document d JOIN pgrag.corpus c USING (corpus_id) "
            "WHERE c.name = %s AND d.title = %s", ("node-articles", "Lothair II"))]
        assert bodies == ["Lothair II was raised by his aunt Gisela in Friuli, far from Lotharingia."]
        assert conn.execute("SELECT count(*) FROM pgrag.follow_queue").fetchone() == (0,)

    # answer: the LLM loop ran in the server against the scripted endpoint
    answer = out["answer"]
    assert answer["answer"] == "Friuli" and answer["finish"] == "natural", (answer["outcome"], answer["steps"])
    assert requests and answer["llm_calls"] == len(requests)
    assert all(h["title"] in BODIES for h in answer["hits"])

    # pgrag's own SQLSTATE reaches the application
    assert out["error"]["code"] == "PR001" and "no-such-corpus" in out["error"]["message"]
