"""The model runtime: one process that holds the models for a whole machine.

Every backend and client that embeds a text or parses one with spaCy can send it
here instead of loading torch and the model itself (a few hundred MB and ~5 s per
process). A free worker takes the texts of the request that began first
(pgrag.model_queue); on torch, requests arriving together share a model batch
(a question alone costs MiniLM about 8.5 ms on one thread, each of eight in a
batch 4.5 ms). The runtime runs the model on ONNX Runtime where it can
(pgrag.embed, ``PGRAG_EMBEDDING_BACKEND``).

It speaks OpenAI's ``/v1/embeddings`` (so pgrag.model_client talks to any such
endpoint the same way), plus pgrag's ``/pgrag/v1/parse`` (spaCy sentences and
entities) and ``/health``. It listens on a Unix socket created 0600 (0660 with
a group), never on the network. Served by uvicorn + starlette; this module holds
the routes and the process, pgrag.model_queue the order of the work.

``serve`` runs it in this process; ``supervise`` (``pgrag models serve``) runs it
as a child and starts it again when it dies.
"""

from __future__ import annotations

import base64
import contextlib
import grp
import logging
import math
import os
import pwd
import signal
import socket
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from . import config, process
from .model_client import BEGAN_HEADER, MAX_CHARS, MAX_INPUTS, model_key
from .model_queue import Batcher, Stats, VectorCache

log = logging.getLogger("pgrag.models")

MAX_BODY = 64 << 20          # bytes per request: a large ingest batch of documents
MAX_PARSE_CHARS = 2_000_000  # per text for spaCy (pgrag.text cuts paragraphs at 100k)


DEFAULT_TORCH_WINDOW = 0.002   # seconds a text waits for company when the model runs on torch


class Models:
    """The models the runtime serves: one embedding model, spaCy pipelines on demand."""

    def __init__(self, model: str, *, window: float | None, max_batch: int, workers: int | None = None) -> None:
        from .embed import loaded_embedder

        # On ONNX Runtime, ``workers`` calls run at once, each on one thread (one
        # per core by default): a call of a few texts spreads badly over
        # intra-op threads, and spaCy's parses run beside the embeddings. torch
        # spreads one call over the cores itself (config.torch_threads), so on
        # torch one call runs at a time.
        wanted = workers or _cores()
        self.embedder = loaded_embedder(model, threads=1 if wanted > 1 else None)
        onnx = getattr(self.embedder, "backend", "torch") == "onnx"
        self.workers = wanted if onnx else 1
        if onnx:
            _spacy_without_torch()
        if window is None:
            # On ONNX Runtime a text costs the same alone or in a batch (MiniLM, one
            # thread: 4.3 ms a second-hop text in calls of 4 to 64), so waiting for
            # company only adds latency: tigrag's single-client p50 117 -> 107 ms,
            # 8 clients' throughput equal (docs/SCALING.md). On torch a call's own
            # overhead is what batching saves.
            window = 0.0 if onnx else DEFAULT_TORCH_WINDOW
        self.name = model
        self.stats = Stats()
        self.executor = ThreadPoolExecutor(max_workers=self.workers + (1 if self.workers > 1 else 0),
                                           thread_name_prefix="pgrag-model")
        self.embeddings = Batcher(self._encode, self.executor, self.stats, window=window, max_batch=max_batch,
                                  workers=self.workers, mix=not onnx)
        self.parsers: dict[tuple[str, bool], Batcher] = {}
        self.window, self.max_batch = window, max_batch
        self.cache = VectorCache(config.embedding_cache_size())

    async def embed(self, texts: list[str], began: float | None = None) -> list[Any]:
        """The vectors of ``texts``: from the cache where it holds them, the rest
        from the model in one batch (``began``: Batcher.run)."""
        out = [self.cache.get(t) for t in texts]
        missing = [i for i, v in enumerate(out) if v is None]
        self.stats.cached += len(texts) - len(missing)
        if missing:
            for i, vector in zip(missing, await self.embeddings.run([texts[i] for i in missing], began)):
                out[i] = vector
                self.cache.put(texts[i], vector)
        return out

    def _encode(self, texts: list[str]) -> list[Any]:
        return list(self.embedder.encode(texts))   # in the embedder's sub-batches, as in process

    def parser(self, model: str, sentences: bool) -> Batcher:
        key = (model, sentences)
        if key not in self.parsers:
            from . import nlp

            def work(texts: list[str]) -> list[Any]:
                return nlp.parse_here(texts, model, sentences=sentences)

            # one parse at a time: a spaCy pipeline is not made to be shared by threads
            self.parsers[key] = Batcher(work, self.executor, self.stats, window=self.window, max_batch=self.max_batch)
        return self.parsers[key]

    def health(self) -> dict[str, Any]:
        s = self.stats
        return {"status": "ok", "model": self.name, "dim": self.embedder.dim, "uncased": self.embedder.uncased,
                "backend": getattr(self.embedder, "backend", "torch"),
                "pid": os.getpid(), "threads": getattr(self.embedder, "threads", config.torch_threads()),
                "workers": self.workers, "uptime_s": round(time.time() - s.started, 1),
                "requests": s.requests, "dated_requests": s.dated, "texts": s.texts, "batches": s.batches,
                "largest_batch": s.largest_batch,
                "queue": s.queued, "errors": s.errors, "window_ms": self.window * 1000, "max_batch": self.max_batch,
                "cache": {"size": self.cache.size, "held": len(self.cache.items), "hits": s.cached},
                "spacy_models": sorted({m for m, _ in self.parsers})}


def _error(status: int, message: str, code: str | None = None) -> Any:
    from starlette.responses import JSONResponse

    return JSONResponse({"error": {"message": message, "type": "invalid_request_error", "code": code}},
                        status_code=status)


async def _body(request: Any) -> dict[str, Any] | Any:
    """The request's JSON object, or the error response that refuses it."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY:
        return _error(413, f"a request is at most {MAX_BODY >> 20} MB, this one is {int(declared) >> 20} MB")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            return _error(413, f"a request is at most {MAX_BODY >> 20} MB")
        chunks.append(chunk)
    import json

    try:
        body = json.loads(b"".join(chunks))
    except ValueError:
        return _error(400, "the body is not JSON")
    if not isinstance(body, dict):
        return _error(400, "the body must be a JSON object")
    return body


def _began(request: Any) -> float | None:
    """When the caller's request began (pgrag.model_client.one_request), if it says."""
    try:
        value = float(request.headers.get(BEGAN_HEADER, ""))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _inputs(body: dict[str, Any], limit: int) -> list[str] | Any:
    texts = body.get("input")
    if isinstance(texts, str):
        texts = [texts]
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        return _error(400, "input must be a string or a list of strings")
    if len(texts) > MAX_INPUTS:
        return _error(413, f"at most {MAX_INPUTS} inputs a request, not {len(texts)}: send them in parts")
    too_long = next((i for i, t in enumerate(texts) if len(t) > limit), None)
    if too_long is not None:
        return _error(413, f"input {too_long} has {len(texts[too_long]):,} characters; at most {limit:,}")
    return texts


def create_app(models: Models) -> Any:
    """The starlette application over ``models``."""
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def embeddings(request: Any) -> Any:
        body = await _body(request)
        if not isinstance(body, dict):
            return body
        if body.get("model") and model_key(str(body["model"])) != model_key(models.name):
            return _error(404, f"this runtime serves {models.name!r}, not {body['model']!r}", "model_not_found")
        texts = _inputs(body, MAX_CHARS)
        if not isinstance(texts, list):
            return texts
        began = _began(request)
        models.stats.count(texts, began)
        vectors = await models.embed(texts, began)
        as_base64 = body.get("encoding_format") == "base64"
        data = [{"object": "embedding", "index": i,
                 "embedding": base64.b64encode(v.astype("<f4").tobytes()).decode("ascii") if as_base64 else v.tolist()}
                for i, v in enumerate(vectors)]
        tokens = sum(len(t.split()) for t in texts)   # an estimate: the wire format wants a count
        return JSONResponse({"object": "list", "data": data, "model": models.name,
                             "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    async def parse(request: Any) -> Any:
        body = await _body(request)
        if not isinstance(body, dict):
            return body
        texts = _inputs(body, MAX_PARSE_CHARS)
        if not isinstance(texts, list):
            return texts
        model = str(body.get("model") or config.DEFAULT_SPACY_MODEL)
        began = _began(request)
        models.stats.count(texts, began)
        try:
            parsed = await models.parser(model, bool(body.get("sentences", True))).run(texts, began)
        except Exception as exc:  # a missing spaCy model: the caller's error, said plainly
            return _error(400, str(exc))
        data = [{"index": i, "sentences": p.sentences,
                 "entities": [[e.text, e.label, e.start, e.end] for e in p.entities]}
                for i, p in enumerate(parsed)]
        return JSONResponse({"object": "list", "data": data, "model": model})

    async def health(request: Any) -> Any:
        return JSONResponse(models.health())

    async def cache(request: Any) -> Any:
        """``{"size": n}``: the cache keeps at most n texts from now on (0 empties it,
        for a benchmark that times the model: pgrag.bench.timing.runtime_cache)."""
        body = await _body(request)
        if not isinstance(body, dict):
            return body
        size = body.get("size")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            return _error(400, "size must be an integer of at least 0")
        models.cache.resize(size)
        return JSONResponse(models.health()["cache"])

    async def model_list(request: Any) -> Any:
        return JSONResponse({"object": "list", "data": [{"id": models.name, "object": "model", "owned_by": "pgrag"}]})

    return Starlette(routes=[
        Route("/v1/embeddings", embeddings, methods=["POST"]),
        Route("/pgrag/v1/parse", parse, methods=["POST"]),
        Route("/v1/models", model_list, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/pgrag/v1/cache", cache, methods=["POST"]),
    ])


def bind(path: Path, group: str | None = None, owner: str | None = None) -> socket.socket:
    """A listening Unix socket at ``path`` that only its owner (this OS user, or
    ``owner``: the server's OS user when root starts the runtime for it) and
    ``group`` can open. Created under a strict umask, so it is never briefly open
    to all (uvicorn's own ``uds=`` makes it 0666). A live runtime already there
    is an error; a stale file left by a killed one is replaced."""
    if path.exists():
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(path))
        except OSError:
            path.unlink()
        else:
            raise OSError(f"a model runtime already listens at {path}")
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o117 if group else 0o177)
    try:
        sock.bind(str(path))
    finally:
        os.umask(old)
    os.chown(path, pwd.getpwnam(owner).pw_uid if owner else -1, grp.getgrnam(group).gr_gid if group else -1)
    os.chmod(path, 0o660 if group else 0o600)
    sock.listen(512)
    return sock


def drop_privileges(owner: str | None) -> None:
    """Started by root for the server's OS user: become that user (with its
    groups) once the models are loaded and the socket is bound, so that the
    process that parses every caller's text does not run as root."""
    if owner is None or os.geteuid() != 0:
        return
    user = pwd.getpwnam(owner)
    if user.pw_uid == 0:
        return
    os.setgroups(os.getgrouplist(user.pw_name, user.pw_gid))
    os.setgid(user.pw_gid)
    os.setuid(user.pw_uid)


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _spacy_without_torch() -> None:
    """Keep torch out of this process once the embedding model runs on ONNX
    Runtime. spaCy's thinc imports torch whenever it is installed, only to offer
    it as a backend; the pipelines the runtime serves (en_core_web_sm) run on
    numpy, and torch's import alone held about 180 MB of the runtime's memory.
    A ``None`` in ``sys.modules`` makes ``import torch`` raise ImportError, which
    thinc takes as "not installed"."""
    if "torch" not in sys.modules:
        sys.modules["torch"] = None  # type: ignore[assignment]


def _drops_privileges(owner: str | None) -> bool:
    return owner is not None and os.geteuid() == 0 and pwd.getpwnam(owner).pw_uid != 0


def _warm_parser() -> None:
    """Load the default spaCy pipeline (and with it spaCy's imports) while this
    process may still read everything: after ``drop_privileges`` a first parse
    would import modules the server's OS user cannot read. A pipeline that is
    not installed is loaded, and refused, on demand as before."""
    from . import nlp

    try:
        nlp.parse_here(["Warm up."], config.DEFAULT_SPACY_MODEL, sentences=True)
    except Exception as exc:  # spaCy or its model missing: parse requests say so when they come
        log.warning("spaCy's default pipeline did not load before dropping privileges: %s", exc)


def serve(path: Path | None, model: str, *, group: str | None = None, owner: str | None = None,
          window_ms: float | None = None, max_batch: int = 64, host: str | None = None, port: int | None = None,
          workers: int | None = None) -> None:
    """Load the models, then serve them on ``path`` (or, when asked, on TCP
    ``host:port``, for an application server elsewhere: no socket permissions
    guard it then) until SIGTERM / SIGINT."""
    import uvicorn

    models = Models(model, window=None if window_ms is None else window_ms / 1000, max_batch=max_batch,
                    workers=workers)
    models.embedder.encode(["warm up"])   # the first call allocates; do it before the first caller
    if port is not None:
        sock = socket.create_server((host or "127.0.0.1", port), backlog=512)
    else:
        assert path is not None
        sock = bind(path, group, owner)   # only once the model is loaded: a socket that exists answers
    app_config = uvicorn.Config(create_app(models), log_level="warning", access_log=False, lifespan="off",
                                timeout_keep_alive=300)
    # Every import before privileges go: the server's OS user may not read this
    # Python's standard library (a root-only pyenv under /root), and uvicorn and
    # starlette import theirs lazily (http.cookies, the protocol classes).
    app_config.load()
    if _drops_privileges(owner):
        _warm_parser()
    drop_privileges(owner)
    server = uvicorn.Server(app_config)
    # uvicorn re-raises the SIGTERM / SIGINT that stopped it once it has shut down:
    # as SystemExit here, so that the socket file is removed on the way out.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: sys.exit(0))
    try:
        server.run(sockets=[sock])
    finally:
        if port is None and path is not None:
            # Gone already, or not ours to remove once privileges are dropped: the next start replaces a stale socket.
            with contextlib.suppress(FileNotFoundError, PermissionError):
                path.unlink()


def supervise(argv: list[str], *, restart_delay: float = 0.5) -> int:
    """Run ``python -m pgrag.model_service argv`` as a child and start it again
    whenever it dies (a crash, an out-of-memory kill), until SIGTERM / SIGINT
    (pgrag.process.supervise)."""
    return process.supervise([sys.executable, "-m", "pgrag.model_service", *argv],
                             name="pgrag models: the runtime", restart_delay=restart_delay)


# -- beside the embedded server ------------------------------------------------

def files(data_dir: Path) -> tuple[Path, Path, Path]:
    """The runtime's socket, pid file and log beside the embedded server's data."""
    data_dir = data_dir.expanduser().resolve()
    return (data_dir / config.MODEL_SOCKET_NAME, data_dir / "pgrag-models.pid", data_dir / "pgrag-models.log")


def start_detached(data_dir: Path, model: str = config.DEFAULT_EMBEDDING_MODEL, *, wait: float = 180.0) -> Path:
    """Start ``pgrag models serve`` for the embedded server in ``data_dir`` (it
    keeps running, as the server does) and wait until it answers; its socket.
    A runtime already answering there is reused."""
    import fcntl

    from .exceptions import ServerError
    from .model_client import Endpoint, health

    sock, pid_file, log_file = files(data_dir)
    target = Endpoint(socket=sock)
    # One start at a time per data directory: two processes connecting at once
    # would each start a runtime, and the second, unable to bind, would be
    # restarted by its supervisor for ever. The second waits, then reuses.
    with open(pid_file.with_name("pgrag-models.lock"), "ab") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with contextlib.suppress(Exception):
            health(target)
            return sock   # already serving
        owner = pwd.getpwuid(data_dir.stat().st_uid).pw_name
        command = [sys.executable, "-m", "pgrag.cli", "models", "serve", "--socket", str(sock), "--model", model,
                   "--owner", owner]
        pid = process.spawn_detached(command, log_file, config.process_environment())
        pid_file.write_text(f"{pid}\n")
        if process.wait_ready(pid, lambda: _answers(target), wait):
            return sock
        stop_detached(data_dir)
    tail = log_file.read_text(errors="replace")[-2000:]
    raise ServerError(f"the model runtime for {data_dir} did not start (log {log_file}):\n{tail}")


def _answers(target: Any) -> bool:
    """Whether the runtime at ``target`` answers its health check."""
    from .model_client import health

    try:
        health(target)
    except Exception:   # not listening yet, or not ready to answer
        return False
    return True


def stop_detached(data_dir: Path, wait: float = 15.0) -> bool:
    """Stop the runtime ``start_detached`` started; False when none ran."""
    sock, pid_file, _ = files(data_dir)
    pid = process.read_pid(pid_file)
    if pid is None:
        return False
    pid_file.unlink(missing_ok=True)
    stopped = process.terminate(pid, wait)
    if stopped is False:   # killed: it had no chance to remove its socket
        sock.unlink(missing_ok=True)
    return stopped is not None


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m pgrag.model_service", description="pgrag's model runtime")
    parser.add_argument("--socket", type=Path, default=None)
    parser.add_argument("--host", default=None)
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--model", default=config.DEFAULT_EMBEDDING_MODEL)
    parser.add_argument("--group", default=None)
    parser.add_argument("--owner", default=None)
    parser.add_argument("--window-ms", type=float, default=None,
                        help="how long a text waits for company (default: 0 on ONNX Runtime, 2 on torch)")
    parser.add_argument("--max-batch", type=int, default=64)
    parser.add_argument("--workers", type=int, default=None,
                        help="model calls at once on ONNX Runtime, one thread each (default: one per core)")
    args = parser.parse_args(argv)
    if (args.socket is None) == (args.port is None):
        parser.error("give --socket PATH or --port N")
    serve(args.socket, args.model, group=args.group, owner=args.owner, window_ms=args.window_ms,
          max_batch=args.max_batch, host=args.host, port=args.port, workers=args.workers)


if __name__ == "__main__":
    main()
