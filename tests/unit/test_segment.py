"""The unsupervised boundary detector (pgrag.segment) on hand-made vectors."""

from __future__ import annotations

import numpy as np
import pytest

from pgrag.segment import SegmentSettings, boundary_scores, can_split, cuts, gap_similarities, segment


def spans(lengths):
    out, pos = [], 0
    for n in lengths:
        out.append((pos, pos + n))
        pos += n + 1
    return out


def topics(*counts):
    """One unit vector per sentence; sentences of the same topic share a vector."""
    rows = []
    for t, n in enumerate(counts):
        v = np.zeros(8)
        v[t] = 1.0
        rows.extend([v] * n)
    return np.array(rows)


def test_cut_where_the_topic_changes():
    s = spans([100] * 6)
    nodes = segment(s, topics(3, 3), SegmentSettings(min_chars=150, window=2))
    assert nodes == [(0, 2), (3, 5)]
    assert cuts(nodes) == {2}


def test_gap_similarity_averages_windows():
    sims = gap_similarities(topics(2, 2), window=2)
    # gap 0: [a] vs [a, b] -> cos 1/sqrt(2); gap 1: [a, a] vs [b, b] -> 0; gap 2: [a, b] vs [b]
    assert sims == pytest.approx([1 / np.sqrt(2), 0.0, 1 / np.sqrt(2)])


def test_min_chars_forbids_short_nodes():
    s = spans([100] * 6)
    # the topic changes after sentence 0, but a 100-char node is below min_chars
    nodes = segment(s, topics(1, 5), SegmentSettings(min_chars=150, window=1))
    assert nodes == [(0, 5)]


def test_max_chars_cuts_a_long_uniform_text():
    s = spans([100] * 10)
    nodes = segment(s, topics(10), SegmentSettings(min_chars=0, max_chars=350))
    assert nodes == [(0, 2), (3, 5), (6, 8), (9, 9)]
    for first, last in nodes:
        assert s[last][1] - s[first][0] <= 350


def test_short_documents_need_no_embeddings():
    s = spans([120, 100])
    assert not can_split(s, SegmentSettings(min_chars=150))
    assert segment(s, None, SegmentSettings(min_chars=150)) == [(0, 1)]
    assert segment([], None) == []


def test_boundary_scores():
    scores = boundary_scores([({2, 5}, {2, 4}), (set(), {1}), ({3}, {3})])
    assert (scores.predicted, scores.reference, scores.correct) == (3, 4, 2)
    assert scores.precision == pytest.approx(2 / 3) and scores.recall == pytest.approx(0.5)
    assert scores.f1 == pytest.approx(2 * (2 / 3) * 0.5 / (2 / 3 + 0.5))
