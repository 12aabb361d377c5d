"""README's walkthrough runs, in the order a reader meets it: every Python block
of its "Python" section in one namespace, against a fresh database (through
``PGRAG_DSN``, which ``pgrag.connect()`` reads), then every statement of its "SQL"
section on that database, each of which must return a row."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import psycopg
import pytest

from pgrag import methods, sqlscript

README = Path(__file__).resolve().parents[2] / "README.md"
_BLOCK = re.compile(r"^( *)```(\w+)\n(.*?)^\1```", re.S | re.M)


def section(title: str) -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else None]


def blocks(title: str, language: str) -> list[str]:
    """The code blocks of one README section in ``language``, dedented (some sit in list items)."""
    return [textwrap.dedent(m.group(3)) for m in _BLOCK.finditer(section(title)) if m.group(2) == language]


def test_the_sections_hold_the_blocks_this_test_runs() -> None:
    assert len(blocks("Python", "python")) >= 3
    assert len(sqlscript.statements(blocks("SQL", "sql")[0])) >= 5


def test_the_python_then_the_sql_walkthrough_runs_in_order(database_uri: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGRAG_DSN", database_uri)
    namespace: dict = {}
    try:
        for code in blocks("Python", "python"):
            exec(compile(code, str(README), "exec"), namespace)   # noqa: S102 (the README's own code)
    finally:
        methods.unregister("mine")
        if "db" in namespace:
            namespace["db"].close()
    kb = namespace["kb"]
    assert namespace["hits"], "the filtered tigrag retrieval found nothing"
    assert {h.provenance.external_id for h in namespace["hits"]} <= {"d1", "d2"}
    with psycopg.connect(database_uri, autocommit=True) as conn:
        kept = {d for d, in conn.execute("SELECT external_id FROM pgrag.document WHERE corpus_id = %s", (kb.id,))}
        assert kept == {"d1", "d2", "d3"}       # d9 deleted, d3 inserted by the ORM and indexed
        for statement in sqlscript.statements(blocks("SQL", "sql")[0]):
            rows = conn.execute(statement).fetchall()
            assert rows, f"README's SQL returned no row: {statement}"
