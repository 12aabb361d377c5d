"""The processes pgrag starts and watches: is one alive, which one a pid file
names, start one detached, wait for it, stop it, keep one running.

Two long-lived processes use this: the embedded PostgreSQL (pgrag.server, whose
postmaster writes its own pid file and is started and stopped by pg_ctl) and the
model runtime (pgrag.model_service: its supervisor is started detached beside
the server and stopped with SIGTERM, then SIGKILL; the supervisor restarts the
runtime when it dies). They share the rules a stale pid file, a zombie and a
child that outlives its parent call for; each keeps what is its own.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process. A process killed with SIGKILL whose
    parent never reaps it (PID 1 in some containers) stays a zombie: psutil and
    ``kill(pid, 0)`` still see it, but it serves nothing."""
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def read_pid(path: Path) -> int | None:
    """The pid on the first line of the pid file ``path``; None when there is
    no such file or it names no pid."""
    try:
        return int(path.read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None


def exited(pid: int) -> bool:
    """Whether ``pid`` has exited, reaping it when it is this process's child
    (a child never reaped stays a zombie for as long as this process lives)."""
    try:
        return os.waitpid(pid, os.WNOHANG)[0] == pid
    except ChildProcessError:   # not our child: someone else reaps it
        return not alive(pid)


def spawn_detached(command: Sequence[str], log_file: Path, env: Mapping[str, str]) -> int:
    """Start ``command`` in a session of its own, stdin from /dev/null and its
    output appended to ``log_file``; its pid. It outlives this process."""
    # posix_spawn, not Popen: the child outlives this call (and this process),
    # and a Popen object collected while its child runs warns.
    with open(log_file, "ab") as log:
        return os.posix_spawn(command[0], list(command), dict(env), setsid=True, file_actions=[
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_DUP2, log.fileno(), 1), (os.POSIX_SPAWN_DUP2, log.fileno(), 2)])


def wait_ready(pid: int, ready: Callable[[], bool], wait: float, poll: float = 0.2) -> bool:
    """Poll ``ready`` until it says yes (True), ``pid`` exits or ``wait``
    seconds pass (False)."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and not exited(pid):
        if ready():
            return True
        time.sleep(poll)
    return False


def terminate(pid: int, wait: float) -> bool | None:
    """Send ``pid`` SIGTERM and wait up to ``wait`` seconds for it to exit
    (reaping it when it is our child); past that, SIGKILL its process group.
    True when it exited, False when it had to be killed, None when no such
    process was there to signal."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return None
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if exited(pid):
            return True
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    return False


def supervise(command: Sequence[str], *, name: str, restart_delay: float = 0.5) -> int:
    """Run ``command`` as a child and start it again whenever it dies (a crash,
    an out-of-memory kill), until this process gets SIGTERM / SIGINT, which it
    passes on. A child that dies within 10 s of its start makes the next wait
    longer (at most 30 s), so one that cannot start does not spin. ``name``
    says which child in the restart message."""
    stopping = False
    child: subprocess.Popen[bytes] | None = None

    def stop(signum: int, frame: Any) -> None:
        nonlocal stopping
        stopping = True
        if child is not None and child.poll() is None:
            child.terminate()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    delay = restart_delay
    while not stopping:
        started = time.monotonic()
        child = subprocess.Popen(list(command))
        code = child.wait()
        if stopping:
            break
        quick = time.monotonic() - started < 10
        delay = min(30.0, delay * 2) if quick else restart_delay
        print(f"{name} (pid {child.pid}) exited with {code}; starting it again in {delay:.1f} s",
              file=sys.stderr, flush=True)
        time.sleep(delay)
    return 0
