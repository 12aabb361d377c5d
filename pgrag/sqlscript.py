"""Run a plain-SQL script statement by statement.

Sending a whole script as one query string works on a single PostgreSQL, but
Citus forwards the *original query string* of some DDL to its workers (over the
extended protocol), which then fails with "cannot insert multiple commands into
a prepared statement". Migrations and the sql/NN_*.sql files therefore go through here,
on every server: one code path.
"""

from __future__ import annotations

import re
from typing import Any

_DOLLAR = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)?\$")


def statements(script: str) -> list[str]:
    """Split ``script`` at top-level semicolons (outside quotes, dollar quotes,
    identifiers and comments); empty and comment-only statements are dropped."""
    out: list[str] = []
    start = i = 0
    n = len(script)
    meaningful = False
    while i < n:
        ch = script[i]
        if ch == "-" and script.startswith("--", i):
            j = script.find("\n", i)
            i = n if j < 0 else j + 1
            continue
        if ch == "/" and script.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if script.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif script.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
            continue
        if ch in ("'", '"'):
            meaningful = True
            j = i + 1
            while j < n:
                if script[j] == ch:
                    if j + 1 < n and script[j + 1] == ch:  # doubled quote
                        j += 2
                        continue
                    break
                j += 1
            i = j + 1
            continue
        if ch == "$":
            m = _DOLLAR.match(script, i)
            if m and not (i > 0 and (script[i - 1].isalnum() or script[i - 1] == "_")):
                meaningful = True
                end = script.find(m.group(0), m.end())
                if end < 0:
                    raise ValueError("unterminated dollar-quoted string in SQL script")
                i = end + len(m.group(0))
                continue
        if ch == ";":
            if meaningful:
                out.append(script[start:i].strip())
            start, meaningful = i + 1, False
            i += 1
            continue
        if not ch.isspace():
            meaningful = True
        i += 1
    if meaningful:
        out.append(script[start:].strip())
    return out


def run(conn: Any, script: str) -> int:
    """Execute every statement of ``script`` on a psycopg connection, in order,
    without parameters (so % and : stay literal); returns how many ran."""
    parts = statements(script)
    for statement in parts:
        conn.execute(statement)
    return len(parts)


_CREATE_TABLE = re.compile(r"^CREATE\s+(?:UNLOGGED\s+)?TABLE\s", re.IGNORECASE)


def creates_table(statement: str) -> bool:
    """Whether the statement (after its leading comments) is a CREATE TABLE."""
    return bool(_CREATE_TABLE.match(_code(statement)))


def _code(statement: str) -> str:
    """The statement without its leading comment lines."""
    lines = statement.splitlines()
    while lines and (not lines[0].strip() or lines[0].lstrip().startswith("--")):
        lines.pop(0)
    return "\n".join(lines).lstrip()
