"""The embedded server starts outside any active virtual environment, so that
PL/Python's system libpython loads its own standard library (pgrag.server)."""

import pytest

from pgrag.server import server_environment


def test_the_venv_leaves_path_and_its_variables_go():
    env = server_environment({"PATH": "/w/.venv/bin:/usr/local/bin:/usr/bin", "VIRTUAL_ENV": "/w/.venv",
                              "PYTHONHOME": "/w/.venv", "HOME": "/root", "PGRAG_X": "1"}, ["/w/.venv"])
    assert env == {"PATH": "/usr/local/bin:/usr/bin", "HOME": "/root", "PGRAG_X": "1"}


def test_without_a_venv_only_python_variables_go():
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    assert server_environment(env, []) == env
    assert server_environment({**env, "PYTHONPATH": "/x"}, []) == env


def test_the_process_venv_and_another_activated_one_both_leave_path():
    # pgrag run from one checkout's venv while a shell has another checkout's venv
    # activated: that one's python3 on PATH broke PL/Python's `import ssl` in the server.
    env = server_environment({"PATH": "/a/.venv/bin:/b/.venv/bin/:/usr/bin", "VIRTUAL_ENV": "/a/.venv"},
                             ["/b/.venv", "/a/.venv"])
    assert env == {"PATH": "/usr/bin"}


def test_shared_buffers_are_an_eighth_of_memory_within_postgres_default_and_2gb(monkeypatch):
    from pgrag.config import server_shared_buffers_mb
    from pgrag.exceptions import ConfigError

    monkeypatch.delenv("PGRAG_SHARED_BUFFERS_MB", raising=False)
    gib = 1 << 30
    assert server_shared_buffers_mb(512 * (1 << 20)) == 128     # never under PostgreSQL's default
    assert server_shared_buffers_mb(8 * gib) == 1024
    assert server_shared_buffers_mb(64 * gib) == 2048
    monkeypatch.setenv("PGRAG_SHARED_BUFFERS_MB", "300")
    assert server_shared_buffers_mb(64 * gib) == 300
    monkeypatch.setenv("PGRAG_SHARED_BUFFERS_MB", "lots")
    with pytest.raises(ConfigError, match="PGRAG_SHARED_BUFFERS_MB"):
        server_shared_buffers_mb(64 * gib)
