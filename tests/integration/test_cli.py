"""The pgrag command, driven through click's runner; state checked through the library."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

import pgrag
from pgrag import methods, model_service, server
from pgrag.cli import main
from pgrag.resources import resource_dir


def run(*args: str) -> "object":
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_ingest_query_corpora_delete(database_uri, tmp_path, wiki_docs):
    path = tmp_path / "docs.jsonl"
    path.write_text("\n".join(json.dumps(d) for d in wiki_docs))
    result = run("ingest", str(path), "--corpus", "cli", "--dsn", database_uri, "--no-progress")
    assert result.exit_code == 0, result.output
    assert "5 added" in result.output

    result = run("query", "Where was Nicki Minaj born?", "--corpus", "cli", "--method", "bm25",
                 "-k", "2", "--dsn", database_uri, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["hits"][0]["provenance"]["external_id"] == "minaj"
    assert data["trace"]["method"] == "bm25"

    result = run("query", "Where was Nicki Minaj born?", "--corpus", "cli", "--dsn", database_uri)
    assert "provenance: document 'minaj'" in result.output

    result = run("corpora", "--dsn", database_uri, "--json")
    [row] = json.loads(result.stdout)
    assert row["name"] == "cli" and row["documents"] == 5 and row["pending"] == 0 and row["families"] == []
    assert "families: none" in run("corpora", "--dsn", database_uri).output

    result = run("delete", "minaj", "--corpus", "cli", "--dsn", database_uri)
    assert "deleted 1" in result.output
    db = pgrag.connect(database_uri)
    assert db.corpora()[0]["documents"] == 4
    db.close()


def test_ingest_a_folder(database_uri, tmp_path):
    (tmp_path / "a.txt").write_text("Quokkas live on Rottnest Island. They are small marsupials.")
    (tmp_path / "b.md").write_text("# Notes\n\nWombats dig burrows.")
    result = run("ingest", str(tmp_path), "--corpus", "folder", "--dsn", database_uri, "--no-progress", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["added"] == 2
    db = pgrag.connect(database_uri)
    hits = db.corpus("folder").retrieve("quokkas island", method="bm25", k=1)
    assert hits[0].provenance.external_id == "a.txt"
    db.close()


def test_json_output_is_nothing_but_json_on_stdout(database_uri, tmp_path, monkeypatch):
    """Whatever a library prints while a --json command runs goes to stderr:
    stdout parses as one JSON document."""
    from pgrag import sources

    load_path = sources.load_path

    def noisy(path):
        print("a library's stray line")
        sys.stdout.write("a progress line\r")
        return load_path(path)

    monkeypatch.setattr(sources, "load_path", noisy)
    (tmp_path / "a.txt").write_text("Quokkas live on Rottnest Island.")
    result = run("ingest", str(tmp_path), "--corpus", "noisy", "--dsn", database_uri, "--no-progress", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["added"] == 1
    assert "a library's stray line" in result.stderr and "a progress line" in result.stderr


def test_errors_are_one_line_and_exit_1(database_uri, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('[{"id": "a", "text": "x"},\n{"id": }]')
    result = run("ingest", str(bad), "--corpus", "c", "--dsn", database_uri)
    assert result.exit_code == 1
    assert re.search(r"Error: .*bad\.json: line 2", result.output)
    result = run("query", "x", "--corpus", "missing", "--dsn", database_uri)
    assert result.exit_code == 1 and "corpus 'missing' does not exist" in result.output
    result = run("query", "x", "--corpus", "missing", "--method", "nope", "--dsn", database_uri)
    assert result.exit_code == 1
    # nothing was created by the failed commands
    db = pgrag.connect(database_uri)
    assert db.corpora() == []
    db.close()


def test_server_status_prints_the_uri_on_its_own_line(pg_data_dir, pg_uri):
    result = run("server", "status", "--data-dir", str(pg_data_dir))
    assert result.exit_code == 0, result.output
    assert pg_uri in result.output.splitlines()
    assert "psql:" in result.output
    from pgrag import preload
    from pgrag.plpython import pginstall

    built = preload.library_file(pginstall()).exists()
    assert ("pgrag in the postmaster: yes" in result.output) == built, result.output


@pytest.fixture
def cli_data_dir():
    """A data directory of the test's own; its server is stopped at teardown, even
    when an assertion failed with it running."""
    root = Path(tempfile.mkdtemp(prefix="pgrag-cli-"))
    yield root / "pg"
    model_service.stop_detached(root / "pg")
    server.stop(root / "pg")
    shutil.rmtree(root, ignore_errors=True)


def test_server_start_stop(cli_data_dir):
    data_dir = cli_data_dir
    result = run("server", "start", "--data-dir", str(data_dir))
    assert result.exit_code == 0, result.output
    uri = result.output.strip().splitlines()[-1]
    assert uri.startswith("postgresql://")
    assert run("server", "status", "--data-dir", str(data_dir)).exit_code == 0
    # the model runtime started beside it, its socket the server's OS user's alone
    models = run("models", "status", "--data-dir", str(data_dir), "--json")
    assert models.exit_code == 0, models.output
    assert json.loads(models.stdout)["model"] == "all-MiniLM-L6-v2"
    text = run("models", "status", "--data-dir", str(data_dir)).output
    assert "\ncache: size 4096, held 0, hits 0\n" in text and "this_process: setting " in text
    socket = data_dir / "pgrag-models.sock"
    assert socket.stat().st_mode & 0o777 == 0o600 and socket.stat().st_uid == data_dir.stat().st_uid
    assert "stopped" in run("server", "stop", "--data-dir", str(data_dir)).output
    status = run("server", "status", "--data-dir", str(data_dir))
    assert status.exit_code == 3 and "running: no" in status.output
    down = run("models", "status", "--data-dir", str(data_dir))
    assert down.exit_code == 3 and "status: down" in down.output and not socket.exists()
    assert "not running" in run("server", "stop", "--data-dir", str(data_dir)).output


def test_connect_without_a_dsn_uses_the_embedded_server_in_pgrag_data_dir(cli_data_dir, monkeypatch, wiki_docs):
    monkeypatch.setenv("PGRAG_DATA_DIR", str(cli_data_dir))
    db = pgrag.connect()
    try:
        assert db.embedded and server.status(cli_data_dir).running
        assert db.dsn == server.status(cli_data_dir).uri
        kb = db.corpus("embedded")
        kb.ingest(wiki_docs[:2], progress=False)
        assert kb.retrieve("Lothair", method="bm25", k=1)[0].provenance.external_id == "lothair"
    finally:
        db.close()
    # a second connect reuses the running server and finds the corpus
    again = pgrag.connect()
    assert [c["name"] for c in again.corpora()] == ["embedded"]
    again.close()


def test_server_psql_runs_psql_on_the_embedded_server(pg_data_dir, pg_uri):
    """`pgrag server psql` execs psql, so it runs in a process of its own."""
    result = subprocess.run([sys.executable, "-m", "pgrag", "server", "psql", "--data-dir", str(pg_data_dir),
                             "-At", "-c", "SELECT 6 * 7, current_database()"],
                            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "42|postgres"


def test_db_migrations_path_prints_the_alembic_folder():
    result = run("db", "migrations-path")
    assert result.exit_code == 0
    path = Path(result.output.strip())
    assert (path / "env.py").is_file() and (path / "versions" / "0001_core_schema.py").is_file()
    assert path == resource_dir("migrations")


def test_db_upgrade_and_help(empty_uri):
    result = run("db", "upgrade", "--dsn", empty_uri)
    assert result.exit_code == 0 and "schema at head" in result.output
    import pgrag

    root = str(__import__("pathlib").Path(pgrag.__file__).resolve().parent.parent)
    assert f"in-server runtime: plpython3u, pgrag imported from {root}" in result.output, result.output
    for command in (["--help"], ["ingest", "--help"], ["query", "--help"], ["bench", "ingest", "--help"]):
        assert run(*command).exit_code == 0


@pytest.mark.slow  # the demo ingests the 40-document sample corpus
def test_demo_prints_hits_with_provenance_for_every_method(database_uri):
    result = run("demo", "--dsn", database_uri, "-k", "2")
    assert result.exit_code == 0, result.output
    from pgrag.demo import sample_questions

    for q in sample_questions():
        assert q["question"] in result.output
    for method in methods.names(variants=False):
        assert f"[{method}]" in result.output
    assert result.output.count("provenance: document") >= 2 * len(sample_questions())
    assert re.search(r"chunk \d+, chars \d+-\d+, sentences \d+-\d+", result.output)
    assert re.search(r"why: hop [12], rho \d+\.\d+, cosine", result.output)   # TIGRAG says why
    assert "no LLM configured: answering methods show their retrieval-only fallback" in result.output
    assert re.search(r"why: round 0, via .+, cosine", result.output)        # T2RAG: the proposition
    # ... and the first question once more from SQL alone, with the same top hit as TIGRAG's
    sql_part = result.output.split("The same from SQL, in one statement")[1]
    assert "FROM pgrag.retrieve('pgrag-sample'" in sql_part
    assert re.search(r"^  1\. .+ \(hop [12], score \d\.\d{4}\)$", sql_part, re.MULTILINE), sql_part


@pytest.mark.slow  # the demo ingests the 40-document sample corpus
def test_demo_with_an_llm_prints_answers_calls_and_tokens(database_uri):
    """The demo's answering path, against a scripted server whose one reply
    satisfies every method's JSON shape (decomposition, resolution, entities,
    sufficiency, integration)."""
    from tests.fake_llm import FakeLLM

    reply = json.dumps({"triples": [["Lothair II", "mother", "?mother"]], "values": {"?mother": "Ermengarde"},
                        "entities": ["Lothair II"], "sufficient": True, "thought": "enough", "core": [1],
                        "next_query": None})
    with FakeLLM(lambda request: reply) as fake:
        result = run("demo", "--dsn", database_uri, "-k", "1", "--llm", fake.base_url, "--llm-model", "fake-model")
    assert result.exit_code == 0, result.output
    assert f"LLM for the answering methods: fake-model at {fake.base_url}" in result.output
    for method in ("t2rag", "threadrag", "cirag"):
        assert re.search(rf"\[{method}\] [\d.]+ ms, \d+ LLM calls, \d+\+\d+ tokens\n    answer: ",
                         result.output), method
    # ... and one question answered in the server, through SQL alone
    sql_part = result.output.split("And answered in the server")[1]
    assert re.search(r"^  answer: .+ \(finish \w+, \d+ LLM calls\)$", sql_part, re.MULTILINE), sql_part
