"""Named SQL statements, parsed once from ``sql/queries.sql``.

A block starts with ``-- name: <name>`` followed by ``--`` description lines and
the statement, with ``%(param)s`` placeholders bound by psycopg.
"""

from __future__ import annotations

import re
from functools import lru_cache
from types import MappingProxyType
from typing import Mapping

from .resources import sql_file

_HEADER = re.compile(r"^-- name: ([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


def parse(text: str) -> Mapping[str, str]:
    parts = _HEADER.split(text)
    out: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2]):
        if name in out:
            raise ValueError(f"query {name!r} is defined twice")
        lines = [ln for ln in body.strip().splitlines() if not ln.startswith("--")]
        out[name] = "\n".join(lines).strip().rstrip(";")
    return MappingProxyType(out)


@lru_cache(maxsize=1)
def queries() -> Mapping[str, str]:
    return parse(sql_file("queries.sql"))


def query(name: str) -> str:
    return queries()[name]
