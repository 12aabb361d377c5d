"""The ranking index's chunk vectors (pgrag.postings.Vectors): lookups across
blocks, a delta's new block, and the merge past MAX_VECTOR_BLOCKS."""

from __future__ import annotations

import numpy as np
import pytest

from pgrag import postings
from pgrag.exceptions import PgragError
from pgrag.postings import Vectors


def rows(ids):
    return np.array([[float(i), -float(i)] for i in ids], dtype=np.float32).reshape(-1, 2)


def test_rows_are_found_in_any_block_and_a_missing_chunk_is_an_error():
    v = Vectors.of(np.array([1, 3, 5]), rows([1, 3, 5])).added(np.array([7, 8]), rows([7, 8]), np.array([1, 3, 5]))
    assert len(v.blocks) == 2
    assert np.array_equal(v.rows(np.array([8, 1, 5, 7])), rows([8, 1, 5, 7]))
    with pytest.raises(PgragError, match="no cached vector"):
        v.rows(np.array([2]))
    ids, merged = v.merged()
    assert ids.tolist() == [1, 3, 5, 7, 8] and np.array_equal(merged, rows([1, 3, 5, 7, 8]))


def test_past_the_block_limit_one_block_of_the_kept_and_new_chunks(monkeypatch):
    monkeypatch.setattr(postings, "MAX_VECTOR_BLOCKS", 3)
    v = Vectors.of(np.array([1, 2]), rows([1, 2]))
    v = v.added(np.array([3]), rows([3]), np.array([1, 2]))
    v = v.added(np.array([4]), rows([4]), np.array([1, 2, 3]))
    assert len(v.blocks) == 3
    v = v.added(np.array([5]), rows([5]), np.array([2, 4]))      # 1 and 3 were deleted
    assert len(v.blocks) == 1 and v.blocks[0][0].tolist() == [2, 4, 5]
    assert np.array_equal(v.rows(np.array([5, 2])), rows([5, 2]))
