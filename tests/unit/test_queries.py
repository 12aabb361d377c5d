import re

import pytest

from pgrag.queries import parse, queries
from pathlib import Path

import pgrag


def test_every_named_query_is_nonempty_and_uses_bound_parameters():
    qs = queries()
    assert {"bm25", "dense", "insert_documents", "index_chunks", "unindex_documents"} <= set(qs)
    for name, text in qs.items():
        assert text.strip(), name
        # values are bound with %(name)s; no positional or str.format placeholders
        assert not re.search(r"%s|\{\w*\}", text), name


def test_duplicate_query_names_are_rejected():
    with pytest.raises(ValueError, match="twice"):
        parse("-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;")


def test_every_query_used_in_code_exists():
    used = set()
    for path in Path(pgrag.__file__).parent.rglob("*.py"):
        used.update(re.findall(r'query\("([a-z_0-9]+)"\)', path.read_text()))
        used.update(re.findall(r'fetch(?:all|one)\("([a-z_0-9]+)"', path.read_text()))
    assert used, "no query() calls found"
    assert used <= set(queries()), used - set(queries())
