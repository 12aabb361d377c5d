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
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Status:
    code: int
    message: str = "scripted error"


Script = Callable[[dict[str, Any]], "str | Status"]


def replies(*answers: "str | Status") -> Script:
    """A script answering with the given replies in turn (the last one repeats)."""
    queue = list(answers)

    def script(_request: dict[str, Any]) -> "str | Status":
        return queue.pop(0) if len(queue) > 1 else queue[0]

    return script


class FakeLLM:
    def __init__(self, script: Script, *, model: str = "fake-model") -> None:
        self.script = script
        self.model = model
        self.requests: list[dict[str, Any]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def _send(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._send(200, {"object": "list", "data": [{"id": fake.model, "object": "model"}]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                fake.requests.append(body)
                if body.get("model") != fake.model:
                    self._send(404, {"error": {"message": f"model {body.get('model')} not found",
                                               "type": "invalid_request_error", "code": "model_not_found"}})
                    return
                answer = fake.script(body)
                if isinstance(answer, Status):
                    self._send(answer.code, {"error": {"message": answer.message, "type": "server_error"}})
                    return
                prompt = sum(len(m.get("content", "").split()) for m in body.get("messages", []))
                completion = len(answer.split())
                self._send(200, {
                    "id": f"chatcmpl-{len(fake.requests)}", "object": "chat.completion", "created": 0,
                    "model": fake.model,
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": answer}}],
                    "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                              "total_tokens": prompt + completion},
                })

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> "FakeLLM":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
