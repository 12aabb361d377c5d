"""``pgrag db`` (the schema) and ``pgrag roles`` (who may read or write which
corpus): administering the database."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from .common import PgragGroup, dsn_option, echo_json, json_option, open_database


@click.group(cls=PgragGroup)
def db() -> None:
    """Database schema administration."""


@db.command("upgrade")
@dsn_option
def db_upgrade(dsn: str | None) -> None:
    """Bring the schema to the latest migration (idempotent)."""
    database = open_database(dsn)
    click.echo(f"schema at head: {database!r}")
    runtime, path = database.runtime()
    click.echo(f"in-server runtime: {runtime}, pgrag imported from {', '.join(path) or 'the server Python'}"
               if runtime else "in-server runtime: none (no plpython3u here): pgrag.retrieve/answer/index raise "
                               "PR003; the functions that take a vector work")


@db.command("distribute")
@click.option("--shard-count", type=click.IntRange(1, 10000), default=None,
              help="Shards per distributed table (default: Citus's citus.shard_count, 32).")
@dsn_option
@json_option
def db_distribute(shard_count: int | None, dsn: str | None, as_json: bool) -> None:
    """On a Citus coordinator: make corpus and corpus_acl reference tables and
    distribute every other table by corpus_id, co-located (idempotent)."""
    from .. import distribute

    rows = distribute.distribute(open_database(dsn), shard_count=shard_count)
    if as_json:
        echo_json([dict(zip(("table", "kind", "colocation_id", "shards"), r)) for r in rows], indent=2)
        return
    for table, kind, colocation, shards in rows:
        click.echo(f"pgrag.{table:<18} {kind:<26} colocation {colocation if colocation is not None else '-':<4} "
                   f"shards {shards}")


@db.command("schema")
@dsn_option
def db_schema(dsn: str | None) -> None:
    """Print the SQL surface of schema pgrag: every function with its signature,
    every table, view and type with its columns (as sql/schema.sql holds it)."""
    from .. import schema

    click.echo(schema.surface(open_database(dsn).connector), nl=False)


@db.command("migrations-path")
def db_migrations_path() -> None:
    """Print the folder holding the Alembic migrations."""
    from ..resources import resource_dir

    click.echo(resource_dir("migrations"))


# -- roles and tenant isolation ----------------------------------------------

@click.group(cls=PgragGroup)
def roles() -> None:
    """Database roles for applications, and row-level security by corpus.

    Roles are created by an administrator (CREATE ROLE app_ro LOGIN ...); these
    commands, run as the schema owner, grant them pgrag's privileges."""


def _role_command(name: str, help_text: str, action: Callable[[Any, str], Any], done: str) -> None:
    @roles.command(name, help=help_text)
    @click.argument("role")
    @dsn_option
    def command(role: str, dsn: str | None) -> None:
        action(open_database(dsn), role)
        click.echo(done.format(role=role))


_role_command("grant-reader", "Let ROLE read the tables and call the retrieval functions (no writes).",
              lambda db, role: db.grant_reader(role), "{role}: reader")
_role_command("grant-writer", "Let ROLE ingest and delete documents too (reader + writes).",
              lambda db, role: db.grant_writer(role), "{role}: writer")
_role_command("revoke", "Take back every pgrag privilege and corpus grant of ROLE.",
              lambda db, role: db.revoke_role(role), "{role}: revoked")


@roles.command("grant-corpus")
@click.argument("role")
@click.argument("corpus")
@dsn_option
def roles_grant_corpus(role: str, corpus: str, dsn: str | None) -> None:
    """Under tenant isolation, let ROLE (and its members) see CORPUS."""
    open_database(dsn).grant_corpus(role, corpus)
    click.echo(f"{role}: may see {corpus}")


@roles.command("revoke-corpus")
@click.argument("role")
@click.argument("corpus")
@dsn_option
def roles_revoke_corpus(role: str, corpus: str, dsn: str | None) -> None:
    """Under tenant isolation, hide CORPUS from ROLE again."""
    open_database(dsn).revoke_corpus(role, corpus)
    click.echo(f"{role}: no longer sees {corpus}")


@roles.command("isolation")
@click.argument("state", type=click.Choice(["on", "off"]))
@dsn_option
def roles_isolation(state: str, dsn: str | None) -> None:
    """Turn row-level security by corpus on or off for every pgrag table."""
    database = open_database(dsn)
    n = database.enable_tenant_isolation() if state == "on" else database.disable_tenant_isolation()
    click.echo(f"tenant isolation {state} ({n} tables)")


@roles.command("list")
@dsn_option
@json_option
def roles_list(dsn: str | None, as_json: bool) -> None:
    """The corpus access list: which role may see which corpus under isolation."""
    rows = open_database(dsn).corpus_access()
    if as_json:
        echo_json([{"corpus": c, "role": r} for c, r in rows], indent=2)
    else:
        for corpus, role in rows:
            click.echo(f"{corpus}\t{role}")
