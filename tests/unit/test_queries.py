import re
from pathlib import Path

import pytest

import pgrag
from pgrag.bench.timing.load import _LOAD_QUERY
from pgrag.bulk import TABLES
from pgrag.queries import parse, queries

# Every way the package runs a named query with a literal name: query("x") and the
# Database helpers fetchall/fetchone/fetch_row/_admin (the name may sit on the next line).
NAMED_CALL = re.compile(r'\b(?:query|fetchall|fetchone|fetch_row|_admin)\(\s*"([a-z_][a-z0-9_]*)"')
# pgrag.follow runs its queries in a transaction through _rows(tx, "name", params).
ROWS_CALL = re.compile(r'\b_rows\(\s*\w+,\s*"([a-z_][a-z0-9_]*)"')


def package_source() -> str:
    return "\n".join(p.read_text() for p in sorted(Path(pgrag.__file__).parent.rglob("*.py")))


def used_query_names(source: str) -> set[str]:
    used = set(NAMED_CALL.findall(source)) | set(ROWS_CALL.findall(source))
    used.update(_LOAD_QUERY.values())  # bench load runs query(_LOAD_QUERY[method]) for each SQL method
    # pgrag.bulk runs query(f"copy_{table}") over psycopg and query(f"bulk_{table}") over SPI
    assert 'query(f"copy_{table}")' in source and 'query(f"bulk_{table}")' in source
    used.update(f"{kind}_{table}" for kind in ("copy", "bulk") for table in TABLES)
    # Connection.read_triples("x", ...) runs x_copy over psycopg and x_arrays over SPI (pgrag.bulk)
    assert 'query(f"{name}_copy")' in source and 'query(f"{name}_arrays")' in source
    used.update(f"{name}_{kind}" for name in re.findall(r'read_triples\(\s*"([a-z_]+)"', source)
                for kind in ("copy", "arrays"))
    return used


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


def test_the_call_pattern_sees_every_helper():
    """The scanner below must see each calling convention, or the next test is vacuous."""
    sample = '''db.fetch_row("a")\nself._admin("b", {})\nconn.execute(query("c"))\n
                db.fetchall(\n    "d", {})\nx.fetchone("e")'''
    assert set(NAMED_CALL.findall(sample)) == {"a", "b", "c", "d", "e"}
    source = package_source()
    for helper in ("fetch_row", "_admin", "fetchall", "fetchone", "query"):
        assert re.search(rf'\b{helper}\(\s*"', source), f"no {helper}(...) call found: pattern out of date?"


def test_every_named_query_used_exists_and_every_named_query_is_used():
    used = used_query_names(package_source())
    defined = set(queries())
    assert used - defined == set(), f"used but not in queries.sql: {sorted(used - defined)}"
    assert defined - used == set(), f"in queries.sql but never used: {sorted(defined - used)}"


def test_binary_results_are_marked_per_query_and_stay_out_of_the_sql():
    from pgrag.queries import _parse, binary_results

    text, binary = _parse("-- name: a\n-- results: binary\n-- what it is\nSELECT 1;\n\n-- name: b\nSELECT 2;\n")
    assert binary == {"a"} and text == {"a": "SELECT 1", "b": "SELECT 2"}
    # the statements that return embeddings, and only such statements
    marked = {name for name in queries() if binary_results(name)}
    assert marked == {"chunk_vectors", "threadrag_nodes", "document_chunk_vectors", "entity_vectors"}
    assert all("embedding" in queries()[name] for name in marked)
