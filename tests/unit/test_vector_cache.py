"""The model runtime's cache of short texts' vectors (model_queue.VectorCache)."""

from __future__ import annotations

import numpy as np
import pytest

from pgrag import config
from pgrag.exceptions import ConfigError
from pgrag.model_queue import CACHED_CHARS, VectorCache


def test_the_least_recently_used_text_goes_first():
    cache = VectorCache(2)
    a, b, c = (np.full(4, x, dtype=np.float32) for x in (1, 2, 3))
    cache.put("a", a)
    cache.put("b", b)
    assert cache.get("a") is not None    # "a" is now the most recently used
    cache.put("c", c)
    assert cache.get("b") is None and np.array_equal(cache.get("a"), a) and np.array_equal(cache.get("c"), c)


def test_a_kept_vector_is_a_copy_not_a_view_of_its_batch():
    batch = np.ones((64, 4), dtype=np.float32)
    cache = VectorCache(8)
    cache.put("q", batch[3])
    batch[3] = 0
    assert np.array_equal(cache.get("q"), np.ones(4)) and cache.get("q").base is None


def test_long_texts_and_a_cache_of_size_zero_keep_nothing():
    cache = VectorCache(8)
    cache.put("x" * (CACHED_CHARS + 1), np.ones(4))
    assert not cache.items
    off = VectorCache(0)
    off.put("q", np.ones(4))
    assert off.get("q") is None


def test_the_size_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv("PGRAG_EMBEDDING_CACHE", raising=False)
    assert config.embedding_cache_size() == 4096
    monkeypatch.setenv("PGRAG_EMBEDDING_CACHE", "0")
    assert config.embedding_cache_size() == 0
    monkeypatch.setenv("PGRAG_EMBEDDING_CACHE", "-3")
    with pytest.raises(ConfigError, match="PGRAG_EMBEDDING_CACHE"):
        config.embedding_cache_size()
