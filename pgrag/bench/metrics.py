"""Evaluation metrics: document-level Recall@k and SQuAD-style EM / F1.

Recall@k follows ../shared/bench/README.md: the gold titles found among the
titles of the first k *distinct* documents a method returned, over the number
of gold titles. EM and F1 use the SQuAD v1.1 answer normalisation (lowercase,
drop punctuation, drop the articles a/an/the, collapse whitespace) and take the
best score over the answer and its aliases. ``bootstrap_interval`` gives the
95 % percentile-bootstrap interval of a mean over questions, ``recall_by_type``
Recall@k per question type (2hop/3hop/4hop on MuSiQue, compositional... on 2Wiki).
"""

from __future__ import annotations

import math
import random
import re
import string
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lowercase, no punctuation, no articles, single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, golds: Iterable[str]) -> float:
    """1.0 when the normalised prediction equals any normalised gold answer."""
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(g) for g in golds))


def f1_score(prediction: str, golds: Iterable[str]) -> float:
    """Best token-overlap F1 of the prediction against any gold answer."""
    return max((_f1(prediction, g) for g in golds), default=0.0)


def _f1(prediction: str, gold: str) -> float:
    pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not pred or not ref:
        return float(pred == ref)
    common = sum((Counter(pred) & Counter(ref)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def distinct_documents(titles: Iterable[str]) -> list[str]:
    """Titles in first-seen order without repeats (several chunks of one document
    count as one retrieved document)."""
    return list(dict.fromkeys(titles))


def recall_at_k(retrieved: Sequence[str], gold: Iterable[str], k: int) -> float:
    """Share of the gold documents among the first ``k`` distinct retrieved ones
    (a fraction in [0, 1]; fewer than ``k`` results simply count what is there)."""
    if k < 1:
        raise ValueError("k must be at least 1")
    gold_set = set(gold)
    if not gold_set:
        raise ValueError("a question needs at least one gold document")
    top = set(distinct_documents(retrieved)[:k])
    return len(top & gold_set) / len(gold_set)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) with linear interpolation, like numpy's default."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def bootstrap_interval(values: Sequence[float], *, resamples: int = 1000, level: float = 0.95,
                       seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values``: ``resamples``
    resamples of the values with replacement (a fixed ``seed``, so a report is
    reproducible), the mean of each, and the (1 - level)/2 and (1 + level)/2
    percentiles of those means. NaN, NaN for no values."""
    if not 0 < level < 1:
        raise ValueError("level must be in (0, 1)")
    if resamples < 1:
        raise ValueError("resamples must be at least 1")
    if not values:
        return math.nan, math.nan
    rng = random.Random(seed)
    n = len(values)
    means = [sum(values[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples)]
    tail = (1 - level) / 2 * 100
    return percentile(means, tail), percentile(means, 100 - tail)


def recall_by_type(rows: Iterable[Mapping[str, Any]], ks: Sequence[int],
                   intervals: Sequence[int] = ()) -> dict[str, Any]:
    """Mean Recall@k per question type (a row's ``type``; rows without one count
    as "untyped"), with the number of questions of that type, sorted by type;
    for each k of ``intervals``, ``interval@k``: the bootstrap_interval of the
    type's Recall@k. A type of 10 questions has an interval about three times
    as wide as a set of 100, which a per-type target has to allow for."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        groups.setdefault(row.get("type") or "untyped", []).append(row)
    return {t: {"questions": len(g), **{f"recall@{k}": sum(r[f"recall@{k}"] for r in g) / len(g) for k in ks},
                **{f"interval@{k}": bootstrap_interval([r[f"recall@{k}"] for r in g]) for k in intervals}}
            for t, g in sorted(groups.items())}
