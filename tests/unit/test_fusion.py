"""Reciprocal rank fusion as SQL's pgrag.hybrid computes it (hybrid, ThreadRAG)."""

import pytest

from pgrag.methods.hybrid import RRF_K, fuse


def test_scores_sum_over_lists_and_ties_go_to_the_lower_chunk_id():
    fused = fuse([[7, 3, 9], [3, 5]])
    assert [c for c, _ in fused] == [3, 7, 5, 9]      # 3 is in both lists; 7 (1/61) before 5 (1/62)
    assert dict(fused)[3] == pytest.approx(1 / (RRF_K + 2) + 1 / (RRF_K + 1))
    assert [c for c, _ in fuse([[8], [2]])] == [2, 8]  # equal scores: chunk id ascending
    assert fuse([]) == [] and fuse([[], []]) == []
