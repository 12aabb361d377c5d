"""``pgrag bench filters`` (pgrag.bench.filters) on the five test documents: the
labels follow the stated rule, no hit leaves the filter, dense and tigrag
return k hits, the restricted recall counts only the questions it should, and
the command prints its table and writes its JSON."""

from __future__ import annotations

import json

import pytest

from pgrag.bench.evaluate import Question
from pgrag.bench.filters import FILTER_METHODS, bucket_of, filter_benchmark, kind_of, labels
from tests.conftest import WIKI, seeded_database

DOCS = [{**d, "metadata": {"lang": "en"}} for d in WIKI]
# buckets of the test ids: minaj 9, lothair 25, ermengarde 75, long 77, changed 84
BUCKETS = 80
KEPT = {"minaj", "lothair", "ermengarde", "long"}
QUESTIONS = [
    Question(id="mother", question="When did Lothair II's mother die?", answer="20 March 851",
             supporting_titles=("Lothair II", "Ermengarde of Tours")),
    Question(id="song", question="Which song did Nicki Minaj release with Lil Wayne?", answer="Changed It",
             supporting_titles=("Changed It", "Nicki Minaj")),
    Question(id="outside", question="Who sings Changed It with Lil Wayne?", answer="Nicki Minaj",
             supporting_titles=("Changed It",)),
]

database_uri = seeded_database("labelled", docs=DOCS)


@pytest.fixture
def kb(db):
    return db.corpus("labelled")


def test_the_rule_is_the_stated_one():
    assert {d["id"]: bucket_of(d["id"]) for d in WIKI} == {"lothair": 25, "ermengarde": 75, "minaj": 9,
                                                          "changed": 84, "long": 77}
    assert [kind_of(d["title"]) for d in WIKI] == ["lothair", "ermengarde", "nicki", "changed", "a"]
    assert kind_of("  ...  ") == "untitled"


def test_the_benchmark_keeps_every_hit_inside_the_filter(db, kb):
    k = 3
    result = filter_benchmark(db, kb, QUESTIONS, buckets=BUCKETS, k=k, warmup=1)
    with db.transaction() as conn:
        stored = dict(conn.execute("SELECT external_id, metadata FROM pgrag.document WHERE corpus_id = %s",
                                   (kb.id,)).fetchall())
    titles = {d["id"]: d["title"] for d in WIKI}
    assert stored == {i: {"lang": "en", **labels(i, titles[i])} for i in titles}   # merged, not replaced
    assert result["labels"]["documents_updated"] == 5
    assert (result["documents"], result["documents_kept"], result["share_kept"]) == (5, 4, 0.8)
    assert result["server_agrees"] and result["chunks_kept"] >= k
    assert result["filter"] == {"bucket": {"$lt": BUCKETS}}
    assert (result["questions"], result["scored_questions"], result["gold_titles_inside"]) == (3, 2, 3)
    assert set(result["methods"]) == set(FILTER_METHODS)
    for name, m in result["methods"].items():
        assert m["violations"] == 0, name
        assert m[f"recall@{k}_filtered"] is not None and m[f"recall@{k}_unfiltered"] is not None, name
    for name in ("dense", "tigrag"):
        assert result["methods"][name]["short"] == 0
        assert result["methods"][name]["hits"] == k * len(QUESTIONS)
    timing = result["dense_latency"]
    assert timing["questions"] == 3 and timing["filtered_ms_p50"] > 0 and timing["unfiltered_ms_p50"] > 0
    again = filter_benchmark(db, kb, QUESTIONS, buckets=BUCKETS, k=k, warmup=0, method_names=["tigrag"])
    assert again["labels"]["documents_updated"] == 0
    assert again["methods"]["tigrag"] == result["methods"]["tigrag"]


def _never_run(*_args):
    raise AssertionError("a method without filters ran under one")


@pytest.fixture
def unfiltered():
    """A method registered without filters=True (every built-in one takes a filter)."""
    from pgrag import methods

    methods.register(methods.MethodSpec(name="unfiltered", run=_never_run))
    yield "unfiltered"
    methods.unregister("unfiltered")


def test_a_method_without_filters_is_refused(db, kb, unfiltered):
    from pgrag.exceptions import InputError

    with pytest.raises(InputError, match="does not take a filter"):
        filter_benchmark(db, kb, QUESTIONS, method_names=[unfiltered])


def test_the_command_prints_its_table_and_writes_json(database_uri, tmp_path, unfiltered):
    from click.testing import CliRunner

    from pgrag.cli import main

    corpus = tmp_path / "corpus.json"
    corpus.write_text(json.dumps([{"id": d["id"], "title": d["title"], "text": d["text"]} for d in WIKI]))
    questions = tmp_path / "questions.jsonl"
    questions.write_text("\n".join(json.dumps({"id": q.id, "question": q.question, "answer": q.answer,
                                               "supporting_titles": list(q.supporting_titles)})
                                   for q in QUESTIONS) + "\n")
    out = tmp_path / "filters.json"
    result = CliRunner().invoke(main, ["bench", "filters", "--corpus-file", str(corpus), "--questions",
                                       str(questions), "--buckets", str(BUCKETS), "-k", "3", "--warmup", "0",
                                       "--methods", "dense,tigrag", "--no-progress", "--out", str(out),
                                       "--dsn", database_uri], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "| dense | 0 | 0 |" in result.output and "| tigrag | 0 | 0 |" in result.output
    data = json.loads(out.read_text())
    assert data["corpus"].startswith("eval-") and data["documents_kept"] == len(KEPT)
    bad = CliRunner().invoke(main, ["bench", "filters", "--corpus-file", str(corpus), "--questions", str(questions),
                                    "--methods", unfiltered, "--dsn", database_uri])
    assert bad.exit_code == 2 and "does not take a filter" in bad.output
