"""Leaks fail the test that made them (a pytest plugin, loaded by conftest.py).

A thread that a test's body started and that is still running once the test's
fixtures are torn down fails the test at teardown: pgrag starts no thread that
outlives the call that started it, and a stray thread is where shared
interpreter state gets trampled (CPython 3.11's AST constructor counts its
recursion in one global: a thread that parses while hypothesis parses a test's
source fails the hypothesis test with "AST constructor recursion depth
mismatch", gh-106905). An unclosed file is the other leak: pyproject.toml's
filterwarnings turns its ResourceWarning into an error, which pytest reports on
the test during which the file was collected.

Threads started while fixtures are set up are not checked: a module- or
session-scoped fixture may own one for longer than the test that built it.
"""

from __future__ import annotations

import threading
import time

import pytest

# A thread that is finishing (a server thread returning from its last request)
# gets this long after teardown before it counts as left running.
GRACE_SECONDS = 10.0

_started = pytest.StashKey[list[threading.Thread]]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):  # type: ignore[no-untyped-def]
    before = set(threading.enumerate())
    try:
        return (yield)
    finally:
        item.stash[_started] = [t for t in threading.enumerate() if t not in before]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):  # type: ignore[no-untyped-def]
    result = yield
    started = item.stash.get(_started, [])
    deadline = time.monotonic() + GRACE_SECONDS
    for thread in started:
        thread.join(max(0.0, deadline - time.monotonic()))
    left = [t for t in started if t.is_alive()]
    if left:
        names = ", ".join(f"{t.name} ({type(t).__module__}.{type(t).__qualname__}, target "
                          f"{getattr(getattr(t, '_target', None), '__qualname__', '?')})" for t in left)
        pytest.fail(f"the test left {len(left)} thread(s) running after its teardown: {names}", pytrace=False)
    return result
