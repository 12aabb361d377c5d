"""The embedded server starts outside any active virtual environment, so that
PL/Python's system libpython loads its own standard library (pgrag.server)."""

import pytest

from pgrag.server import server_environment


def venv(folder):
    """A virtual environment's layout, as PEP 405 defines it: pyvenv.cfg beside bin/."""
    (folder / "bin").mkdir(parents=True)
    (folder / "pyvenv.cfg").write_text("home = /usr/bin\n")
    return folder / "bin"


def test_the_venv_leaves_path_and_its_variables_go(tmp_path):
    bin_dir = venv(tmp_path / ".venv")
    env = server_environment({"PATH": f"{bin_dir}:/usr/local/bin:/usr/bin", "VIRTUAL_ENV": str(tmp_path / ".venv"),
                              "PYTHONHOME": str(tmp_path / ".venv"), "HOME": "/root", "PGRAG_X": "1"})
    assert env == {"PATH": "/usr/local/bin:/usr/bin", "HOME": "/root", "PGRAG_X": "1"}


def test_without_a_venv_only_python_variables_go(tmp_path):
    (tmp_path / "bin").mkdir()          # a bin folder that is no venv's stays
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "LANG": "C.UTF-8"}
    assert server_environment(env) == env
    assert server_environment({**env, "PYTHONPATH": "/x"}) == env


def test_every_venv_on_path_leaves_it_activated_or_not(tmp_path):
    # pgrag run from one checkout's venv while a shell has another checkout's venv
    # on PATH (activated, or with VIRTUAL_ENV unset since): that one's python3
    # broke PL/Python's `import ssl` in the server.
    a, b = venv(tmp_path / "a" / ".venv"), venv(tmp_path / "b" / ".venv")
    env = server_environment({"PATH": f"{a}:{b}/:/usr/bin"})
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
