"""The shared model runtime (issue 36): one process embeds and parses for every
backend and client. Real parts: the runtime process (uvicorn on a Unix socket),
the embedded server's backends, MiniLM and spaCy. Faults are real too: SIGKILL,
SIGSTOP (a runtime that hangs), a socket nobody serves, a socket another OS
user may not open."""

from __future__ import annotations

import json
import os
import pwd
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import psycopg
import pytest

import pgrag
from pgrag import model_client
from pgrag.bench.timing.cache import runtime_cache
from pgrag.embed import loaded_embedder
from pgrag.index.postings import Postings
from tests.conftest import WIKI, seeded_database
from tests.serving import start_runtime, stop_runtime, wait_healthy

QUESTION = "Who was the mother of Lothair II?"
METHODS = ["bm25", "dense", "hybrid", "tigrag", "t2rag", "threadrag", "cirag"]


@pytest.fixture(scope="module")
def runtime(pg_uri: str, pg_data_dir: Path):
    """A supervised runtime (``pgrag models serve``) serving MiniLM, its socket
    owned by the server's OS user as `pgrag server start` makes it."""
    socket = pg_data_dir.parent / "models.sock"
    owner = pwd.getpwuid(pg_data_dir.stat().st_uid).pw_name
    proc = start_runtime(socket, owner, supervised=True)
    yield socket
    stop_runtime(proc)


database_uri = seeded_database("runtime", docs=WIKI[:4], methods=("threadrag",), triples=True)


@pytest.fixture
def kb(db):
    """Corpus "runtime", built once (conftest.seeded_database)."""
    return db.corpus("runtime")


def _shared(uri: str, socket: Path) -> psycopg.Connection:
    conn = psycopg.connect(uri, autocommit=True)
    conn.execute("SELECT set_config('pgrag.model_runtime', %s, false)", (f"unix:{socket}",))
    return conn


def _ping(conn: psycopg.Connection) -> dict:
    return conn.execute("SELECT pgrag_internal._py('ping', '{}')").fetchone()[0]


def _retrieve(conn: psycopg.Connection, method: str, question: str = QUESTION) -> list[tuple]:
    return conn.execute("SELECT chunk_id, score FROM pgrag.retrieve('runtime', %s, %s, 5)",
                        (question, method)).fetchall()


def test_a_backend_gets_the_same_vectors_and_hits_through_the_runtime_and_loads_no_model(runtime, kb, database_uri):
    texts = [QUESTION, "Lothair II was King of Lotharingia.", "x" * 300]
    here = loaded_embedder("all-MiniLM-L6-v2").encode(texts)
    remote = model_client.RemoteEmbedder(model_client.Endpoint(socket=runtime), "all-MiniLM-L6-v2").encode(texts)
    assert np.max(1 - np.sum(here * remote, axis=1)) < 1e-6

    with psycopg.connect(database_uri, autocommit=True, options="-c pgrag.model_runtime=inprocess") as conn:
        inprocess = {m: _retrieve(conn, m) for m in METHODS}
    with _shared(database_uri, runtime) as conn:
        served = conn.execute("SELECT pgrag.model_runtime()").fetchone()[0]
        shared = {m: _retrieve(conn, m) for m in METHODS}
        vector = conn.execute("SELECT pgrag.embed('runtime', %s)::text", (QUESTION,)).fetchone()[0]
        loaded = _ping(conn)["loaded"]
    assert served["runtime"] == f"unix:{runtime}" and served["health"]["model"] == "all-MiniLM-L6-v2"
    # the runtime runs MiniLM on ONNX Runtime (issue 45); the backend's own model
    # (torch, or ONNX where its OS user reads the export cache) finds the same hits
    assert served["health"]["backend"] == "onnx"
    assert served["health"]["window_ms"] == 0     # on ONNX Runtime no text waits for company (Models)
    for method in METHODS:
        assert shared[method] and [c for c, _ in shared[method]] == [c for c, _ in inprocess[method]], method
        assert np.allclose([s for _, s in shared[method]], [s for _, s in inprocess[method]], atol=1e-6), method
    assert np.max(np.abs(np.array(json.loads(vector)) - here[0])) < 1e-6
    # threadrag asks spaCy for the question's names: through the runtime too
    assert not {"torch", "sentence_transformers", "transformers", "spacy", "sqlalchemy"} & set(loaded), loaded


CHUNKS = ("SELECT d.external_id, c.ordinal, c.text, c.embedding::text FROM pgrag.chunk c "
          "JOIN pgrag.document d USING (corpus_id, document_id) JOIN pgrag.corpus k USING (corpus_id) "
          "WHERE k.name = %s ORDER BY 1, 2")
ENTITIES = ("SELECT e.entity, e.label, e.char_start FROM pgrag.chunk_entity e JOIN pgrag.corpus k USING (corpus_id) "
            "WHERE k.name = %s ORDER BY 1, 2, 3")


def test_a_client_ingests_through_the_runtime_as_it_does_in_process(runtime, db, wiki_docs, monkeypatch):
    db.corpus("here").ingest(wiki_docs[:3], progress=False)
    monkeypatch.setenv("PGRAG_MODEL_RUNTIME", f"unix:{runtime}")
    before = wait_healthy(runtime)["texts"]
    db.corpus("there").ingest(wiki_docs[:3], progress=False)
    assert wait_healthy(runtime)["texts"] > before   # chunks and spaCy parses went to the runtime
    with psycopg.connect(db.dsn) as conn:
        here, there = (conn.execute(CHUNKS, (name,)).fetchall() for name in ("here", "there"))
        entities = [conn.execute(ENTITIES, (name,)).fetchall() for name in ("here", "there")]
    assert here and [r[:3] for r in here] == [r[:3] for r in there]
    for a, b in zip(here, there):
        assert np.max(np.abs(np.array(json.loads(a[3])) - np.array(json.loads(b[3])))) < 1e-6
    assert entities[0] and entities[0] == entities[1]


def test_a_runtime_serving_another_model_is_refused_never_mixed(kb, database_uri, pg_data_dir, tmp_path):
    socket = pg_data_dir.parent / "random.sock"
    proc = start_runtime(socket, pwd.getpwuid(pg_data_dir.stat().st_uid).pw_name, "--model", "random-384")
    try:
        with _shared(database_uri, socket) as conn:
            with pytest.raises(psycopg.Error) as caught:
                _retrieve(conn, "dense")
        assert caught.value.sqlstate == "PR002"
        assert "serves 'random-384', not 'all-MiniLM-L6-v2'" in str(caught.value)
        # the same runtime, asked for its own model, bounds what one request may hold
        remote = model_client.RemoteEmbedder(model_client.Endpoint(socket=socket), "random-384")
        assert remote.encode([f"text {i}" for i in range(10_000)]).shape == (10_000, 384)   # sent in parts
        assert len(remote.encode(["a" * 1_000_000])[0]) == 384                             # cut, not refused
        status, body = _post(socket, {"input": ["t"] * 2049, "model": "random-384"})
        assert status == 413 and "at most 2048 inputs" in body["error"]["message"]
        status, body = _post(socket, {"input": ["a" * 1_000_000]})
        assert status == 413 and "at most 100,000" in body["error"]["message"]
    finally:
        stop_runtime(proc)


def _post(socket: Path, body: dict) -> tuple[int, dict]:
    conn = model_client._UnixConnection(socket)
    conn.request("POST", "/v1/embeddings", body=json.dumps(body), headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    out = response.status, json.loads(response.read())
    conn.close()
    return out


def test_an_unreachable_runtime_is_an_error_that_names_the_command(kb, database_uri, tmp_path):
    with _shared(database_uri, tmp_path / "nobody.sock") as conn:
        with pytest.raises(psycopg.Error) as caught:
            _retrieve(conn, "dense")
        assert _retrieve(conn, "bm25")   # no model needed: unaffected
    assert caught.value.sqlstate == "PR011"
    assert "is not running" in str(caught.value) and "pgrag models serve --socket" in str(caught.value)


def test_a_question_of_a_megabyte_is_refused_plainly(runtime, kb, database_uri):
    with _shared(database_uri, runtime) as conn:
        with pytest.raises(psycopg.Error) as caught:
            _retrieve(conn, "dense", "mother " * 150_000)
    assert caught.value.sqlstate == "PR005" and "at most 10,000 characters" in str(caught.value)


def test_a_short_text_asked_again_comes_from_the_runtimes_cache(runtime):
    """The second call of the same texts runs the model only for the passage:
    the question's vector comes back from the cache, the same vector."""
    embedder = model_client.RemoteEmbedder(model_client.Endpoint(socket=runtime), "all-MiniLM-L6-v2")
    texts = [f"Who was the mother of Lothair II? {time.time_ns()}", "A passage of a document. " * 20]
    before = wait_healthy(runtime)
    first = embedder.encode(texts)
    middle = wait_healthy(runtime)
    again = embedder.encode(texts)
    after = wait_healthy(runtime)
    assert middle["cache"]["hits"] == before["cache"]["hits"]
    assert after["cache"]["hits"] == middle["cache"]["hits"] + 1      # the question, not the passage
    assert after["batches"] == middle["batches"] + 1                   # the passage alone ran the model
    assert np.array_equal(first[0], again[0])
    assert np.allclose(first[1], again[1], atol=1e-6)    # encoded again, in another batch
    assert after["cache"]["size"] == 4096


def test_a_benchmark_runs_with_the_cache_off_and_sets_it_back(runtime, database_uri):
    """pgrag.bench.timing.runtime_cache: the runtimes a benchmark reaches keep no
    vector during it (a text asked twice runs the model twice), then as before."""
    target = model_client.Endpoint(socket=runtime)
    embedder = model_client.RemoteEmbedder(target, "all-MiniLM-L6-v2")
    text = [f"Who was the father of Lothair II? {time.time_ns()}"]
    with runtime_cache(database_uri, keep=False, settings=[f"unix:{runtime}"]) as note:
        during = wait_healthy(runtime)
        embedder.encode(text)
        embedder.encode(text)
        assert wait_healthy(runtime)["cache"]["hits"] == during["cache"]["hits"]
    assert note == {"runtime_cache": "off"}
    assert during["cache"]["size"] == during["cache"]["held"] == 0
    assert wait_healthy(runtime)["cache"]["size"] == 4096
    with runtime_cache(database_uri, keep=True, settings=[f"unix:{runtime}"]) as note:
        assert wait_healthy(runtime)["cache"]["size"] == 4096 and note == {"runtime_cache": "kept"}
    with runtime_cache(database_uri, keep=False, settings=[f"unix:{runtime}", "unix:/nonexistent/models.sock"]) as note:
        assert wait_healthy(runtime)["cache"]["size"] == 0   # the one that answers is switched off all the same
    assert note["runtime_cache_not_switched"] == ["unix:/nonexistent/models.sock"]
    with pytest.raises(pgrag.InputError, match="size must be an integer"):
        model_client.client(target).request("POST", "/pgrag/v1/cache", {"size": -1})


def test_eval_runs_its_methods_with_the_cache_off(runtime, database_uri, tmp_path, monkeypatch):
    """pgrag eval asks each question once a method: with the vector cache on,
    hybrid would find dense's vector of the question there and report a latency
    without its encoding. So the cache is off while the methods run (and as
    before after); --runtime-cache keeps it."""
    from click.testing import CliRunner

    from pgrag.cli import main

    monkeypatch.setenv("PGRAG_MODEL_RUNTIME", f"unix:{runtime}")
    corpus, questions = tmp_path / "corpus.json", tmp_path / "questions.jsonl"
    corpus.write_text(json.dumps(WIKI[:4]))
    questions.write_text(json.dumps({"id": "1", "question": f"{QUESTION} {time.time_ns()}", "answer": "Ermengarde",
                                     "supporting_titles": ["Lothair II"]}))
    out = tmp_path / "eval.json"
    base = ["eval", "--corpus-file", str(corpus), "--questions", str(questions), "--methods", "dense,hybrid",
            "--no-progress", "--out", str(out), "--dsn", database_uri]
    runs = {}
    for cache in ("--no-runtime-cache", "--runtime-cache"):
        before = wait_healthy(runtime)["cache"]["hits"]
        result = CliRunner().invoke(main, [*base, cache], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        runs[cache] = (json.loads(out.read_text())["runtime_cache"], wait_healthy(runtime)["cache"]["hits"] - before)
        assert wait_healthy(runtime)["cache"]["size"] == 4096
    assert runs["--no-runtime-cache"] == ("off", 0)
    kept, hits = runs["--runtime-cache"]
    assert kept == "kept" and hits > 0      # the warm-up's and dense's question, asked again


def test_a_retrieval_tells_the_runtime_when_its_question_began(runtime, kb, database_uri):
    """Every runtime call of pgrag.retrieve carries its question's start
    (model_client.one_request), so that the runtime serves a second hop before
    the questions that arrived after it; pgrag.embed, outside a retrieval, does not."""
    with _shared(database_uri, runtime) as conn:
        before = wait_healthy(runtime)
        _retrieve(conn, "tigrag", "Who was the mother of the King of Lotharingia?")
        middle = wait_healthy(runtime)
        conn.execute("SELECT pgrag.embed('runtime', 'a text embedded on its own')").fetchone()
        after = wait_healthy(runtime)
    calls = middle["requests"] - before["requests"]
    assert calls >= 2   # the question, then its second hop
    assert middle["dated_requests"] - before["dated_requests"] == calls
    assert after["requests"] - middle["requests"] == 1 and after["dated_requests"] == middle["dated_requests"]


def test_tigrag_encodes_in_the_runtime_while_its_hop_ranks(runtime, kb, monkeypatch):
    """Through a runtime, each of tigrag's encodings is still under way when the
    hop that needs its vectors pools its candidates: the two overlap. Each
    encoding waits for that hop's pool; done in turn, it would wait in vain."""
    monkeypatch.setenv("PGRAG_MODEL_RUNTIME", f"unix:{runtime}")
    pooled = threading.Event()
    waited: list[tuple[list[str], bool]] = []
    real_pool, real_encode = Postings.pool, model_client.RemoteEmbedder.encode

    def pool(self, *args, **kwargs):
        pooled.set()
        return real_pool(self, *args, **kwargs)

    def encode(self, texts, **kwargs):
        waited.append((list(texts), pooled.wait(5)))
        pooled.clear()   # before the vectors return, so before the next hop starts
        return real_encode(self, texts, **kwargs)

    monkeypatch.setattr(Postings, "pool", pool)
    monkeypatch.setattr(model_client.RemoteEmbedder, "encode", encode)
    hits = kb.retrieve(QUESTION, method="tigrag", k=5)
    assert len(waited) == 2 and waited[0][0] == [QUESTION], waited
    assert all(ok for _, ok in waited), waited
    assert [s["hop"] for s in hits.trace.steps if s["step"] == "hop_embeddings"] == [2]
    assert hits


def _in_thread(fn) -> tuple[threading.Thread, dict]:
    result: dict = {}

    def run() -> None:
        try:
            result["value"] = fn()
        except psycopg.Error as exc:
            result["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result


@pytest.mark.parametrize("method", ["dense", "tigrag"])
def test_a_cancel_or_timeout_ends_a_call_blocked_in_the_runtime(runtime, kb, database_uri, method):
    """tigrag waits for its vectors after its graph stage, the encoding started
    in a thread before it (Context.encode_later): that wait ends on a cancel too."""
    pid = wait_healthy(runtime)["pid"]
    with _shared(database_uri, runtime) as conn:
        _retrieve(conn, method)   # the backend's connection to the runtime is open
        os.kill(pid, signal.SIGSTOP)   # the runtime hangs: the call waits in it, not in PostgreSQL
        try:
            conn.execute("SET statement_timeout = 500")
            started = time.monotonic()
            thread, timed_out = _in_thread(lambda: _retrieve(conn, method, "Who was the father of Lothair II?"))
            thread.join(5)
            assert not thread.is_alive() and time.monotonic() - started < 1.5
            assert isinstance(timed_out.get("error"), psycopg.errors.QueryCanceled)

            conn.execute("SET statement_timeout = 0")
            thread, canceled = _in_thread(lambda: _retrieve(conn, method, "Who was the brother of Lothair II?"))
            time.sleep(0.5)
            with psycopg.connect(database_uri, autocommit=True) as other:
                started = time.monotonic()
                other.execute("SELECT pg_cancel_backend(%s)", (conn.info.backend_pid,))
                thread.join(5)
            assert not thread.is_alive() and time.monotonic() - started < 1.0
            assert isinstance(canceled.get("error"), psycopg.errors.QueryCanceled)
        finally:
            os.kill(pid, signal.SIGCONT)
        thread.join(30)
        assert _retrieve(conn, method)   # the same session goes on once the runtime does


@pytest.mark.slow
def test_killing_the_runtime_under_load_fails_calls_cleanly_and_they_recover(runtime, kb, database_uri):
    old = wait_healthy(runtime)["pid"]
    errors: list[psycopg.Error] = []
    done: list[int] = []
    stop = threading.Event()

    def client(i: int) -> None:
        with _shared(database_uri, runtime) as conn:
            while not stop.is_set():
                try:
                    _retrieve(conn, "dense", f"{QUESTION} {i} {len(done)}")
                    done.append(i)
                except psycopg.Error as exc:
                    errors.append(exc)
                    time.sleep(0.05)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    os.kill(old, signal.SIGKILL)
    new = wait_healthy(runtime)   # the supervisor started it again
    served = len(done)
    time.sleep(1.0)
    stop.set()
    for t in threads:
        t.join(30)
    assert new["pid"] != old and len(done) > served   # calls succeed again once it is back
    assert errors, "no call saw the runtime go"
    assert {e.sqlstate for e in errors} == {"PR011"}, {str(e) for e in errors}
    with psycopg.connect(database_uri, autocommit=True) as conn:   # no backend crashed: the server took no restart
        assert conn.execute("SELECT pg_postmaster_start_time() < now() - interval '5 seconds'").fetchone()[0]


def test_the_socket_opens_only_for_the_servers_os_user(runtime, pg_uri, pg_data_dir):
    """The socket is the server user's, mode 0600; a runtime root started runs as
    that user too, and another OS user cannot open the socket."""
    mode = runtime.stat().st_mode & 0o777
    assert mode == 0o600 and runtime.stat().st_uid == pg_data_dir.stat().st_uid
    if os.geteuid() != 0:
        pytest.skip("needs root to try the socket as another OS user")   # CI runs as root
    pid = wait_healthy(runtime)["pid"]
    uids = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("Uid:"))
    assert set(uids.split()[1:]) == {str(pg_data_dir.stat().st_uid)}        # real, effective, saved, fs: dropped
    probe = ("import socket,sys; s=socket.socket(socket.AF_UNIX)\n"
             "try: s.connect(sys.argv[1]); print('open')\nexcept PermissionError: print('refused')")
    # The probe needs only the standard library: the system's Python, which any
    # user may run (this venv's may live where nobody cannot enter, as /root is).
    python = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable
    other = subprocess.run([python, "-c", probe, str(runtime)], user="nobody", capture_output=True,
                           text=True, timeout=30, cwd="/")
    assert other.stdout.strip() == "refused", other.stderr


@pytest.mark.slow
def test_an_openai_compatible_url_serves_backends_and_clients_alike(kb, database_uri):
    """The URL form of pgrag.model_runtime (any OpenAI-compatible /v1/embeddings),
    against the runtime itself on TCP: the same vectors, spaCy stays in process."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "pgrag.model_service", "--host", "127.0.0.1", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                remote = model_client.RemoteEmbedder(model_client.Endpoint(url=url, api_key="sk-test"),
                                                     "all-MiniLM-L6-v2")
                break
            except pgrag.ModelRuntimeUnavailable:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read().decode()[-2000:]
                time.sleep(0.3)
        assert remote.dim == 384 and not remote.target.serves_nlp
        here = loaded_embedder("all-MiniLM-L6-v2").encode([QUESTION])
        assert np.max(1 - np.sum(here * remote.encode([QUESTION]), axis=1)) < 1e-6
        with psycopg.connect(database_uri, autocommit=True) as conn:
            conn.execute("SELECT set_config('pgrag.model_runtime', %s, false)", (url,))
            assert conn.execute("SELECT pgrag.model_runtime()").fetchone()[0]["runtime"] == url
            vector = conn.execute("SELECT pgrag.embed('runtime', %s)::text", (QUESTION,)).fetchone()[0]
            assert _retrieve(conn, "threadrag")   # its spaCy runs in the backend: a URL serves embeddings only
        assert np.max(np.abs(np.array(json.loads(vector)) - here[0])) < 1e-6
    finally:
        stop_runtime(proc)


def test_an_endpoints_key_is_masked_even_when_the_endpoint_echoes_it(db, wiki_docs, database_uri):
    """An external endpoint that puts the caller's Authorization header in its
    error (as some proxies do): neither a client's error, nor a backend's, nor
    pgrag.model_runtime() shows the key."""
    from http.server import BaseHTTPRequestHandler

    from pgrag.bench.chat_server import LocalHTTPServer

    secret = "sk-do-not-print-7c1f"

    class Echo(BaseHTTPRequestHandler):
        def reply(self) -> None:
            body = json.dumps({"error": {"message": f"bad credentials: {self.headers.get('Authorization')}"}})
            self.send_response(401)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body.encode())

        do_GET = do_POST = reply

        def log_message(self, *args) -> None:
            pass

    db.corpus("runtime").ingest(wiki_docs[:1], progress=False)
    server = LocalHTTPServer(Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        with pytest.raises(pgrag.PgragError) as client_error:
            model_client.RemoteEmbedder(model_client.Endpoint(url=url, api_key=secret),
                                        "all-MiniLM-L6-v2").encode(["x"])
        assert "bad credentials: Bearer ***" in str(client_error.value) and secret not in str(client_error.value)
        with psycopg.connect(database_uri, autocommit=True) as conn:
            conn.execute("SELECT set_config('pgrag.model_runtime', %s, false)", (url,))
            conn.execute("SELECT set_config('pgrag.model_api_key', %s, false)", (secret,))
            with pytest.raises(psycopg.Error) as backend_error:
                conn.execute("SELECT pgrag.embed('runtime', 'x')")
            report = json.dumps(conn.execute("SELECT pgrag.model_runtime()").fetchone()[0])
        shown = [str(backend_error.value), str(backend_error.value.diag.message_hint), report]
        assert "Bearer ***" in shown[0] and url in report
        assert not [s for s in shown if secret in s]
    finally:
        server.shutdown()
        server.server_close()
