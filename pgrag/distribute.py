"""pgrag on Citus: distribute a migrated database (``pgrag db distribute``).

Run once on the coordinator after ``pgrag db upgrade`` and after the workers are
added (``citus_add_node``). The layout and its reasons are in sql/distribute.sql
and docs/SCALING.md. ``pgrag.schema.upgrade`` calls :func:`after_upgrade`, so that a
distributed database stays distributed when later migrations add tables.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import sqlscript
from .queries import query
from .resources import sql_file

if TYPE_CHECKING:
    from .context import QueryRunner


def has_citus(conn: Any) -> bool:
    return bool(conn.execute(query("citus_present")).fetchone()[0])


def is_distributed(conn: Any) -> bool:
    """Whether pgrag's tables are distributed (the citus extension exists and
    pgrag.document is in its metadata)."""
    return has_citus(conn) and bool(conn.execute(query("pgrag_distributed")).fetchone()[0])


def prepare(conn: Any) -> None:
    """Before migrating a distributed database, in the same transaction: shard
    DDL over one connection per node (so that foreign keys and distributing new
    tables may follow other DDL), and pgrag.distribute installed."""
    conn.execute(query("citus_sequential"))
    sqlscript.run(conn, sql_file("distribute.sql"))


def create_table(conn: Any, statement: str) -> None:
    """A migration's CREATE TABLE on a distributed database: created without DDL
    propagation (Citus refuses a plain table with foreign keys to distributed
    ones), then distributed at once like the others."""
    conn.execute(query("citus_ddl_propagation"), {"on": "off"})
    conn.execute(statement)
    conn.execute(query("citus_ddl_propagation"), {"on": "on"})
    conn.execute(query("distribute"), {"shard_count": None}).fetchall()


def run_migration(conn: Any, script: str) -> int:
    """Run a migration's SQL file. On a database distributed by Citus (``pgrag
    db distribute``) each ``CREATE TABLE`` runs without DDL propagation, so that
    its inline foreign keys to distributed tables are accepted, and the new table
    is distributed right after it (``create_table`` re-creates those foreign keys
    on the shards); every other statement runs as on a single PostgreSQL."""
    distributed = is_distributed(conn)
    parts = sqlscript.statements(script)
    for statement in parts:
        if distributed and sqlscript.creates_table(statement):
            create_table(conn, statement)
        else:
            conn.execute(statement)
    return len(parts)


def _install_and_run(conn: Any, shard_count: int | None) -> list[tuple[str, str, int | None, int]]:
    sqlscript.run(conn, sql_file("distribute.sql"))
    return [tuple(r) for r in conn.execute(query("distribute"), {"shard_count": shard_count}).fetchall()]


def distribute(db: "QueryRunner", shard_count: int | None = None) -> list[tuple[str, str, int | None, int]]:
    """Make pgrag.corpus and pgrag.corpus_acl reference tables and distribute
    every other corpus-scoped table by corpus_id, co-located (idempotent).
    Returns (table, kind, colocation id, shard count) for every pgrag table."""
    from . import exceptions as exc

    with db.transaction() as conn:
        if not has_citus(conn):
            raise exc.PgragError(
                "the citus extension is not installed in this database: with shared_preload_libraries = 'citus' "
                "on every node, run CREATE EXTENSION citus and citus_add_node for each worker first")
        return _install_and_run(conn, shard_count)


def after_upgrade(conn: Any) -> None:
    """Inside ``pgrag.schema.upgrade``'s transaction: distribute tables that new
    migrations created, when the database is distributed."""
    if is_distributed(conn):
        _install_and_run(conn, None)


def layout(db: "QueryRunner") -> list[tuple[str, str, int | None, int]]:
    return [tuple(r) for r in db.fetchall("distribution")]


def placement(db: "QueryRunner", corpus: str) -> list[tuple[str, int, str, int]]:
    """(table, shard id, node, port) of a corpus's shard group."""
    return [tuple(r) for r in db.fetchall("corpus_placement", {"corpus": corpus})]
