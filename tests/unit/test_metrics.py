"""The evaluation metrics against hand-computed cases."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pgrag.bench.metrics import (
    bootstrap_interval,
    distinct_documents,
    exact_match,
    f1_score,
    gold_groups,
    normalize_answer,
    percentile,
    recall_at_k,
    recall_by_type,
)


@pytest.mark.parametrize("raw, expected", [
    ("The Eiffel Tower", "eiffel tower"),
    ("  an   apple, a PEAR!  ", "apple pear"),
    ("20 March 851.", "20 march 851"),
    ("Theatre", "theatre"),          # 'the' only as a whole word
    ("anthem of a nation", "anthem of nation"),
    ("U.S.A.", "usa"),
    ("", ""),
])
def test_normalisation(raw, expected):
    assert normalize_answer(raw) == expected


def test_exact_match_uses_normalisation_and_aliases():
    assert exact_match("the Port of Spain.", ["Port of Spain"]) == 1.0
    assert exact_match("Port Spain", ["Port of Spain"]) == 0.0
    assert exact_match("NYC", ["New York City", "NYC"]) == 1.0
    assert exact_match("anything", []) == 0.0


def test_f1_hand_computed():
    # prediction tokens: port, spain (articles/punctuation gone); gold: port, of, spain
    # common 2 -> precision 2/2, recall 2/3 -> F1 = 2*1*(2/3)/(1+2/3) = 0.8
    assert f1_score("Port, Spain", ["Port of Spain"]) == pytest.approx(0.8)
    # repeated tokens count with multiplicity: pred "a b b" vs gold "b c": common 1 -> P 1/3, R 1/2
    assert f1_score("x y y", ["y z"]) == pytest.approx(2 * (1 / 3) * (1 / 2) / (1 / 3 + 1 / 2))
    assert f1_score("nothing shared", ["other words"]) == 0.0
    # best over aliases
    assert f1_score("Big Apple", ["New York City", "the Big Apple"]) == 1.0
    # an answer that normalises to nothing only matches a gold that does too
    assert f1_score("the", ["a"]) == 1.0
    assert f1_score("the", ["Paris"]) == 0.0


def test_recall_counts_distinct_documents():
    # Three chunks of document A before B: at k=2 the distinct documents are A and B.
    retrieved = ["A", "A", "A", "B", "C"]
    assert distinct_documents(retrieved) == ["A", "B", "C"]
    assert recall_at_k(retrieved, ["B", "C"], 2) == 0.5
    assert recall_at_k(retrieved, ["B", "C"], 3) == 1.0
    assert recall_at_k(retrieved, ["A", "B", "C", "D"], 2) == 0.5


def test_recall_with_k_larger_than_results():
    assert recall_at_k(["A"], ["A", "B"], 5) == 0.5
    assert recall_at_k([], ["A"], 5) == 0.0


def test_recall_rejects_nonsense():
    with pytest.raises(ValueError):
        recall_at_k(["A"], ["A"], 0)
    with pytest.raises(ValueError):
        recall_at_k(["A"], [], 2)


@given(st.lists(st.sampled_from("ABCDEFG")), st.sets(st.sampled_from("ABCDEFG"), min_size=1),
       st.integers(1, 8))
def test_recall_is_a_fraction_monotone_in_k(retrieved, gold, k):
    r = recall_at_k(retrieved, gold, k)
    assert 0.0 <= r <= 1.0
    assert recall_at_k(retrieved, gold, k + 1) >= r


def test_percentile_interpolates_like_numpy():
    values = [10.0, 20.0, 30.0, 40.0]
    assert percentile(values, 50) == 25.0
    assert percentile(values, 95) == pytest.approx(38.5)
    assert percentile([7.0], 95) == 7.0
    assert math.isnan(percentile([], 50))


def test_bootstrap_interval_hand_checked():
    # every value equal: every resample's mean is that value
    assert bootstrap_interval([50.0] * 7) == (50.0, 50.0)
    # one value: n = 1, every resample is that value
    assert bootstrap_interval([100.0]) == (100.0, 100.0)
    assert all(math.isnan(v) for v in bootstrap_interval([]))
    # half 0, half 100 over 100 questions: the mean's standard error is 5 points, so the
    # 95 % interval is about 50 ± 1.96 x 5, i.e. about 40..60
    lo, hi = bootstrap_interval([0.0, 100.0] * 50)
    assert 38 <= lo <= 42 and 58 <= hi <= 62
    assert lo < 50 < hi


def test_bootstrap_interval_is_reproducible_and_seeded():
    values = [0.0, 50.0, 100.0, 100.0, 0.0, 100.0, 50.0, 0.0, 100.0, 100.0]
    assert bootstrap_interval(values) == bootstrap_interval(values)           # fixed default seed
    spread = [float(v) for v in range(30)]
    assert bootstrap_interval(spread, seed=1) != bootstrap_interval(spread, seed=2)
    lo, hi = bootstrap_interval(values)
    assert min(values) <= lo <= sum(values) / len(values) <= hi <= max(values)
    # a narrower level gives a narrower interval
    lo80, hi80 = bootstrap_interval(values, level=0.8)
    assert lo <= lo80 and hi80 <= hi
    with pytest.raises(ValueError):
        bootstrap_interval(values, level=1.0)
    with pytest.raises(ValueError):
        bootstrap_interval(values, resamples=0)


def test_recall_by_type_hand_computed():
    rows = [{"type": "2hop", "recall@2": 100.0, "recall@5": 100.0},
            {"type": "2hop", "recall@2": 50.0, "recall@5": 100.0},
            {"type": "3hop", "recall@2": 0.0, "recall@5": 66.0},
            {"type": None, "recall@2": 25.0, "recall@5": 50.0}]
    assert recall_by_type(rows, [2, 5]) == {
        "2hop": {"questions": 2, "recall@2": 75.0, "recall@5": 100.0},
        "3hop": {"questions": 1, "recall@2": 0.0, "recall@5": 66.0},
        "untyped": {"questions": 1, "recall@2": 25.0, "recall@5": 50.0},
    }
    assert recall_by_type([], [2]) == {}


def test_recall_by_type_gives_each_type_its_own_interval():
    rows = ([{"type": "2hop", "recall@5": 100.0}] * 9 + [{"type": "2hop", "recall@5": 0.0}]
            + [{"type": "4hop", "recall@5": 50.0}] * 3)
    by_type = recall_by_type(rows, [5], intervals=[5])
    assert by_type["2hop"]["interval@5"] == bootstrap_interval([100.0] * 9 + [0.0])
    assert by_type["2hop"]["interval@5"] == (70.0, 100.0)    # one miss in ten questions: 30 points wide
    assert by_type["4hop"]["interval@5"] == (50.0, 50.0)   # every question alike: no spread
    assert "interval@5" not in recall_by_type(rows, [5])["2hop"]


def test_gold_groups_join_questions_that_share_a_gold_title_even_through_others():
    golds = [["A", "B"], ["C"], ["B", "D"], ["D", "E"], ["F"], ["C", "G"]]
    # q0-q2 share B, q2-q3 share D (so q0 and q3 are one group), q1-q5 share C, q4 alone
    assert gold_groups(golds) == [0, 1, 0, 0, 4, 1]
    assert gold_groups([["B"], ["A"], ["A", "B"]]) == [0, 0, 0]    # joined by a later question
    assert gold_groups([]) == []


def test_bootstrap_interval_by_group():
    values = [0.0, 100.0] * 50
    # one value a group: the same draws, so the same interval as without groups
    assert bootstrap_interval(values, groups=list(range(100))) == bootstrap_interval(values)
    # the same 100 values as 10 groups of 10 that succeed or fail together: as uncertain as
    # 10 independent questions, so far wider than 100 would be
    together = [0.0] * 50 + [100.0] * 50
    lo, hi = bootstrap_interval(together, groups=[i // 10 for i in range(100)])
    lo_q, hi_q = bootstrap_interval(together)
    assert hi - lo > 2 * (hi_q - lo_q)
    assert (lo, hi) == bootstrap_interval([0.0] * 5 + [100.0] * 5)
    # groups of unequal size: each resample's mean is over the questions it drew
    assert bootstrap_interval([100.0, 100.0, 100.0, 0.0], groups=[0, 0, 0, 1], resamples=1, seed=3) in (
        (100.0, 100.0), (75.0, 75.0), (0.0, 0.0))
    with pytest.raises(ValueError):
        bootstrap_interval(values, groups=[0])


def test_recall_by_type_adds_group_intervals_where_questions_share_gold():
    rows = ([{"type": "4hop", "gold": ["A", "B"], "recall@5": 100.0}] * 5
            + [{"type": "4hop", "gold": ["C", "D"], "recall@5": 0.0}] * 5
            + [{"type": "2hop", "gold": [f"T{i}"], "recall@5": 50.0} for i in range(4)])
    by_type = recall_by_type(rows, [5], intervals=[5])
    assert by_type["4hop"]["groups"] == 2
    assert by_type["4hop"]["group_interval@5"] == bootstrap_interval([100.0, 0.0])
    assert by_type["4hop"]["group_interval@5"] != by_type["4hop"]["interval@5"]
    assert "groups" not in by_type["2hop"] and "group_interval@5" not in by_type["2hop"]
