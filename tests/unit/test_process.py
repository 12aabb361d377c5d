"""pgrag.process on real child processes (``sleep``): pid files, liveness,
a detached start, waiting for readiness, SIGTERM then SIGKILL."""

from __future__ import annotations

import os
import shutil
import sys

from pgrag import process


def test_read_pid_takes_the_first_line_and_refuses_the_rest(tmp_path):
    path = tmp_path / "x.pid"
    assert process.read_pid(path) is None                  # no file
    path.write_text("123\n/data\n5432\n")
    assert process.read_pid(path) == 123
    path.write_text("")
    assert process.read_pid(path) is None
    path.write_text("not a pid\n")
    assert process.read_pid(path) is None


def test_a_detached_child_is_waited_for_then_terminated_and_reaped(tmp_path):
    log = tmp_path / "child.log"
    pid = process.spawn_detached([shutil.which("sleep") or "/bin/sleep", "60"], log, dict(os.environ))
    assert process.alive(pid) and not process.exited(pid)
    assert process.wait_ready(pid, lambda: True, wait=5) is True
    assert process.terminate(pid, wait=5) is True           # sleep dies on SIGTERM
    assert not process.alive(pid)
    assert process.terminate(pid, wait=1) is None           # gone: nothing to signal


def test_a_child_that_ignores_sigterm_is_killed(tmp_path):
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(60)"
    log = tmp_path / "child.log"
    pid = process.spawn_detached([sys.executable, "-c", code], log, dict(os.environ))
    assert process.wait_ready(pid, lambda: log.read_text().startswith("up"), wait=30)
    assert process.terminate(pid, wait=0.5) is False        # killed, not exited in time
    process.wait_ready(pid, lambda: False, wait=5)           # returns once it has exited (reaped)
    assert not process.alive(pid)


def test_wait_ready_gives_up_when_the_child_exits(tmp_path):
    pid = process.spawn_detached([shutil.which("true") or "/bin/true"], tmp_path / "log", dict(os.environ))
    assert process.wait_ready(pid, lambda: False, wait=30) is False
    assert not process.alive(pid)
