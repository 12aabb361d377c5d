"""A pgrag command that listens (``pgrag ui``, ``pgrag mcp --transport http``), run
in a process of its own for a test, from this checkout."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[1]


def child_env() -> dict[str, str]:
    """This process's environment (the session's PGRAG_GRAPH_DIR included), with
    this checkout first on the child's path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def as_role(uri: str, role: str) -> str:
    """``uri`` with ``role`` as its user and no password."""
    parts = urlsplit(uri)
    return urlunsplit(parts._replace(netloc=f"{role}:@{parts.netloc.rpartition('@')[2]}"))


@contextlib.contextmanager
def listening(*args: str, port: int, timeout: float = 120.0) -> Iterator[None]:
    """``python -m pgrag ARGS`` until the block ends, once it accepts connections
    on ``port`` (an early exit fails with the process's output)."""
    proc = subprocess.Popen([sys.executable, "-m", "pgrag", *args], env=child_env(), cwd=str(ROOT),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + timeout
        while True:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            assert time.monotonic() < deadline, f"pgrag {' '.join(args[:1])} did not listen on {port}"
            time.sleep(0.2)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
