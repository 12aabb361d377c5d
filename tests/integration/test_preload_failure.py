"""The embedded server starts when pgrag_preload cannot import pgrag in its
postmaster: it logs why, and its backends find no half-imported pgrag."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from pgrag import preload, server
from pgrag.plpython import pginstall
from tests.conftest import skip_unless_required

NOTICE_MODULES = r"""
import sys
plpy.notice("PGRAG " + ",".join(sorted(m for m in sys.modules if m == "pgrag" or m.startswith("pgrag."))))
"""


@pytest.fixture
def broken() -> Iterator[Path]:
    """A folder the server's OS user can read whose pgrag fails half-way: its
    package imports, then one of the modules the postmaster imports raises."""
    if not preload.library_file(pginstall()).exists():
        skip_unless_required("preload", "pgrag_preload is not built here (python -m pgrag.preload says why)")
    root = Path(tempfile.mkdtemp(prefix="pgrag-broken-"))
    os.chmod(root, 0o755)
    package = root / "pgrag"
    shutil.copytree(Path(preload.__file__).parent, package, ignore=shutil.ignore_patterns("__pycache__", "ui"))
    (package / "inserver.py").write_text("raise RuntimeError('a broken pgrag for the test')\n")
    for p in [root, *root.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_a_failed_preload_logs_why_and_leaves_no_half_imported_pgrag(broken, monkeypatch):
    import sysconfig

    monkeypatch.setenv("PGRAG_SERVER_PYTHONPATH", os.pathsep.join([str(broken), sysconfig.get_paths()["purelib"]]))
    data_dir = Path(tempfile.mkdtemp(prefix="pgrag-preload-")) / "pg"
    try:
        uri = server.start(data_dir)
        assert preload.configured(data_dir)
        log = (data_dir / "log").read_text(errors="replace")
        assert "importing pgrag in the postmaster failed" in log and "a broken pgrag for the test" in log
        notices: list[str] = []
        with psycopg.connect(uri, autocommit=True) as conn:
            conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
            conn.execute("CREATE EXTENSION IF NOT EXISTS plpython3u")
            conn.execute(psycopg.sql.SQL("DO {} LANGUAGE plpython3u").format(psycopg.sql.Literal(NOTICE_MODULES)))
        assert notices == ["PGRAG "], notices
    finally:
        server.stop(data_dir)
        shutil.rmtree(data_dir.parent, ignore_errors=True)
