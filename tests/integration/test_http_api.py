"""`pgrag serve` against a real database: the HTTP API gives what ``kb.retrieve``
gives (same chunks, same order) for every main method with a filter, its errors
carry pgrag's SQLSTATE and status, and the answering endpoint uses the service's
LLM. Then the service for real: `pgrag serve` as a process, asked by Node.js
(examples/nodejs/http.mjs, Node's built-in fetch only).

Where node is not installed the Node.js test skips, except under CI (see
tests/integration/test_nodejs.py)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from pgrag import methods, prompts
from pgrag.demo import sample_documents
from pgrag.http_api import create_app
from pgrag.llm import LLMSettings
from tests.conftest import WIKI, seeded_database
from tests.fake_llm import FakeLLM, Status
from tests.integration.test_nodejs import require

APP = Path(__file__).resolve().parents[2] / "examples" / "nodejs"
# The sample corpus on three shelves: a filter keeps two of them.
DOCS = [{**d, "metadata": {"shelf": i % 3}} for i, d in enumerate(sample_documents())]
BODIES = {d["title"]: d["text"] for d in DOCS}
FILTER = {"shelf": {"$in": [0, 1]}}
QUESTION = "When did Lothair II's mother die?"
CORPUS = "http"

database_uri = seeded_database(CORPUS, docs=DOCS, methods=("threadrag",), triples=True)


@pytest.fixture
def client(db) -> TestClient:
    return TestClient(create_app(db), base_url="http://127.0.0.1:8765")


def python_hits(db, method: str, k: int = 3) -> list[int]:
    """The chunk ids ``kb.retrieve`` gives, in order: what the API must give."""
    return [h.provenance.chunk_id for h in db.corpus(CORPUS, create=False).retrieve(
        QUESTION, method=method, k=k, filter=FILTER)]


@pytest.mark.parametrize("method", methods.MAIN)
def test_retrieve_gives_the_hits_of_kb_retrieve_with_provenance(client, db, method):
    response = client.post(f"/v1/corpora/{CORPUS}/retrieve",
                           json={"question": QUESTION, "method": method, "k": 3, "filter": FILTER})
    assert response.status_code == 200, response.text
    result = response.json()
    assert [h["chunk_id"] for h in result["hits"]] == python_hits(db, method)
    shelves = {d["title"]: d["metadata"]["shelf"] for d in DOCS}
    for hit in result["hits"]:
        assert BODIES[hit["title"]][hit["char_start"]:hit["char_end"]] == hit["text"]
        assert shelves[hit["title"]] in (0, 1)
        assert {"document_id", "external_id", "chunk_ordinal", "first_sentence", "last_sentence", "rank", "score",
                "hop", "details"} <= set(hit)
    assert result["trace"]["steps"][0]["step"] == "filter" and result["trace"]["method"] == method


def test_concurrent_requests_over_one_database_give_what_each_gives_alone(db):
    """Requests run at once in worker threads over the one shared Database."""
    import asyncio

    import httpx

    asked = ["dense", "bm25", "tigrag", "hybrid", "dense", "tigrag"]

    async def all_at_once() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=create_app(db))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8765") as c:
            return list(await asyncio.gather(*(
                c.post(f"/v1/corpora/{CORPUS}/retrieve",
                       json={"question": QUESTION, "method": m, "k": 3, "filter": FILTER}) for m in asked)))

    responses = asyncio.run(all_at_once())
    assert [r.status_code for r in responses] == [200] * len(asked)
    for method, response in zip(asked, responses):
        assert [h["chunk_id"] for h in response.json()["hits"]] == python_hits(db, method), method


def test_errors_carry_the_sqlstate_and_a_fitting_status(client, db):
    def ask(corpus: str = CORPUS, **body: Any) -> tuple[int, dict[str, Any]]:
        response = client.post(f"/v1/corpora/{corpus}/retrieve", json={"question": QUESTION, **body})
        return response.status_code, response.json().get("error", {})

    status, error = ask("no-such-corpus")
    assert (status, error["sqlstate"], error["type"]) == (404, "PR001", "CorpusNotFound")
    status, error = ask(filter={"shelf": {"$like": 1}})
    assert (status, error["sqlstate"]) == (400, "PR005") and "$like" in error["message"]

    db.corpus("plain").ingest(WIKI[:2], progress=False)   # no ThreadRAG nodes
    status, error = ask("plain", method="threadrag")
    assert (status, error["sqlstate"], error["type"]) == (409, "PR007", "MethodNotBuilt")


def answer_script(request: dict) -> str:
    """CIRAG: one integration round that keeps the first candidate and stops, then the answer."""
    if prompts.identify(request["messages"])[0] == "cirag_integrate":
        return json.dumps({"thought": "Ermengarde of Tours died on 20 March 851.", "core": [1], "next_query": None})
    return "Answer: 20 March 851"


def test_answer_uses_the_service_llm(db):
    with FakeLLM(answer_script) as fake:
        llm = LLMSettings(base_url=fake.base_url, model=fake.model)
        client = TestClient(create_app(db, llm=llm), base_url="http://127.0.0.1:8765")
        response = client.post(f"/v1/corpora/{CORPUS}/answer", json={"question": QUESTION, "method": "cirag"})
        requests = list(fake.requests)
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["answer"] == "20 March 851" and result["finish"] == "natural"
    assert result["llm_calls"] == len(requests) > 0 and result["hits"]


def test_a_failed_llm_is_llm_error_or_under_strict_502(db):
    with FakeLLM(lambda request: Status(500, "the model fell over")) as fake:
        client = TestClient(create_app(db, llm=LLMSettings(base_url=fake.base_url, model=fake.model, max_retries=0)),
                            base_url="http://127.0.0.1:8765")
        soft = client.post(f"/v1/corpora/{CORPUS}/answer", json={"question": QUESTION, "method": "cirag"})
        strict = client.post(f"/v1/corpora/{CORPUS}/answer",
                             json={"question": QUESTION, "method": "cirag", "options": {"strict": True}})
    assert soft.status_code == 200 and soft.json()["finish"] == "llm_error" and soft.json()["answer"] is None
    assert strict.status_code == 502
    assert strict.json()["error"]["sqlstate"] == "PR010" and strict.json()["error"]["type"] == "AnswerFailed"


# -- the service for real: `pgrag serve`, asked by Node.js ------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str, key: str | None = None) -> int:
    """The status of GET ``url``; 0 while nothing listens there yet."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        error.close()
        return int(error.code)
    except urllib.error.URLError:
        return 0


def unix_get(path: Path, target: str) -> tuple[int, dict[str, Any]]:
    """GET ``target`` over the Unix socket ``path``: the status and the JSON body (0 while none listens)."""
    import http.client

    class Connection(http.client.HTTPConnection):
        def connect(self) -> None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.connect(str(path))

    connection = Connection("localhost", timeout=5)
    try:
        connection.request("GET", target)
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    except OSError:
        return 0, {}
    finally:
        connection.close()


def test_serve_listens_on_a_unix_socket(database_uri: str, tmp_path: Path):
    path = tmp_path / "api.sock"
    process = subprocess.Popen([sys.executable, "-m", "pgrag", "serve", "--dsn", database_uri, "--uds", str(path)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while unix_get(path, "/health")[0] != 200:
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        status, body = unix_get(path, "/v1/corpora")
        assert status == 200 and CORPUS in [c["name"] for c in body["corpora"]]
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.fixture
def service(database_uri: str, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """`pgrag serve` on a free port with an API key from PGRAG_API_KEY: its URL and key."""
    port, key = free_port(), "node-test-key"
    log = tmp_path / "serve.log"
    with log.open("w") as err:
        process = subprocess.Popen([sys.executable, "-m", "pgrag", "serve", "--dsn", database_uri, "--port", str(port)],
                                   env={**os.environ, "PGRAG_API_KEY": key}, stdout=err, stderr=err)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while get(f"{url}/health") != 200:
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        assert f"pgrag serve on {url}/" in log.read_text()
        yield url, key
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.mark.slow
def test_nodejs_asks_the_service_and_gets_what_python_gets(service, db):
    node = require("node")
    url, key = service
    assert get(f"{url}/v1/corpora") == 401 and get(f"{url}/v1/corpora", key) == 200
    run = subprocess.run([node, "http.mjs", CORPUS, QUESTION, json.dumps(FILTER)], cwd=APP,
                         env={**os.environ, "PGRAG_URL": url, "PGRAG_API_KEY": key},
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)

    assert out["health"]["status"] == "ok" and CORPUS in out["corpora"]
    assert [m["name"] for m in out["methods"]] == list(methods.MAIN)
    for method in methods.MAIN:
        hits = out["retrieve"][method]["hits"]
        assert hits and [h["chunk_id"] for h in hits] == python_hits(db, method), method
        assert out["retrieve"][method]["steps"][0] == "filter"

    # no LLM for the service: the answer is null, the evidence the fallback's retrieval
    assert out["answer"]["answer"] is None and out["answer"]["hits"]

    bad = out["errors"]["unknown_method"]
    assert bad["status"] == 400 and bad["body"]["error"]["sqlstate"] == "PR004"
    assert "unknown method 'nope'" in bad["body"]["error"]["message"]
    missing = out["errors"]["unknown_corpus"]
    assert missing["status"] == 404 and missing["body"]["error"]["sqlstate"] == "PR001"
