"""The model runtime on the embedded server's default path (issue 45): ``pgrag.connect()``
without a DSN starts it beside the server, supervised, and its backends embed
through it; a second connect reuses it; a runtime killed with SIGKILL is started
again; ``PGRAG_START_MODELS=0`` leaves it down. Real parts: a fresh embedded
server of this module's own, the runtime process, MiniLM."""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

import pgrag
from pgrag import embedded, model_client, model_service, server
from pgrag.cli import main
from tests.conftest import WIKI


@pytest.fixture(scope="module")
def data_dir() -> Iterator[Path]:
    """A data directory of this module's own (the session's server already runs a
    runtime); its server and runtime are stopped at teardown."""
    root = Path(tempfile.mkdtemp(prefix="pgrag-embedded-"))
    yield root / "pg"
    embedded.stop(root / "pg")
    shutil.rmtree(root, ignore_errors=True)


def _models_status(data_dir: Path) -> tuple[int, dict]:
    result = CliRunner().invoke(main, ["models", "status", "--data-dir", str(data_dir), "--json"])
    return result.exit_code, json.loads(result.output)


def _backend_runtime(db: pgrag.Database) -> dict:
    """``SELECT pgrag.model_runtime()`` in a fresh backend: its choice and the runtime's health."""
    with psycopg.connect(db.dsn, autocommit=True) as conn:
        return conn.execute("SELECT pgrag.model_runtime()").fetchone()[0]


def _pid(target: model_client.Endpoint) -> int | None:
    """The runtime's pid, or None while nothing answers (between a kill and the restart)."""
    try:
        return model_client.health(target)["pid"]
    except pgrag.ModelRuntimeUnavailable:
        return None


def test_connect_starts_the_runtime_once_unless_asked_not_to(data_dir, monkeypatch):
    monkeypatch.setenv("PGRAG_DATA_DIR", str(data_dir))
    socket = model_service.files(data_dir)[0]

    monkeypatch.setenv("PGRAG_START_MODELS", "0")
    db = pgrag.connect()
    try:
        assert server.status(data_dir).running
        code, status = _models_status(data_dir)
        assert code == 3 and status["status"] == "down" and not socket.exists()
        assert _backend_runtime(db)["runtime"] == "inprocess"
    finally:
        db.close()

    monkeypatch.delenv("PGRAG_START_MODELS")
    db = pgrag.connect()
    try:
        code, status = _models_status(data_dir)
        assert code == 0 and status["status"] == "ok" and status["model"] == "all-MiniLM-L6-v2"
        seen = _backend_runtime(db)
        assert seen["runtime"] == f"unix:{socket}" and seen["health"]["status"] == "ok"
        supervisor = model_service.files(data_dir)[1].read_text()
    finally:
        db.close()

    again = pgrag.connect()   # reuses the runtime that answers: no second one
    try:
        assert _backend_runtime(again)["health"]["pid"] == seen["health"]["pid"]
        assert model_service.files(data_dir)[1].read_text() == supervisor
    finally:
        again.close()


def test_a_runtime_killed_with_sigkill_is_started_again(data_dir, monkeypatch):
    monkeypatch.setenv("PGRAG_DATA_DIR", str(data_dir))
    db = pgrag.connect()
    try:
        kb = db.corpus("killed")
        kb.ingest(WIKI[:2], progress=False)   # the client embeds through the runtime too (auto)
        target = model_client.Endpoint(socket=model_service.files(data_dir)[0])
        old = model_client.health(target)["pid"]
        os.kill(old, signal.SIGKILL)
        deadline = time.monotonic() + 180
        while (new := _pid(target)) in (None, old):
            assert time.monotonic() < deadline, "the runtime was not started again"
            time.sleep(0.3)
        seen = _backend_runtime(db)
        assert seen["health"]["status"] == "ok" and seen["health"]["pid"] == new
        with psycopg.connect(db.dsn, autocommit=True) as conn:
            hits = conn.execute("SELECT external_id FROM pgrag.retrieve('killed', 'Who was the mother of Lothair II?', "
                                "'dense', 1)").fetchall()
        assert hits == [("lothair",)]
    finally:
        db.close()
