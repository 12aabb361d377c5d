"""Question files for pgrag eval: the benchmark format loads; bad lines are named."""

from __future__ import annotations

import json

import pytest

from pgrag.bench.evaluate import corpus_name_for, load_questions
from pgrag.exceptions import InputError


def test_the_benchmark_questions_load(bench_2wiki):
    questions = load_questions(bench_2wiki / "questions.jsonl")
    assert len(questions) == 111
    assert all(len(q.supporting_titles) in (2, 4) for q in questions)


def test_aliases_join_the_answer(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps({"id": "1", "question": "Q?", "answer": "NYC",
                                "answer_aliases": ["New York"], "supporting_titles": ["A"]}) + "\n\n")
    [q] = load_questions(path)
    assert q.answers == ("NYC", "New York")


@pytest.mark.parametrize("line, message", [
    ("{not json", "q.jsonl:1: not valid JSON"),
    (json.dumps({"question": "Q?", "answer": "a", "supporting_titles": ["A"]}), "'id'"),
    (json.dumps({"id": "1", "question": "Q?", "answer": "a", "supporting_titles": []}), "supporting_titles"),
    (json.dumps({"id": "1", "question": "Q?", "answer": "a", "supporting_titles": ["A"],
                 "answer_aliases": "b"}), "answer_aliases"),
    (json.dumps([1, 2]), "expected a JSON object"),
])
def test_bad_lines_are_named(tmp_path, line, message):
    path = tmp_path / "q.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(InputError, match=message.replace("?", r"\?")):
        load_questions(path)


def test_duplicate_ids_and_empty_files(tmp_path):
    path = tmp_path / "q.jsonl"
    row = json.dumps({"id": "1", "question": "Q?", "answer": "a", "supporting_titles": ["A"]})
    path.write_text(row + "\n" + row + "\n")
    with pytest.raises(InputError, match=r"q.jsonl:2: duplicate question id"):
        load_questions(path)
    path.write_text("\n")
    with pytest.raises(InputError, match="no questions"):
        load_questions(path)


def test_corpus_name_follows_content(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text('[{"title": "x", "text": "y"}]')
    b.write_text('[{"title": "x", "text": "y"}]')
    assert corpus_name_for(a) == corpus_name_for(b)
    b.write_text('[{"title": "x", "text": "z"}]')
    assert corpus_name_for(a) != corpus_name_for(b)
