"""Named SQL statements, parsed once from the ``sql/queries_*.sql`` files (one
per topic) into one mapping: a name defined twice, in one file or two, is an error.

A block starts with ``-- name: <name>`` followed by ``--`` description lines and
the statement, with ``%(param)s`` placeholders bound by psycopg. A description
line ``-- results: binary`` asks for the rows in PostgreSQL's binary format:
for statements that return embeddings, which psycopg then reads as packed
floats rather than parsing their text (a tenth of the time).
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Iterable, Mapping

from .resources import resource_dir

_HEADER = re.compile(r"^-- name: ([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
_BINARY = "-- results: binary"


def parse(text: str) -> Mapping[str, str]:
    return _parse(text)[0]


def _parse(text: str) -> tuple[Mapping[str, str], frozenset[str]]:
    parts = _HEADER.split(text)
    binary: set[str] = set()
    out: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2]):
        if name in out:
            raise ValueError(f"query {name!r} is defined twice")
        lines = body.strip().splitlines()
        if any(ln.strip() == _BINARY for ln in lines if ln.startswith("--")):
            binary.add(name)
        out[name] = "\n".join(ln for ln in lines if not ln.startswith("--")).strip().rstrip(";")
    return MappingProxyType(out), frozenset(binary)


def query_files() -> list[Path]:
    """Every file of named statements, in the order of their names."""
    return sorted(resource_dir("sql").glob("queries_*.sql"))


def parse_files(paths: Iterable[Path]) -> tuple[Mapping[str, str], frozenset[str]]:
    """The statements of several files as one mapping (and those asking for binary
    rows), each name defined in exactly one of them."""
    out: dict[str, str] = {}
    binary: set[str] = set()
    where: dict[str, str] = {}
    for path in paths:
        statements, marked = _parse(path.read_text(encoding="utf-8"))
        for name in statements:
            if name in where:
                raise ValueError(f"query {name!r} is defined twice: in {where[name]} and {path.name}")
            where[name] = path.name
        out.update(statements)
        binary |= marked
    return MappingProxyType(out), frozenset(binary)


@lru_cache(maxsize=1)
def _file() -> tuple[Mapping[str, str], frozenset[str]]:
    return parse_files(query_files())


def queries() -> Mapping[str, str]:
    return _file()[0]


def binary_results(name: str) -> bool:
    """Whether the named statement asks for its rows in binary (``-- results: binary``)."""
    return name in _file()[1]


def query(name: str) -> str:
    return queries()[name]
