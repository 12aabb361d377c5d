"""pgrag.preload's settings for the embedded server (the library itself is
exercised by tests/integration/test_first_call.py on the session's server)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pgrag import preload


@pytest.fixture
def server(tmp_path: Path) -> tuple[Path, Path]:
    """A data directory with its postgresql.conf, and an install root whose lib/ holds the library."""
    data = tmp_path / "pgdata"
    data.mkdir()
    (data / "postgresql.conf").write_text("port = 5432\n")
    root = tmp_path / "pginstall"
    (root / "lib").mkdir(parents=True)
    preload.library_file(root).write_bytes(b"")
    return data, root


def test_configure_includes_its_file_once_and_names_the_library_and_the_path(server, monkeypatch):
    monkeypatch.delenv("PGRAG_PRELOAD", raising=False)
    data, root = server
    assert preload.configure(data, root, ["/opt/it's here", "/venv/site-packages"]) is True
    assert (data / "postgresql.conf").read_text().splitlines().count(preload.INCLUDE) == 1
    text = (data / preload.CONF).read_text()
    assert "shared_preload_libraries = 'pgrag_preload'" in text
    assert "pgrag.python_path = '/opt/it''s here:/venv/site-packages'" in text
    assert preload.configure(data, root, ["/opt/it's here", "/venv/site-packages"]) is False
    assert (data / "postgresql.conf").read_text().splitlines().count(preload.INCLUDE) == 1
    assert preload.configured(data)


@pytest.mark.parametrize("why", ["opted out", "not built"])
def test_configure_leaves_the_library_out_when_asked_or_not_built(server, monkeypatch, why):
    data, root = server
    monkeypatch.delenv("PGRAG_PRELOAD", raising=False)
    preload.configure(data, root, ["/a"])
    if why == "opted out":
        monkeypatch.setenv("PGRAG_PRELOAD", "0")
    else:
        preload.library_file(root).unlink()
    assert preload.configure(data, root, ["/a"]) is True
    assert "shared_preload_libraries" not in (data / preload.CONF).read_text()
    assert not preload.configured(data)
    assert preload.INCLUDE in (data / "postgresql.conf").read_text()


def test_configure_does_nothing_before_initdb(tmp_path):
    assert preload.configure(tmp_path, tmp_path, ["/a"]) is False
    assert not (tmp_path / preload.CONF).exists()


def test_the_python_plpython_links_is_read_from_its_library(tmp_path):
    (tmp_path / "lib").mkdir()
    assert preload.python_version(tmp_path) is None
    (tmp_path / "lib" / "plpython3.so").write_bytes(b"\x7fELF...libpython3.11.so.1.0\x00...")
    assert preload.python_version(tmp_path) == "3.11"


def test_a_backend_not_forked_from_a_preloading_postmaster_is_always_current():
    assert preload.PRELOADED is False and preload.current(["/nowhere"]) is True


def test_build_refuses_a_python_that_would_abort_every_backend(tmp_path, capsys):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "plpython3.so").write_bytes(b"...libpython3.12.so.1.0...")
    assert preload.build(tmp_path) is False
    assert "fatal error" in capsys.readouterr().err and not preload.library_file(tmp_path).exists()
