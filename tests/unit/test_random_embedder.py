"""``random-<dim>`` embeddings (pgrag.embed): seeded unit vectors, no model."""

from __future__ import annotations

import numpy as np

from pgrag import embed
from pgrag.embed import RandomEmbedder, get_embedder


def test_random_vectors_are_unit_seeded_by_the_text_and_of_the_named_dimension():
    e = get_embedder("random-16")
    assert isinstance(e, RandomEmbedder) and e.dim == 16
    a = e.encode(["Lothair II", "Ermengarde of Tours", "Lothair II"])
    assert a.shape == (3, 16) and a.dtype == np.float32
    assert np.allclose(np.linalg.norm(a, axis=1), 1, atol=1e-6)
    assert np.array_equal(a[0], a[2]) and not np.allclose(a[0], a[1])
    assert np.array_equal(RandomEmbedder("random-16", 16).encode(["Lothair II"])[0], a[0])   # every process alike


def test_loaded_here_lists_the_models_held_not_those_the_cache_evicted():
    import gc

    for dim in range(11, 16):       # five models through a cache of four: the first is evicted
        embed._embedder(f"random-{dim}", "float32", "auto")
    gc.collect()
    held = {m["name"]: m for m in embed.loaded_here()}
    assert [f"random-{dim}" in held for dim in range(11, 16)] == [False, True, True, True, True]
    assert held["random-15"] == {"name": "random-15", "backend": "random", "threads": None}
