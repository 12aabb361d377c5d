"""The managed tier: servers shaped like a managed PostgreSQL service.

``managed_admin`` is a superuser's URI on each server the tier runs on (the
session's embedded server, and the oldest supported PostgreSQL where it is
installed); ``owned_database`` makes what a service's console makes: a role
that is not a superuser, a database it owns, and pgvector created there by the
administrator. Everything else a test does as that role."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlencode

import psycopg
import pytest
from psycopg import sql


@dataclass(frozen=True)
class OwnedDatabase:
    uri: str         # the owner's URI
    database: str
    role: str


def role_uri(admin_uri: str, *, user: str, password: str, dbname: str) -> str:
    """``admin_uri``'s server, as another role and database (every parameter in
    the query string: a socket folder needs no quoting rules of its own)."""
    params = psycopg.conninfo.conninfo_to_dict(admin_uri)
    params.update(user=user, password=password, dbname=dbname)
    return "postgresql:///?" + urlencode(sorted((k, str(v)) for k, v in params.items() if v is not None))


@contextlib.contextmanager
def owned_database(admin_uri: str, *, vector: bool) -> Iterator[OwnedDatabase]:
    """A NOSUPERUSER role, the database it owns (pgvector created there by the
    superuser when ``vector``), dropped on exit."""
    suffix = uuid.uuid4().hex[:10]
    role, database, password = f"pgrag_app_{suffix}", f"pgrag_appdb_{suffix}", uuid.uuid4().hex
    with psycopg.connect(admin_uri, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD {}").format(
            sql.Identifier(role), sql.Literal(password)))
        conn.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(database), sql.Identifier(role)))
    admin_there = role_uri(admin_uri, user=psycopg.conninfo.conninfo_to_dict(admin_uri).get("user") or "postgres",
                           password=psycopg.conninfo.conninfo_to_dict(admin_uri).get("password") or "",
                           dbname=database)
    try:
        if vector:
            with psycopg.connect(admin_there, autocommit=True) as conn:
                conn.execute("CREATE EXTENSION vector")
        yield OwnedDatabase(uri=role_uri(admin_uri, user=role, password=password, dbname=database),
                            database=database, role=role)
    finally:
        with psycopg.connect(admin_uri, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database)))
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


@pytest.fixture(scope="module", params=["embedded"])
def managed_admin(request: pytest.FixtureRequest) -> str:
    """A superuser's URI on each server of the tier."""
    return request.getfixturevalue("pg_uri")
