"""A request's start travels with its runtime calls (pgrag.model_client.one_request),
so that pgrag's runtime can serve the request that began first first. A Unix
socket server that records the header stands in for the runtime's HTTP side."""

from __future__ import annotations

import contextlib
import http.server
import socketserver
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

from pgrag import model_client
from pgrag.model_service import _began


class Recording(http.server.BaseHTTPRequestHandler):
    seen: list[str | None]

    def do_GET(self) -> None:
        self.seen.append(self.headers.get(model_client.BEGAN_HEADER))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def address_string(self) -> str:   # a Unix socket's peer has no address
        return "unix"

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def recording(path: Path) -> Iterator[list[str | None]]:
    seen: list[str | None] = []
    handler = type("Handler", (Recording,), {"seen": seen})
    with socketserver.ThreadingUnixStreamServer(str(path), handler) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield seen
        finally:
            server.shutdown()


def test_calls_in_one_request_carry_when_it_began(tmp_path):
    path = tmp_path / "runtime.sock"
    with recording(path) as seen:
        runtime = model_client.Client(model_client.Endpoint(socket=path))
        runtime.request("GET", "/health")
        with model_client.one_request():
            began = model_client._began.get()
            runtime.request("GET", "/health")
            with model_client.one_request():   # a request inside another keeps the outer start
                runtime.request("GET", "/health")
            model_client.background(lambda: runtime.request("GET", "/health"))()
        runtime.request("GET", "/health")
        runtime.close()
    assert began is not None
    assert seen == [None, repr(began), repr(began), repr(began), None]


def test_the_runtime_reads_a_start_only_when_it_is_a_finite_number():
    def said(value: str | None) -> float | None:
        headers = {} if value is None else {model_client.BEGAN_HEADER: value}
        return _began(SimpleNamespace(headers=headers))

    assert said("1733480000.25") == 1733480000.25
    assert [said(v) for v in (None, "", "soon", "nan", "inf")] == [None] * 5
