"""bfloat16 embeddings (PGRAG_EMBEDDING_PRECISION): chosen by the setting or the
CPU's flags, and close to float32's vectors from the real model."""

import numpy as np
import pytest

from pgrag.config import embedding_precision
from pgrag.exceptions import ConfigError

TEXTS = [
    "Who directed the film The Love Parade?",
    "Ernst Lubitsch was a German-born American film director, producer, writer, and actor.",
    "The Love Parade is a 1929 American pre-Code musical comedy film directed by Ernst Lubitsch.",
    "Saint James is a district of Port of Spain, the capital of Trinidad and Tobago.",
    "Which country is the birthplace of the director of film Jeanette?",
]


def test_the_setting_picks_the_precision_and_auto_follows_the_cpu(monkeypatch):
    monkeypatch.delenv("PGRAG_EMBEDDING_PRECISION", raising=False)
    assert embedding_precision(frozenset({"amx_bf16"})) == "float32"      # the default ignores the CPU
    monkeypatch.setenv("PGRAG_EMBEDDING_PRECISION", "BFloat16")
    assert embedding_precision(frozenset()) == "bfloat16"
    monkeypatch.setenv("PGRAG_EMBEDDING_PRECISION", "auto")
    assert embedding_precision(frozenset({"avx2", "amx_bf16"})) == "bfloat16"
    assert embedding_precision(frozenset({"avx2", "avx512_bf16"})) == "bfloat16"
    assert embedding_precision(frozenset({"avx2", "avx512f"})) == "float32"
    monkeypatch.setenv("PGRAG_EMBEDDING_PRECISION", "half")
    with pytest.raises(ConfigError, match="PGRAG_EMBEDDING_PRECISION"):
        embedding_precision(frozenset())


def test_bfloat16_vectors_are_unit_float32_rows_close_to_float32s(monkeypatch):
    import torch

    from pgrag.config import DEFAULT_EMBEDDING_MODEL as DEFAULT_MODEL_NAME
    from pgrag.embed import get_embedder

    monkeypatch.delenv("PGRAG_EMBEDDING_PRECISION", raising=False)
    monkeypatch.setenv("PGRAG_EMBEDDING_BACKEND", "torch")   # float32 on torch, not ONNX Runtime
    wide = get_embedder(DEFAULT_MODEL_NAME)
    monkeypatch.setenv("PGRAG_EMBEDDING_PRECISION", "bfloat16")
    narrow = get_embedder(DEFAULT_MODEL_NAME)
    assert narrow is not wide and next(narrow._model.parameters()).dtype == torch.bfloat16
    assert next(wide._model.parameters()).dtype == torch.float32
    a, b = wide.encode(TEXTS), narrow.encode(TEXTS)
    assert b.dtype == np.float32 and b.shape == a.shape
    assert np.allclose(np.linalg.norm(b, axis=1), 1.0, atol=1e-6)
    cosines = (a * b).sum(axis=1)
    assert cosines.min() > 0.999
    assert not np.array_equal(a, b)      # it really ran in bfloat16
