import re
from pathlib import Path

import pytest

import pgrag
from pgrag import bulk
from pgrag.bench.timing.load import _LOAD_QUERY
from pgrag.queries import parse, parse_files, queries, query_files

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


def test_named_statements_come_from_every_query_file_and_a_name_from_one(tmp_path):
    names = [p.name for p in query_files()]
    assert len(names) >= 2 and "queries_retrieval.sql" in names
    assert set(queries()) == {n for p in query_files() for n in parse(p.read_text(encoding="utf-8"))}
    (tmp_path / "queries_a.sql").write_text("-- name: a\nSELECT 1;\n")
    (tmp_path / "queries_b.sql").write_text("-- name: b\n-- results: binary\nSELECT 2;\n-- name: a\nSELECT 3;\n")
    with pytest.raises(ValueError, match=r"'a' is defined twice: in queries_a.sql and queries_b.sql"):
        parse_files(sorted(tmp_path.glob("*.sql")))
    (tmp_path / "queries_b.sql").write_text("-- name: b\n-- results: binary\nSELECT 2;\n")
    text, binary = parse_files(sorted(tmp_path.glob("*.sql")))
    assert text == {"a": "SELECT 1", "b": "SELECT 2"} and binary == {"b"}


def test_bulk_statements_are_built_from_one_column_list_per_table():
    """The COPY and the INSERT ... unnest of each table name its columns in the
    order of bulk.TABLES, each value bound as an array of its type."""
    for table, columns in bulk.TABLES.items():
        names = [n for n, _ in columns] + ([bulk.DERIVED[table][0]] if table in bulk.DERIVED else [])
        assert all(re.fullmatch(r"[a-z_]+", n) for n in [table, *names])
        copy, insert = bulk.copy_statement(table), bulk.insert_statement(table)
        assert copy == f"COPY pgrag.{table} ({', '.join(names)}) FROM STDIN (FORMAT BINARY)"
        assert insert.startswith(f"INSERT INTO pgrag.{table} ({', '.join(names)}) SELECT ")
        assert re.findall(r"%\((\w+)\)s", insert) == [n for n, _ in columns]
        assert not re.search(r"%s|\{\w*\}", insert)
    assert bulk.insert_statement("chunk_entity") == (
        "INSERT INTO pgrag.chunk_entity (corpus_id, chunk_id, entity, label, char_start, char_end) "
        "SELECT * FROM unnest(%(corpus_id)s::bigint[], %(chunk_id)s::bigint[], %(entity)s::text[], "
        "%(label)s::text[], %(char_start)s::integer[], %(char_end)s::integer[])")
    assert bulk.insert_statement("semantic_node").endswith(
        "SELECT x.*, pgrag.tokenize(x.text) FROM unnest(%(corpus_id)s::bigint[], %(document_id)s::bigint[], "
        "%(ordinal)s::integer[], %(first_sentence)s::integer[], %(last_sentence)s::integer[], "
        "%(char_start)s::integer[], %(char_end)s::integer[], %(text)s::text[], %(embedding)s::vector[]) "
        "AS x(corpus_id, document_id, ordinal, first_sentence, last_sentence, char_start, char_end, text, embedding)")


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
    assert used - defined == set(), f"used but not in sql/queries_*.sql: {sorted(used - defined)}"
    assert defined - used == set(), f"in sql/queries_*.sql but never used: {sorted(defined - used)}"


def test_binary_results_are_marked_per_query_and_stay_out_of_the_sql():
    from pgrag.queries import _parse, binary_results

    text, binary = _parse("-- name: a\n-- results: binary\n-- what it is\nSELECT 1;\n\n-- name: b\nSELECT 2;\n")
    assert binary == {"a"} and text == {"a": "SELECT 1", "b": "SELECT 2"}
    # the statements that return embeddings, and only such statements
    marked = {name for name in queries() if binary_results(name)}
    assert marked == {"chunk_vectors", "threadrag_nodes", "document_chunk_vectors", "entity_vectors"}
    assert all("embedding" in queries()[name] for name in marked)
