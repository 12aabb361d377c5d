"""The ranking index's chunk vectors (pgrag.index.vectors.Vectors): lookups across
blocks, a delta's new block (nothing copied), and the merge a fold makes."""

from __future__ import annotations

import numpy as np
import pytest

from pgrag.exceptions import PgragError
from pgrag.index import delta
from pgrag.index.vectors import Vectors


def rows(ids):
    return np.array([[float(i), -float(i)] for i in ids], dtype=np.float32).reshape(-1, 2)


def test_rows_are_found_in_any_block_and_a_missing_chunk_is_an_error():
    v = Vectors.of(np.array([1, 3, 5]), rows([1, 3, 5])).added(np.array([7, 8]), rows([7, 8]))
    assert len(v.blocks) == 2
    assert np.array_equal(v.rows(np.array([8, 1, 5, 7])), rows([8, 1, 5, 7]))
    with pytest.raises(PgragError, match="no cached vector"):
        v.rows(np.array([2]))
    ids, merged = v.merged()
    assert ids.tolist() == [1, 3, 5, 7, 8] and np.array_equal(merged, rows([1, 3, 5, 7, 8]))


def test_a_delta_adds_a_block_without_copying_and_an_empty_one_adds_none():
    base = Vectors.of(np.array([1, 2]), rows([1, 2]))
    v = base.added(np.array([3]), rows([3])).added(np.array([4]), rows([4]))
    assert len(v.blocks) == 3 and v.blocks[0][1] is base.blocks[0][1]
    assert v.added(np.array([], dtype=np.int64), rows([])) is v
    assert np.array_equal(v.rows(np.array([4, 1])), rows([4, 1]))


def test_past_the_block_limit_a_delta_asks_for_a_fold(monkeypatch):
    import dataclasses

    import scipy.sparse as sp

    from pgrag.index.delta import wants_fold
    from pgrag.index.postings import Postings

    monkeypatch.setattr(delta, "MAX_VECTOR_BLOCKS", 2)
    tf = sp.csc_matrix((3, 2))
    index = Postings(version=1, chunk_ids=np.array([1, 2, 3]), tf=tf, lengths=np.ones(3, dtype=np.int64),
                     documents=np.arange(3), df=np.zeros(2, dtype=np.int64),
                     vectors=Vectors.of(np.array([1, 2, 3]), rows([1, 2, 3])))
    assert not wants_fold(index)
    more = Vectors.of(np.array([1, 2]), rows([1, 2])).added(np.array([3]), rows([3])).added(np.array([4]), rows([4]))
    assert wants_fold(dataclasses.replace(index, vectors=more))


@pytest.mark.parametrize("blas", ["1", None])
def test_products_are_the_same_with_blas_on_one_thread_or_by_einsum(monkeypatch, blas):
    """``products`` takes numpy's BLAS only where it runs on one thread (a server
    backend), else einsum (no OpenBLAS pool left spinning): the same numbers."""
    from pgrag import config
    from pgrag.index.vectors import products

    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    if blas:
        monkeypatch.setenv("OPENBLAS_NUM_THREADS", blas)
    assert config.blas_single_threaded() is bool(blas)
    rng = np.random.default_rng(3)
    rows, queries = rng.random((50, 8), dtype=np.float32), rng.random((3, 8), dtype=np.float32)
    assert np.allclose(products(rows, queries), rows.astype(np.float64) @ queries.T.astype(np.float64), atol=1e-5)
