"""A pgrag command that listens (``pgrag ui``, ``pgrag mcp --transport http``), run
in a process of its own for a test, from this checkout."""

from __future__ import annotations

import contextlib
import os
import signal
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
        if proc.stdout is not None:
            proc.stdout.close()


def start_runtime(socket: Path, owner: str, *args: str, supervised: bool = False) -> subprocess.Popen:
    """pgrag's model runtime on ``socket`` for the OS user ``owner`` (under its
    supervisor, ``pgrag models serve``, when ``supervised``), once it answers."""
    if supervised:
        command = [sys.executable, "-m", "pgrag.cli", "models", "serve", "--socket", str(socket), "--owner", owner,
                   *args]
    else:
        command = [sys.executable, "-m", "pgrag.model_service", "--socket", str(socket), "--owner", owner, *args]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        wait_healthy(socket, proc)
    except BaseException:
        # a runtime that never answered is not left running (nor its pipe open)
        # to fail some later test with its ResourceWarning
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stderr.close()
        raise
    return proc


def wait_healthy(socket: Path, proc: subprocess.Popen | None = None, timeout: float = 180) -> dict:
    """The runtime's /health once it answers on ``socket`` (an exit of ``proc`` fails with its output)."""
    import pgrag
    from pgrag import model_client

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the runtime exited: {proc.stderr.read().decode()[-2000:]}")
        try:
            return model_client.health(model_client.Endpoint(socket=socket))
        except pgrag.PgragError:
            time.sleep(0.2)
    raise AssertionError(f"no runtime answered on {socket}")


def stop_runtime(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=30)
    proc.stderr.close()
