"""The schema: migrations to head, the SQL functions, and the in-server runtime.

``upgrade`` runs the Alembic migrations (``migrations/``), then re-applies the
SQL files ``sql/NN_topic.sql`` in the order of their names (``upgrade_files``):
the functions by topic, the in-server runtime (step 80: PL/Python where the
server has it, else stand-ins that say what to do), its SQL entry points, and
last the catalogue's descriptions of schema pgrag (``sql/95_comments.sql``).
A role that cannot migrate gets ``check_schema`` instead: a clear
``SchemaOutdated`` unless the schema is already at head.
"""

from __future__ import annotations

from typing import Any

import psycopg
from alembic import command
from alembic.config import Config

from . import distribute as citus
from . import exceptions as exc
from . import sqlscript
from .db import Connector, translated
from .queries import query
from .resources import resource_dir, sql_file

MIN_SERVER_VERSION = 160000  # the oldest tested (tests/managed: PostgreSQL 16 with pgvector 0.6)
MIGRATION_LOCK = 7_414_247_100  # advisory lock key: one migrator at a time
# Step 80 of the upgrade files has two alternatives; _install_runtime picks one.
RUNTIME_PLPYTHON = "80_runtime_plpython.sql"
RUNTIME_MISSING = "80_runtime_missing.sql"


def check_server(db: Connector) -> None:
    """Fail early, with a clear message, on a server pgrag cannot use."""
    version, encoding, available, created, may_create, database, role = db.fetch_row("server_facts")
    if not available:
        raise exc.ExtensionMissing(
            "the pgvector extension ('vector') is not installed on this PostgreSQL server; "
            "install pgvector (see docker/README.md; managed services offer it), "
            "or use the embedded server (unset PGRAG_DSN)")
    if not created and not may_create:
        raise exc.ExtensionMissing(
            f"pgvector is installed on the server but not created in database {database!r}, and role "
            f"{role!r} may not create it: ask an administrator to run CREATE EXTENSION vector; "
            f"in {database!r} (docs/managed.md), then connect again")
    if int(version) < MIN_SERVER_VERSION:
        raise exc.UnsupportedServer(
            f"PostgreSQL {int(version) // 10000} is too old: pgrag needs PostgreSQL 16 or newer "
            "(docs/sql.md, Supported servers)")
    if encoding != "UTF8":
        raise exc.UnsupportedServer(f"database encoding is {encoding}; pgrag needs a UTF8 database")


def _alembic() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(resource_dir("migrations")))
    return cfg


def upgrade_files() -> list[str]:
    """The SQL files re-applied after the migrations, in the order they run: every
    ``sql/NN_topic.sql``, by name. (The other files of sql/ are never applied by
    an upgrade: ``queries_*.sql`` are named statements, ``distribute.sql`` is
    ``pgrag db distribute``'s, ``schema.sql`` a listing for review.)"""
    return sorted(p.name for p in resource_dir("sql").glob("[0-9][0-9]_*.sql"))


def upgrade(db: Connector) -> None:
    """Bring the schema to head (idempotent; safe to run concurrently), then
    re-apply the SQL function definitions."""
    check_server(db)
    cfg = _alembic()
    with translated(), db.engine.begin() as sa_conn:
        raw = sa_conn.connection.driver_connection
        assert isinstance(raw, psycopg.Connection)
        raw.execute(query("migration_lock"), {"key": MIGRATION_LOCK})
        # On Citus (after `pgrag db distribute`) the same migrations run, then
        # tables they added are distributed like the others (pgrag.distribute).
        distributed = citus.is_distributed(raw)
        if distributed:
            citus.prepare(raw)
        cfg.attributes["connection"] = sa_conn
        command.upgrade(cfg, "head")
        for name in upgrade_files():
            if name == RUNTIME_PLPYTHON:
                _install_runtime(raw)
            elif name != RUNTIME_MISSING:
                sqlscript.run(raw, sql_file(name))  # no parameters: % stays literal
        if distributed:
            citus.after_upgrade(raw)
    db.reset()


def runtime(db: Connector) -> tuple[str | None, list[str]]:
    """The in-server runtime's language ('plpython3u', or None where the server has
    none) and the paths its pgrag is imported from (see sql/80_runtime_plpython.sql)."""
    language, path = db.fetch_row("runtime_facts")
    return language, list(path or [])


def can_migrate(db: Connector) -> bool:
    """Whether the connected role may run migrations: it owns schema pgrag
    (or there is none yet, so it would create it)."""
    _exists, may = db.fetch_row("schema_access")
    return bool(may)


def check_schema(db: Connector) -> None:
    """Raise ``SchemaOutdated`` unless the schema is at this pgrag's head
    revision (the check for roles that read but cannot migrate)."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(_alembic()).get_current_head()
    exists, _may = db.fetch_row("schema_access")
    current = db.fetchone("schema_revision") if exists else None
    if current is None or current[0] != head:
        found = f"at revision {current[0]}" if current else "missing"
        raise exc.SchemaOutdated(
            f"the pgrag schema is {found}, this pgrag needs {head}: "
            "run `pgrag db upgrade` as the role that owns schema pgrag")


SURFACE_HEADER = """\
-- The SQL surface at the latest migration, one object a line: schema pgrag (the
-- API) and schema pgrag_internal (the helpers behind it, not granted to PUBLIC);
-- functions with their arguments and results, then tables, views and types.
-- `pgrag db schema > sql/schema.sql` writes it; tests/migration/test_migrations.py
-- checks it against a migrated database, so every change to the surface shows in
-- review. README "SQL reference" says which functions are the stable API.
"""


def surface(db: Connector) -> str:
    """The SQL surface of schemas pgrag and pgrag_internal (the text of sql/schema.sql)."""
    return SURFACE_HEADER + "".join(f"-- {line}\n" for (line,) in db.fetchall("schema_surface"))


def _install_runtime(conn: Any) -> None:
    """Step 80 of the upgrade: the in-server runtime (PL/Python) where the server
    has it and this role may create it, else the stand-ins that say what to do."""
    from .config import server_python_path

    installed = False
    if conn.execute(query("has_plpython")).fetchone() == (True,):
        try:
            with conn.transaction():   # a savepoint: a refusal leaves the rest of the upgrade intact
                sqlscript.run(conn, sql_file(RUNTIME_PLPYTHON))
                conn.execute(query("record_python_path"), {"paths": server_python_path()})
            installed = True
        except psycopg.errors.InsufficientPrivilege:
            installed = False   # plpython3u is untrusted: only a superuser creates its functions
    if not installed:
        sqlscript.run(conn, sql_file(RUNTIME_MISSING))
