"""A scripted fake of an OpenAI-compatible chat server, for exact tests of the
LLM loops. It speaks the real wire protocol over HTTP on 127.0.0.1 (the openai
client cannot tell it from vLLM); each request is answered by the script.

    with FakeLLM(lambda request: '{"triples": []}') as fake:
        settings = LLMSettings(base_url=fake.base_url, model="fake")
        ...
        fake.requests      # every request body received, in order

A script returns the reply text, or a ``Status(code, message)`` to answer with
an HTTP error (to exercise retries), or raises to drop the connection.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

from pgrag.bench.chat_server import ChatServer, LocalHTTPServer, Status

__all__ = ["FakeLLM", "RecordingProxy", "Script", "Status", "replies"]


Script = Callable[[dict[str, Any]], "str | Status"]


def replies(*answers: "str | Status") -> Script:
    """A script answering with the given replies in turn (the last one repeats)."""
    queue = list(answers)

    def script(_request: dict[str, Any]) -> "str | Status":
        return queue.pop(0) if len(queue) > 1 else queue[0]

    return script


class FakeLLM(ChatServer):
    """pgrag's scripted chat server (``pgrag.bench.chat_server``) under its test name:
    ``script`` answers each request; ``requests`` holds every body received."""

    def __init__(self, script: Script, *, model: str = "fake-model") -> None:
        super().__init__(script, model=model)

    @property
    def script(self) -> Script:
        return self.reply

    def __enter__(self) -> "FakeLLM":
        super().__enter__()
        return self


class RecordingProxy:
    """A pass-through HTTP proxy in front of a real OpenAI-compatible server that
    records every request body and every JSON reply, so that tests can hold the
    client's accounting against what the server itself reported.

        with RecordingProxy(real_base_url) as proxy:
            settings = LLMSettings(base_url=proxy.base_url, model=...)
            ...
            proxy.exchanges   # [(request body, reply body), ...] in order
    """

    def __init__(self, upstream_base_url: str) -> None:
        from urllib.parse import urlsplit

        upstream = urlsplit(upstream_base_url)
        self.exchanges: list[tuple[dict[str, Any], dict[str, Any]]] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _forward(self, method: str) -> None:
                import http.client

                body = self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
                conn = http.client.HTTPConnection(upstream.hostname, upstream.port, timeout=600)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                conn.request(method, self.path, body=body or None, headers=headers)
                reply = conn.getresponse()
                data = reply.read()
                if method == "POST":
                    try:
                        proxy.exchanges.append((json.loads(body or b"{}"), json.loads(data)))
                    except ValueError:
                        proxy.exchanges.append((json.loads(body or b"{}"), {"unparsed": data.decode(errors="replace")}))
                self.send_response(reply.status)
                for key, value in reply.getheaders():
                    if key.lower() not in ("transfer-encoding", "content-length", "connection"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                conn.close()

            def do_GET(self) -> None:
                self._forward("GET")

            def do_POST(self) -> None:
                self._forward("POST")

        self._server = LocalHTTPServer(Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def usage(self) -> tuple[int, int]:
        """(prompt, completion) tokens the server reported over every reply."""
        replies = [reply.get("usage") or {} for _, reply in self.exchanges]
        return sum(u.get("prompt_tokens", 0) for u in replies), sum(u.get("completion_tokens", 0) for u in replies)

    def __enter__(self) -> "RecordingProxy":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
