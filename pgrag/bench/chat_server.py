"""A scripted chat server on 127.0.0.1 that speaks the OpenAI chat-completions
wire protocol (the openai client cannot tell it from vLLM). Each request body is
answered by a function: the reply text, or a ``Status`` for an HTTP error.

The oracle reader (``pgrag.bench.oracle``) and the tests' scripted fake
(``tests/fake_llm.py``) both serve through it. Prompt and completion "tokens"
are words.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class LocalHTTPServer(ThreadingHTTPServer):
    """A thread per request, every one of them joined when the server closes:
    a reply a script delays (a slow LLM, for a timeout or a cancel) does not
    outlive the server. A client that went away before its reply (a cancelled
    call: the broken pipe is expected) is not reported with a traceback; other
    errors are. Formatting a traceback parses source (CPython 3.11's caret
    anchors), which a thread must not do while another parses (gh-106905)."""

    daemon_threads = False
    block_on_close = True

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(("127.0.0.1", 0), handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return
        super().handle_error(request, client_address)


@dataclass(frozen=True)
class Status:
    """An HTTP error reply (``type``: the OpenAI error type)."""

    code: int
    message: str = "scripted error"
    type: str = "server_error"


Reply = Callable[[dict[str, Any]], "str | Status"]


class ChatServer:
    """Serves ``reply`` for one model name until closed; use as a context manager.
    A request for another model gets the 404 an OpenAI-compatible server sends."""

    def __init__(self, reply: Reply, *, model: str) -> None:
        self.reply = reply
        self.model = model
        self.requests: list[dict[str, Any]] = []
        self._server = LocalHTTPServer(_handler(self))
        self._thread = threading.Thread(target=self._server.serve_forever, name="pgrag-chat-server", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """The status and JSON body that answer one chat-completions request."""
        self.requests.append(body)
        if body.get("model") != self.model:
            return 404, {"error": {"message": f"model {body.get('model')} not found",
                                   "type": "invalid_request_error", "code": "model_not_found"}}
        text = self.reply(body)
        if isinstance(text, Status):
            return text.code, {"error": {"message": text.message, "type": text.type}}
        prompt = sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))
        completion = len(text.split())
        return 200, {"id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion", "created": 0,
                     "model": self.model,
                     "choices": [{"index": 0, "finish_reason": "stop",
                                  "message": {"role": "assistant", "content": text}}],
                     "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                               "total_tokens": prompt + completion}}

    def __enter__(self) -> "ChatServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler(server: ChatServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:   # keep the caller's output clean
            pass

        def _send(self, code: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._send(200, {"object": "list", "data": [{"id": server.model, "object": "model"}]})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            self._send(*server.answer(body))

    return Handler
