"""A new embedded server's shared buffers are sized from the machine's memory
once, when its data directory is made (pgrag.server.size_buffers); later starts
reuse the running server as it is."""

from __future__ import annotations

import psutil
import psycopg

from pgrag import server
from pgrag.config import server_shared_buffers_mb


def buffers_mb(uri: str) -> int:
    with psycopg.connect(uri) as conn:
        row = conn.execute("SHOW shared_buffers").fetchone()
    assert row is not None and row[0].endswith(("MB", "GB"))
    return int(row[0][:-2]) * (1024 if row[0].endswith("GB") else 1)


def test_the_session_server_was_sized_when_its_data_directory_was_made(pg_uri, pg_data_dir):
    want = server_shared_buffers_mb(server._memory_bytes(psutil.virtual_memory().total))
    assert buffers_mb(pg_uri) == want
    assert "shared_buffers" in (pg_data_dir / "postgresql.auto.conf").read_text()


def test_a_later_start_does_not_restart_the_server(pg_uri, pg_data_dir):
    before = server.status(pg_data_dir).pid
    assert server.start(pg_data_dir) == pg_uri
    assert server.status(pg_data_dir).pid == before
    assert server.size_buffers(pg_uri) is False        # already the size the rule gives
