"""Semantic segmentation: a document's sentences -> semantic nodes (ThreadRAG §3.1).

The paper's boundary model is a RoBERTa-base classifier trained on LLM silver
labels (its App. D); no such model is installable here, so pgrag uses an
unsupervised detector in the spirit of TextTiling: embed each sentence, compare
the mean embedding of the ``window`` sentences before each gap with the mean of
the ``window`` sentences after it, and cut where the cosine drops below
``threshold``. Length bounds keep nodes useful: no cut leaves a node (or the rest
of the document) shorter than ``min_chars``, and a node is cut before it would
exceed ``max_chars`` whatever the similarity.

Everything here is a pure function of one document (its sentence spans and
sentence embeddings), so nodes can be stored at ingest and a rebuild gives the
same rows. ``boundary_scores`` measures predicted cuts against reference ones
(e.g. paragraph or passage boundaries).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, kw_only=True)
class SegmentSettings:
    threshold: float = 0.3     # cut where the windows' cosine is below this (and at a valley)
    window: int = 2            # sentences averaged on each side of a gap
    min_chars: int = 100       # no node shorter than this (unless the document is)
    max_chars: int = 1000      # a node is cut before it grows past this

    def __post_init__(self) -> None:
        if self.window < 1 or self.min_chars < 0 or self.max_chars < 1:
            raise ValueError("window and max_chars must be at least 1, min_chars at least 0")


DEFAULT = SegmentSettings()


def can_split(spans: list[tuple[int, int]], settings: SegmentSettings = DEFAULT) -> bool:
    """Whether a document could get more than one node, i.e. whether its
    sentences need embedding at all (most short passages do not)."""
    if len(spans) < 2:
        return False
    length = spans[-1][1] - spans[0][0]
    return length >= 2 * settings.min_chars or length > settings.max_chars


def gap_similarities(vectors: np.ndarray, window: int) -> np.ndarray:
    """Cosine between the mean of the ``window`` sentence vectors before each gap
    and the mean of the ``window`` after it; gap g lies between sentences g and g+1."""
    n = len(vectors)
    out = np.ones(max(n - 1, 0), dtype=np.float64)
    for g in range(n - 1):
        left = vectors[max(0, g - window + 1): g + 1].mean(axis=0)
        right = vectors[g + 1: g + 1 + window].mean(axis=0)
        denom = float(np.linalg.norm(left) * np.linalg.norm(right)) or 1.0
        out[g] = float(left @ right) / denom
    return out


def segment(spans: list[tuple[int, int]], vectors: np.ndarray | None,
            settings: SegmentSettings = DEFAULT) -> list[tuple[int, int]]:
    """Inclusive (first, last) sentence ordinals of each node, in order.
    ``vectors`` (one row per sentence) may be None when ``can_split`` is False."""
    n = len(spans)
    if n == 0:
        return []
    if not can_split(spans, settings):
        return [(0, n - 1)]
    assert vectors is not None and len(vectors) == n, "sentence vectors are needed to split"
    sims = gap_similarities(np.asarray(vectors, dtype=np.float64), settings.window)
    end_of_doc = spans[-1][1]
    nodes, first = [], 0
    for g in range(n - 1):
        length = spans[g][1] - spans[first][0]
        rest = end_of_doc - spans[g + 1][0]
        too_long = spans[g + 1][1] - spans[first][0] > settings.max_chars
        # a cut sits at a local minimum of similarity (TextTiling's valley), so a
        # slow slide across two topics is cut once, at its lowest point
        valley = (g == 0 or sims[g] <= sims[g - 1]) and (g == n - 2 or sims[g] <= sims[g + 1])
        drop = (sims[g] < settings.threshold and valley
                and length >= settings.min_chars and rest >= settings.min_chars)
        if drop or too_long:
            nodes.append((first, g))
            first = g + 1
    nodes.append((first, n - 1))
    return nodes


def cuts(nodes: list[tuple[int, int]]) -> set[int]:
    """The gaps (index of the sentence before the cut) between consecutive nodes."""
    return {last for _, last in nodes[:-1]}


@dataclass(frozen=True, kw_only=True)
class BoundaryScores:
    predicted: int
    reference: int
    correct: int

    @property
    def precision(self) -> float:
        return self.correct / self.predicted if self.predicted else 0.0

    @property
    def recall(self) -> float:
        return self.correct / self.reference if self.reference else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0


def boundary_scores(pairs: list[tuple[set[int], set[int]]]) -> BoundaryScores:
    """Exact-gap precision/recall over documents, each a (predicted, reference) pair of cut sets."""
    return BoundaryScores(predicted=sum(len(p) for p, _ in pairs), reference=sum(len(r) for _, r in pairs),
                          correct=sum(len(p & r) for p, r in pairs))
