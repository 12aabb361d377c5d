"""Evaluation metrics: document-level Recall@k and SQuAD-style EM / F1.

Recall@k follows ../shared/bench/README.md: the gold titles found among the
titles of the first k *distinct* documents a method returned, over the number
of gold titles. EM and F1 use the SQuAD v1.1 answer normalisation (lowercase,
drop punctuation, drop the articles a/an/the, collapse whitespace) and take the
best score over the answer and its aliases. ``bootstrap_interval`` gives the
95 % percentile-bootstrap interval of a mean over questions (or over the groups
of questions that ``gold_groups`` finds sharing gold passages), ``recall_by_type``
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
                       seed: int = 0, groups: Sequence[int] | None = None) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values``: ``resamples``
    resamples of the values with replacement (a fixed ``seed``, so a report is
    reproducible), the mean of each, and the (1 - level)/2 and (1 + level)/2
    percentiles of those means. NaN, NaN for no values.

    With ``groups`` (a group label per value, as ``gold_groups`` gives), each
    resample draws whole groups, as many as there are, and takes the mean over
    their values: values that move together are not counted as independent
    evidence. One value per group gives the same interval as no groups."""
    if not 0 < level < 1:
        raise ValueError("level must be in (0, 1)")
    if resamples < 1:
        raise ValueError("resamples must be at least 1")
    if groups is not None and len(groups) != len(values):
        raise ValueError("groups must give one label per value")
    if not values:
        return math.nan, math.nan
    members: dict[int, list[float]] = {}
    for i, value in enumerate(values):
        members.setdefault(groups[i] if groups is not None else i, []).append(value)
    clusters = [(sum(v), len(v)) for v in members.values()]
    rng = random.Random(seed)
    n = len(clusters)
    means = []
    for _ in range(resamples):
        drawn = [clusters[rng.randrange(n)] for _ in range(n)]
        means.append(sum(total for total, _ in drawn) / sum(count for _, count in drawn))
    tail = (1 - level) / 2 * 100
    return percentile(means, tail), percentile(means, 100 - tail)


def gold_groups(golds: Sequence[Iterable[str]]) -> list[int]:
    """A group label per question: questions that share a gold title, directly
    or through other questions, get the same label (the first such question's
    index). MuSiQue composes questions from shared sub-questions, so one missed
    passage costs every question of its group."""
    parent = list(range(len(golds)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first: dict[str, int] = {}
    for i, titles in enumerate(golds):
        for title in titles:
            j = first.setdefault(title, i)
            a, b = root(i), root(j)
            if a != b:
                parent[max(a, b)] = min(a, b)
    return [root(i) for i in range(len(golds))]


def recall_by_type(rows: Iterable[Mapping[str, Any]], ks: Sequence[int],
                   intervals: Sequence[int] = ()) -> dict[str, Any]:
    """Mean Recall@k per question type (a row's ``type``; rows without one count
    as "untyped"), with the number of questions of that type, sorted by type;
    for each k of ``intervals``, ``interval@k``: the bootstrap_interval of the
    type's Recall@k. A type of 10 questions has an interval about three times
    as wide as a set of 100, which a per-type target has to allow for. Where
    the type's questions share gold passages (rows with ``gold``), also
    ``groups`` and ``group_interval@k`` (grouped_intervals)."""
    types: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        types.setdefault(row.get("type") or "untyped", []).append(row)
    return {t: {"questions": len(g), **{f"recall@{k}": sum(r[f"recall@{k}"] for r in g) / len(g) for k in ks},
                **{f"interval@{k}": bootstrap_interval([r[f"recall@{k}"] for r in g]) for k in intervals},
                **grouped_intervals(g, intervals)}
            for t, g in sorted(types.items())}


def grouped_intervals(rows: Sequence[Mapping[str, Any]], intervals: Sequence[int]) -> dict[str, Any]:
    """``groups`` (how many groups of questions share gold passages, gold_groups)
    and, for each k of ``intervals``, ``group_interval@k``: the bootstrap
    interval of Recall@k resampling those groups. Empty when every question
    is its own group (the question interval is then the same) or the rows
    carry no ``gold``."""
    if not intervals or not rows or any("gold" not in r for r in rows):
        return {}
    labels = gold_groups([r["gold"] for r in rows])
    count = len(set(labels))
    if count == len(rows):
        return {}
    return {"groups": count, **{f"group_interval@{k}": bootstrap_interval([r[f"recall@{k}"] for r in rows],
                                                                          groups=labels) for k in intervals}}
