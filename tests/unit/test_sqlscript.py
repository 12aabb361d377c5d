"""Splitting SQL scripts into statements (migrations and sql/NN_*.sql run
statement by statement: Citus needs it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pgrag.sqlscript import statements

ROOT = Path(__file__).resolve().parents[2]


def test_splits_only_at_top_level_semicolons():
    script = """
    -- a comment; with a semicolon
    SELECT 'a;b', "x;y" FROM t;  /* block; comment */
    CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $$ SELECT 1; $$;
    DO $body$ BEGIN PERFORM 'it''s;'; END $body$;
    SELECT $1::int;
    ;;
    SELECT 2
    """
    parts = statements(script)
    assert len(parts) == 5
    assert parts[0].endswith("""SELECT 'a;b', "x;y" FROM t""")
    assert parts[1] == "/* block; comment */\n    CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $$ SELECT 1; $$"
    assert parts[2].startswith("DO $body$") and parts[2].endswith("END $body$")
    assert parts[3] == "SELECT $1::int" and parts[4] == "SELECT 2"


def test_unterminated_dollar_quote_is_an_error():
    with pytest.raises(ValueError):
        statements("SELECT $$ never closed")


@pytest.mark.parametrize("path", sorted((ROOT / "migrations" / "sql").glob("*.sql"))
                         + sorted((ROOT / "sql").glob("[0-9][0-9]_*.sql")) + [ROOT / "sql" / "distribute.sql"],
                         ids=lambda p: p.name)
def test_every_shipped_script_splits_into_whole_statements(path):
    text = path.read_text()
    parts = statements(text)
    assert parts
    # Nothing lost: the statements, rejoined, hold every non-comment character.
    def code(s: str) -> str:
        return "".join(line.split("--")[0] for line in s.splitlines() if not line.lstrip().startswith("--"))
    assert "".join(code(p) for p in parts).replace(" ", "").replace(";", "") == \
        code(text).replace(" ", "").replace(";", "")
