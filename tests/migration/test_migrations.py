"""Migrations, SQL files and ORM models agree."""

from __future__ import annotations

import re
from pathlib import Path

import psycopg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

import pgrag
from pgrag.models import Base
from pgrag.resources import resource_dir


def test_each_sql_migration_is_run_by_exactly_one_revision():
    root = resource_dir("migrations")
    sql_files = sorted(p.stem for p in (root / "sql").glob("*.sql"))
    revisions = sorted(p.stem for p in (root / "versions").glob("*.py"))
    assert sql_files == revisions
    for name in sql_files:
        assert re.fullmatch(r"\d{4}_[a-z0-9_]+", name), name


def test_upgrade_is_idempotent(empty_uri):
    db = pgrag.connect(empty_uri)
    db.upgrade()
    db.upgrade()
    with psycopg.connect(empty_uri) as conn:
        head = max(p.stem[:4] for p in (resource_dir("migrations") / "versions").glob("*.py"))
        assert conn.execute("SELECT version_num FROM pgrag.alembic_version").fetchall() == [(head,)]
        assert head >= "0002"
    db.close()


def test_orm_models_match_the_migrated_schema(database_uri):
    db = pgrag.connect(database_uri)
    with db.engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={
            "include_schemas": True,
            "include_name": lambda name, type_, parent: type_ != "schema" or name == "pgrag",
            "include_object": lambda obj, name, type_, reflected, compare_to: not (
                type_ == "table" and name == "alembic_version")
                and not (type_ == "index" and name and name.startswith("chunk_embedding_hnsw_")),
        })
        diff = compare_metadata(ctx, Base.metadata)
    # Descriptions are the SQL's (sql/95_comments.sql, checked below), not the ORM's.
    comments = ("add_table_comment", "remove_table_comment", "modify_table_comment", "modify_comment")
    diff = [d for d in diff if not (d[0] in comments if isinstance(d, tuple)
                                    else all(change[0] in comments for change in d))]
    assert diff == []
    db.close()


def test_every_table_carries_the_corpus_id(database_uri):
    with psycopg.connect(database_uri) as conn:
        tables = conn.execute(
            """SELECT t.table_name FROM information_schema.tables t
               WHERE t.table_schema = 'pgrag' AND t.table_name <> 'alembic_version'
                 AND NOT EXISTS (SELECT 1 FROM information_schema.columns c
                                 WHERE c.table_schema = 'pgrag' AND c.table_name = t.table_name
                                   AND c.column_name = 'corpus_id')""").fetchall()
    assert tables == []


def test_sql_functions_run_with_a_fixed_search_path(database_uri):
    with psycopg.connect(database_uri) as conn:
        rows = conn.execute(
            """SELECT p.proname, p.proconfig, p.prosecdef,
                      has_function_privilege('public', p.oid, 'EXECUTE') FROM pg_proc p
               WHERE p.pronamespace = 'pgrag'::regnamespace""").fetchall()
    assert len(rows) >= 10
    for name, config, security_definer, public in rows:
        # Two definer functions, neither executable by PUBLIC: building HNSW indexes
        # (DDL needs the owner; roles given grant_writer may call it) and the follow
        # trigger (the application role needs no rights on pgrag tables; README
        # "Security and operations", "Following an application table").
        assert not security_definer or (name in ("ensure_hnsw_index", "follow_enqueue") and not public), name
        if name not in ("stopwords", "chunk_search_text"):  # pure expressions, inlined
            assert config and any(c.startswith("search_path=pg_catalog, pgrag") for c in config), (name, config)


def test_a_server_without_pgvector_gets_a_clear_error():
    """Debian's PostgreSQL on these machines has no pgvector: connecting pgrag to
    it must say so plainly."""
    pg_bin = Path("/usr/lib/postgresql/15/bin")
    if not (pg_bin / "initdb").exists():
        pytest.skip("no system PostgreSQL without pgvector on this machine")
    import os
    import pwd
    import shutil
    import subprocess
    import tempfile

    tmp_path = Path(tempfile.mkdtemp(prefix="pgrag-novector-"))  # pytest's tmp is not traversable by postgres
    tmp_path.chmod(0o755)
    data = tmp_path / "pg15"
    data.mkdir()
    sock = tmp_path / "sock"
    sock.mkdir()
    run_as: dict = {}
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        os.chown(tmp_path, user.pw_uid, user.pw_gid)
        os.chown(data, user.pw_uid, user.pw_gid)
        os.chown(sock, user.pw_uid, user.pw_gid)
        run_as = {"user": "postgres"}
    subprocess.run([pg_bin / "initdb", "-D", data, "-U", "postgres", "--auth=trust", "--encoding=UTF8"],
                   check=True, capture_output=True, **run_as)
    subprocess.run([pg_bin / "pg_ctl", "-D", data, "-w", "-o", f"-k {sock} -h ''", "-l", data / "log", "start"],
                   check=True, capture_output=True, **run_as)
    try:
        with pytest.raises(pgrag.ExtensionMissing, match="pgvector extension"):
            pgrag.connect(f"postgresql://postgres@/postgres?host={sock}")
    finally:
        subprocess.run([pg_bin / "pg_ctl", "-D", data, "-w", "-m", "immediate", "stop"], capture_output=True, **run_as)
        shutil.rmtree(tmp_path, ignore_errors=True)


def test_unreachable_dsn_is_a_clear_error(tmp_path):
    with pytest.raises(pgrag.ConnectionFailed, match="cannot connect"):
        pgrag.connect(f"postgresql://nobody@/nodb?host={tmp_path}&connect_timeout=2")
    with pytest.raises(pgrag.ConfigError, match="not a PostgreSQL URI"):
        pgrag.connect("localhost:5432")


def test_dsn_errors_do_not_echo_passwords():
    with pytest.raises(pgrag.ConfigError) as info:
        pgrag.connect("host=db password=hunter2")
    assert "hunter2" not in str(info.value)
    with pytest.raises(pgrag.ConnectionFailed) as info:
        pgrag.connect("postgresql://me:hunter2@/nodb?host=/nonexistent&connect_timeout=2")
    assert "hunter2" not in str(info.value) and "***" in str(info.value)


ROOT = Path(__file__).resolve().parents[2]


def test_the_sql_surface_is_the_checked_in_one_and_the_sql_reference_lists_every_function(db):
    """sql/schema.sql is what a migrated database offers in schema pgrag (run
    `pgrag db schema > sql/schema.sql` after changing it), and the SQL
    reference (docs/sql.md) gives every function with its signature."""
    from pgrag import schema

    live = schema.surface(db.connector)
    assert live == (ROOT / "sql" / "schema.sql").read_text(encoding="utf-8")
    readme = (ROOT / "docs" / "sql.md").read_text(encoding="utf-8")
    functions = [line.removeprefix("-- function ") for line in live.splitlines() if line.startswith("-- function ")]
    assert functions and [f for f in functions if f"`{f}`" not in readme] == []
    # schema pgrag is the API: no helper left there (they live in pgrag_internal)
    api = [f for f in functions if f.startswith("pgrag.")]
    assert api and [f for f in api if f.startswith("pgrag._") or f"| `{f}` |" not in readme] == []


# Every function, table, view and type of schema pgrag with its description in
# the catalogue (what psql's \df+ and \d+ show), functions by their surface
# signature (pgrag db schema's, as docs/sql.md writes them).
CATALOGUE = """
SELECT 'pgrag.' || p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ') RETURNS '
       || pg_get_function_result(p.oid), obj_description(p.oid, 'pg_proc')
FROM pg_proc p WHERE p.pronamespace = 'pgrag'::regnamespace
UNION ALL
SELECT CASE c.relkind WHEN 'v' THEN 'view ' WHEN 'c' THEN 'type ' ELSE 'table ' END || 'pgrag.' || c.relname,
       CASE c.relkind WHEN 'c' THEN obj_description(c.reltype, 'pg_type') ELSE obj_description(c.oid, 'pg_class') END
FROM pg_class c WHERE c.relnamespace = 'pgrag'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'c')
"""
REFERENCE_ROW = re.compile(r"^\| `(pgrag\.[^`]+)` \| (.+) \|$", re.MULTILINE)


def catalogue(uri: str) -> dict[str, str | None]:
    with psycopg.connect(uri) as conn:
        return dict(conn.execute(CATALOGUE).fetchall())


def test_the_catalogue_describes_every_function_table_and_view_as_the_sql_reference_does(database_uri):
    """`\\df+ pgrag.retrieve` explains it: every function, table, view and type of
    schema pgrag has a description (sql/95_comments.sql), each function's with its
    arguments and errors, and its first line is the function's row in docs/sql.md's
    SQL reference, word for word: one source for both."""
    described = catalogue(database_uri)
    assert len(described) > 50
    assert sorted(name for name, text in described.items() if not (text or "").strip()) == []
    functions = {name: text for name, text in described.items() if name.startswith("pgrag.")}
    assert [f for f, text in functions.items() if "\nArguments: " not in text or "\nErrors: " not in text] == []
    rows = dict(REFERENCE_ROW.findall((ROOT / "docs" / "sql.md").read_text(encoding="utf-8")))
    assert sorted(rows) == sorted(functions)
    assert {f: what for f, what in rows.items() if functions[f].splitlines()[0] != what} == {}


def test_an_upgraded_database_gets_the_same_descriptions(pg_uri, database_uri):
    """The comments come with `pgrag db upgrade`, so a database upgraded from the
    first revision describes everything as a fresh one does."""
    from alembic import command
    from alembic.config import Config
    from sqlalchemy import create_engine

    from pgrag.db import sqlalchemy_url
    from tests.conftest import scratch_database

    with scratch_database(pg_uri, "pgrag_comments_") as uri:
        engine = create_engine(sqlalchemy_url(uri))
        cfg = Config()
        cfg.set_main_option("script_location", str(resource_dir("migrations")))
        with engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "0001")
        engine.dispose()
        assert all(text is None for text in catalogue(uri).values())   # 0001 describes nothing
        db = pgrag.connect(uri)
        db.upgrade()
        db.close()
        assert catalogue(uri) == catalogue(database_uri)
