"""pgrag.bench.chat_server: a reply a script delays does not outlive the server,
and a client that went away is no traceback (formatting one parses source in
the request's thread: CPython 3.11's AST constructor fails when two threads
parse at once, gh-106905, and a late request thread did that during a
hypothesis test)."""

from __future__ import annotations

import json
import threading
import time
import urllib.request

import pytest

from pgrag.bench.chat_server import ChatServer


def test_a_delayed_reply_to_a_client_gone_ends_with_the_server_and_prints_nothing(capsys):
    started = threading.Event()

    def slow(_request: dict) -> str:
        started.set()
        time.sleep(1.0)
        return "late"

    before = set(threading.enumerate())
    with ChatServer(slow, model="m") as server:
        body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
        request = urllib.request.Request(server.base_url + "/chat/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        with pytest.raises(OSError):   # the client gives up before the reply (a timeout, a cancel)
            urllib.request.urlopen(request, timeout=0.2)
        assert started.wait(5)
    assert [t for t in threading.enumerate() if t not in before] == []   # the request's thread was joined
    assert capsys.readouterr().err == ""
