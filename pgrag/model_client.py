"""The client side of the model runtime: embeddings and spaCy parses over HTTP.

Where models run is one setting (config.model_runtime_setting):

- "" (auto): the shared runtime when its socket exists, else in this process;
- ``shared``: the shared runtime at its default socket, an error if it is down;
- ``unix:PATH``: the shared runtime at that socket;
- ``http(s)://...``: any OpenAI-compatible ``/v1/embeddings`` endpoint (text-
  embeddings-inference, Ollama, vLLM, OpenAI); spaCy then stays in this process;
- ``inprocess``: this process loads the models itself.

This module is light on purpose: a backend that embeds through the runtime
imports it (numpy; the standard library's http.client on its first call), never torch,
sentence-transformers or spaCy. The wire format is OpenAI's, vectors as base64
float32, so that they arrive bit for bit as the runtime computed them.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import contextvars
import functools
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

import numpy as np

from . import config
from .exceptions import ConfigError, EmbeddingMismatch, InputError, ModelRuntimeUnavailable

T = TypeVar("T")

if TYPE_CHECKING:
    import http.client

# Per request: OpenAI's limit on inputs; the runtime splits them into model batches.
MAX_INPUTS = 2048
# Per text: MiniLM reads its first 256 word pieces (a few thousand characters), so
# cutting a text here never changes its vector; it bounds what one request can cost.
MAX_CHARS = 100_000
CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 600.0   # a large ingest batch on a busy runtime; cancels do not wait for it

_DEFAULT_ALIASES = {"all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2"}


def model_key(name: str) -> str:
    """A model name as the runtime compares it: the default model's aliases as one."""
    return "all-minilm-l6-v2" if name.lower() in _DEFAULT_ALIASES else name


@dataclass(frozen=True)
class Endpoint:
    """Where a model runtime listens: a Unix socket (pgrag's own runtime) or a URL."""

    socket: Path | None = None
    url: str | None = None
    api_key: str | None = None

    @property
    def serves_nlp(self) -> bool:
        """Whether it parses with spaCy too (only pgrag's own runtime does)."""
        return self.socket is not None

    def describe(self) -> str:
        # absolute: a backend's relative default is its data directory's file
        return f"unix:{os.path.abspath(self.socket)}" if self.socket is not None else str(self.url)


def endpoint(setting: str | None = None) -> Endpoint | None:
    """The runtime this process uses now (None: models run in process)."""
    raw = config.model_runtime_setting() if setting is None else setting.strip()
    if raw == "inprocess":
        return None
    if raw in ("", "auto"):
        path = config.default_model_socket()
        return Endpoint(socket=path) if path.exists() else None
    if raw == "shared":
        return Endpoint(socket=config.default_model_socket())
    if raw.startswith("unix:"):
        return Endpoint(socket=Path(raw[len("unix:"):]).expanduser())
    if raw.startswith(("http://", "https://")):
        return Endpoint(url=raw.rstrip("/"), api_key=config.model_api_key())
    raise ConfigError(f"pgrag.model_runtime must be shared, inprocess, unix:PATH or an http(s) URL, not {raw!r}")


def describe_setting() -> dict[str, Any]:
    """What ``SELECT pgrag.model_runtime()`` and ``pgrag models status`` report of
    this process's choice (no secret)."""
    target = endpoint()
    return {"setting": config.model_runtime_setting() or "auto",
            "runtime": "inprocess" if target is None else target.describe()}


@functools.cache
def _unix_connection() -> type:
    """http.client's connection over a Unix socket. Built on first use: a backend
    whose calls need no model (bm25) does not import http.client, ssl and email."""
    import http.client

    class UnixConnection(http.client.HTTPConnection):
        def __init__(self, path: Path) -> None:
            super().__init__("localhost", timeout=CONNECT_TIMEOUT)
            self._path = path

        def connect(self) -> None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(CONNECT_TIMEOUT)
            try:
                sock.connect(str(self._path))
            except BaseException:
                sock.close()
                raise
            sock.settimeout(READ_TIMEOUT)
            self.sock = sock

    return UnixConnection


def __getattr__(name: str) -> Any:
    if name == "_UnixConnection":
        return _unix_connection()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _Unreachable(Exception):
    """Connecting failed (nothing was sent); the OSError is its __cause__."""


class Client:
    """Keep-alive connections to a runtime, one per concurrent caller (threads of
    a client; a call a cancel abandoned, still waiting in a backend)."""

    def __init__(self, target: Endpoint) -> None:
        self.target = target
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """The JSON reply of ``method path``; runtime errors as pgrag's exceptions."""
        payload = json.dumps(body).encode("utf-8") if body is not None else None
        headers = {"Content-Type": "application/json"}
        if self.target.api_key:
            headers["Authorization"] = f"Bearer {self.target.api_key}"
        began = _began.get()
        if began is not None and self.target.socket is not None:
            headers[BEGAN_HEADER] = repr(began)
        wait = _waiter_here()
        if wait is None:
            return self._request(method, path, payload, headers)
        return wait(lambda: self._request(method, path, payload, headers))

    def _request(self, method: str, path: str, payload: bytes | None, headers: dict[str, str]) -> dict[str, Any]:
        import http.client

        with self._lock:
            conn = self._idle.pop() if self._idle else None
        reused = conn is not None
        try:
            conn, status, data = self._send(conn, method, path, payload, headers)
        except _Unreachable as exc:
            raise self._unavailable(exc.__cause__ or exc, connecting=True) from None
        except (ConnectionError, http.client.HTTPException, OSError) as exc:
            if not reused:
                raise self._unavailable(exc) from None
            # A kept connection the runtime closed while idle (e.g. a restart):
            # embeddings are pure, so one fresh attempt is safe.
            try:
                conn, status, data = self._send(None, method, path, payload, headers)
            except _Unreachable as again:
                raise self._unavailable(again.__cause__ or again, connecting=True) from None
            except (ConnectionError, http.client.HTTPException, OSError) as again:
                raise self._unavailable(again) from None
        with self._lock:
            self._idle.append(conn)
        return _reply(self.target, status, data)

    def _send(self, conn: http.client.HTTPConnection | None, method: str, path: str,
              payload: bytes | None, headers: dict[str, str]) -> tuple[http.client.HTTPConnection, int, bytes]:
        if conn is None:
            conn = self._connect()
            try:
                conn.connect()
            except OSError as exc:
                conn.close()
                raise _Unreachable() from exc
        url = path if self.target.socket is not None else _url_path(self.target.url or "") + path
        try:
            conn.request(method, url, body=payload, headers=headers)
            response = conn.getresponse()
            return conn, response.status, response.read()
        except BaseException:
            conn.close()
            raise

    def _connect(self) -> http.client.HTTPConnection:
        import http.client

        if self.target.socket is not None:
            return _unix_connection()(self.target.socket)
        parts = urlsplit(self.target.url or "")
        cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        return cls(parts.netloc, timeout=READ_TIMEOUT)

    def close(self) -> None:
        with self._lock:
            for conn in self._idle:
                conn.close()
            self._idle.clear()

    def _unavailable(self, exc: BaseException, connecting: bool = False) -> ModelRuntimeUnavailable:
        where = self.target.describe()
        if connecting:
            hint = ("start it with `pgrag server start` (beside the embedded server) or "
                    f"`pgrag models serve --socket {os.path.abspath(self.target.socket)}`"
                    if self.target.socket is not None
                    else "check that the endpoint is up")
            return ModelRuntimeUnavailable(f"the model runtime at {where} is not running or not open to this OS user "
                                           f"({exc.__class__.__name__}: {getattr(exc, 'strerror', None) or exc}); "
                                           f"{hint}, or set pgrag.model_runtime = 'inprocess'")
        return ModelRuntimeUnavailable(f"the model runtime at {where} failed mid-call "
                                       f"({exc.__class__.__name__}: {exc}); nothing was written, retry once it is back")


def _url_path(url: str) -> str:
    path = urlsplit(url).path.rstrip("/")
    return path[: -len("/v1")] if path.endswith("/v1") else path


def _reply(target: Endpoint, status: int, data: bytes) -> dict[str, Any]:
    try:
        body = json.loads(data) if data else {}
    except ValueError:
        body = {}
    if status < 400 and isinstance(body, dict):
        return body
    error = body.get("error") if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else data[:200].decode("utf-8", "replace")
    code = error.get("code") if isinstance(error, dict) else None
    text = f"the model runtime at {target.describe()} refused the call ({status}): {message}"
    if target.api_key:
        text = text.replace(target.api_key, "***")
    if code == "model_not_found" or status == 404:
        raise EmbeddingMismatch(text)
    if 400 <= status < 500:
        raise InputError(text)
    raise ModelRuntimeUnavailable(text)


# When the request this context serves began (time.time()), or None outside one.
_began: contextvars.ContextVar[float | None] = contextvars.ContextVar("pgrag_request_began", default=None)
BEGAN_HEADER = "X-Pgrag-Request-Began"


@contextlib.contextmanager
def one_request() -> Iterator[None]:
    """Mark the runtime calls of the block as one request's, begun now. pgrag's
    runtime serves the texts of the request that began first first, so that a
    multi-hop question's second hop does not queue behind the questions that
    arrived while its first hop ran (pgrag.model_queue.Batcher). A block
    inside another keeps the outer request's start."""
    if _began.get() is not None:
        yield
        return
    token = _began.set(time.time())
    try:
        yield
    finally:
        _began.reset(token)


# (thread, wait): a waiter runs plpy, which only the thread that registered it may touch
_waiter: list[tuple[int, Callable[[Callable[[], Any]], Any]]] = []


@contextlib.contextmanager
def waiting(wait: Callable[[Callable[[], Any]], Any]) -> Iterator[None]:
    """Run every runtime call of the block, made by this thread, through ``wait``
    (a backend's SpiDatabase.wait: a statement_timeout or pg_cancel_backend ends
    the wait within its poll, however long the runtime takes)."""
    _waiter.append((threading.get_ident(), wait))
    try:
        yield
    finally:
        _waiter.pop()


def _waiter_here() -> Callable[[Callable[[], Any]], Any] | None:
    if _waiter and _waiter[-1][0] == threading.get_ident():
        return _waiter[-1][1]
    return None


def background(work: Callable[[], T]) -> Callable[[], T]:
    """Start ``work`` (calls to a runtime) in a thread now; the returned function
    gives its result, waiting through this thread's waiter (so a cancel still
    ends the wait) and raising what ``work`` raised. The runtime computes in its
    own process meanwhile: the caller's thread is free for work of its own."""
    done: dict[str, Any] = {}

    def run() -> None:
        try:
            done["value"] = work()
        except BaseException as exc:  # handed to the caller by result()
            done["error"] = exc

    # in this context: the thread's calls belong to the caller's request (one_request)
    context = contextvars.copy_context()
    thread = threading.Thread(target=context.run, args=(run,), name="pgrag-model-call", daemon=True)
    thread.start()

    def result() -> T:
        if thread.is_alive():
            wait = _waiter_here()
            if wait is None:
                thread.join()
            else:
                wait(thread.join)
        if "error" in done:
            raise done["error"]
        return done["value"]

    return result


_CLIENTS: dict[Endpoint, Client] = {}


def client(target: Endpoint) -> Client:
    """The process's connections to ``target`` (kept: a backend calls it per query)."""
    found = _CLIENTS.get(target)
    if found is None:
        found = _CLIENTS.setdefault(target, Client(target))
    return found


@atexit.register
def _close_all() -> None:
    for cached in list(_CLIENTS.values()):
        cached.close()


def health(target: Endpoint) -> dict[str, Any]:
    """The runtime's ``/health``: model, dimension, batches, queue."""
    return client(target).request("GET", "/health")


def resize_cache(target: Endpoint, size: int) -> dict[str, Any]:
    """Set pgrag's runtime's vector cache to at most ``size`` texts (0: empty and
    off); its cache figures before the change."""
    before = health(target).get("cache") or {}
    client(target).request("POST", "/pgrag/v1/cache", {"size": size})
    return before


class RemoteEmbedder:
    """An Embedder whose model runs in a runtime: the same vectors, no torch here."""

    def __init__(self, target: Endpoint, name: str) -> None:
        self.target, self.name = target, name
        self.dim = 0
        self.uncased = False
        if target.serves_nlp:
            served = health(target)
            if model_key(str(served.get("model"))) != model_key(name):
                raise EmbeddingMismatch(
                    f"the model runtime at {target.describe()} serves {served.get('model')!r}, not {name!r}: "
                    f"start one for {name!r} (pgrag models serve --model ...) or set pgrag.model_runtime = 'inprocess'")
            self.dim = int(served["dim"])
            self.uncased = bool(served.get("uncased", False))
        else:
            self.dim = len(self.encode(["dimension probe"])[0])

    def encode(self, texts: list[str], *, batch_size: int = 32) -> np.ndarray:
        out = [self._request(texts[i:i + MAX_INPUTS]) for i in range(0, len(texts), MAX_INPUTS)]
        if not out:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.concatenate(out)

    def _request(self, texts: list[str]) -> np.ndarray:
        body = {"model": self.name, "encoding_format": "base64", "input": [t[:MAX_CHARS] for t in texts]}
        reply = client(self.target).request("POST", "/v1/embeddings", body)
        rows = sorted(reply.get("data") or [], key=lambda d: d.get("index", 0))
        if len(rows) != len(texts):
            raise ModelRuntimeUnavailable(f"the model runtime at {self.target.describe()} returned "
                                          f"{len(rows)} vectors for {len(texts)} texts")
        vectors = np.stack([_vector(r["embedding"]) for r in rows])
        if self.dim and vectors.shape[1] != self.dim:
            raise EmbeddingMismatch(f"the model runtime at {self.target.describe()} returned "
                                    f"{vectors.shape[1]}-dimensional vectors for {self.name!r}, not {self.dim}")
        if not self.target.serves_nlp:   # an external endpoint may not normalise
            vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        return vectors


def _vector(value: Any) -> np.ndarray:
    if isinstance(value, str):
        return np.frombuffer(base64.b64decode(value), dtype="<f4").astype(np.float32)
    return np.asarray(value, dtype=np.float32)


def parse(target: Endpoint, texts: list[str], model: str, *, sentences: bool) -> list[dict[str, Any]]:
    """spaCy's sentences and entities of each text, from the runtime (pgrag.nlp's shape as JSON)."""
    out: list[dict[str, Any]] = []
    for i in range(0, len(texts), MAX_INPUTS):
        reply = client(target).request("POST", "/pgrag/v1/parse", {
            "model": model, "sentences": sentences, "input": texts[i:i + MAX_INPUTS]})
        out.extend(reply["data"])
    return out
