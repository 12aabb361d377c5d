"""Settings.from_env: the only reader of PGRAG_* variables."""

from __future__ import annotations

from pathlib import Path

import pytest

from pgrag.config import DEFAULT_EMBEDDING_MODEL, DEFAULT_SPACY_MODEL, Settings
from pgrag.exceptions import ConfigError

VARIABLES = ("PGRAG_DSN", "PGRAG_DATA_DIR", "PGRAG_EMBEDDING_MODEL", "PGRAG_SPACY_MODEL", "PGRAG_BATCH_SIZE",
             "XDG_DATA_HOME")


@pytest.fixture
def env(monkeypatch, tmp_path):
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    return monkeypatch


def test_defaults_without_any_variable(env, tmp_path):
    s = Settings.from_env()
    assert s.dsn is None
    assert s.data_dir == tmp_path / ".local" / "share" / "pgrag" / "pgdata"
    assert (s.embedding_model, s.spacy_model, s.batch_size) == (DEFAULT_EMBEDDING_MODEL, DEFAULT_SPACY_MODEL, 64)


def test_every_variable_is_read(env, tmp_path):
    env.setenv("PGRAG_DSN", "postgresql://u:p@db:5432/app")
    env.setenv("PGRAG_DATA_DIR", "~/elsewhere/pg")
    env.setenv("PGRAG_EMBEDDING_MODEL", "some/model")
    env.setenv("PGRAG_SPACY_MODEL", "en_core_web_sm")
    env.setenv("PGRAG_BATCH_SIZE", "7")
    s = Settings.from_env()
    assert s.dsn == "postgresql://u:p@db:5432/app"
    assert s.data_dir == tmp_path / "elsewhere" / "pg"                 # ~ expanded
    assert (s.embedding_model, s.spacy_model, s.batch_size) == ("some/model", "en_core_web_sm", 7)


def test_xdg_data_home_and_empty_values(env, tmp_path):
    env.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    for name in ("PGRAG_DSN", "PGRAG_EMBEDDING_MODEL", "PGRAG_BATCH_SIZE"):
        env.setenv(name, "")                                            # empty means unset
    s = Settings.from_env()
    assert s.data_dir == Path(tmp_path / "xdg" / "pgrag" / "pgdata")
    assert s.dsn is None and s.embedding_model == DEFAULT_EMBEDDING_MODEL and s.batch_size == 64


@pytest.mark.parametrize("raw", ["0", "-3", "many", "1.5"])
def test_a_bad_batch_size_is_a_config_error(env, raw):
    env.setenv("PGRAG_BATCH_SIZE", raw)
    with pytest.raises(ConfigError, match=f"PGRAG_BATCH_SIZE must be a positive integer, not '{raw}'"):
        Settings.from_env()


def test_model_threads_one_in_a_backend_the_variable_else_torch_default(env):
    import sys

    from pgrag import config

    env.delenv("PGRAG_TORCH_THREADS", raising=False)
    assert config.torch_threads() is None            # a client: torch's own default
    env.setitem(sys.modules, "plpy", object())       # what PL/Python puts there in a backend
    assert config.in_server() and config.torch_threads() == 1
    env.setenv("PGRAG_TORCH_THREADS", "4")
    assert config.torch_threads() == 4
    applied: list[int] = []                          # this process's torch keeps its threads
    env.setitem(sys.modules, "torch", type("Torch", (), {"set_num_threads": staticmethod(applied.append)}))
    try:
        assert config.set_torch_threads("2") == 2    # a session's pgrag.torch_threads wins
    finally:
        config.set_torch_threads(None)
    assert config.torch_threads() == 4 and applied == [2, 4]
    env.setenv("PGRAG_TORCH_THREADS", "0")
    with pytest.raises(ConfigError, match="PGRAG_TORCH_THREADS"):
        config.torch_threads()


def test_the_tests_do_not_find_a_developers_default_server(monkeypatch):
    """`make demo` leaves its server and model runtime in the default data
    directory; a test process that found that runtime's socket would embed
    through it (tests/conftest.py points PGRAG_DATA_DIR elsewhere)."""
    from pgrag import config

    socket = config.default_model_socket()
    assert not socket.exists()
    monkeypatch.delenv("PGRAG_DATA_DIR")
    assert not socket.is_relative_to(config.default_data_dir())      # the developer's default
