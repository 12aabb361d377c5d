"""The embedded server starts outside any active virtual environment, so that
PL/Python's system libpython loads its own standard library (pgrag.server)."""

from pgrag.server import server_environment


def test_the_venv_leaves_path_and_its_variables_go():
    env = server_environment({"PATH": "/w/.venv/bin:/usr/local/bin:/usr/bin", "VIRTUAL_ENV": "/w/.venv",
                              "PYTHONHOME": "/w/.venv", "HOME": "/root", "PGRAG_X": "1"}, "/w/.venv")
    assert env == {"PATH": "/usr/local/bin:/usr/bin", "HOME": "/root", "PGRAG_X": "1"}


def test_without_a_venv_only_python_variables_go():
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    assert server_environment(env, None) == env
    assert server_environment({**env, "PYTHONPATH": "/x"}, None) == env
