"""Published question sets turned into pgrag eval's corpus and questions
(pgrag.bench.datasets, `pgrag bench convert`)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from pgrag.bench import datasets
from pgrag.bench.evaluate import load_questions
from pgrag.cli import main
from pgrag.exceptions import InputError
from pgrag.sources import validate


def musique(qid: str, question: str, paragraphs: list[tuple[str, str, bool]], steps: list[int]) -> dict:
    return {"id": qid, "question": question, "answer": "Ada", "answer_aliases": ["A."],
            "paragraphs": [{"idx": i, "title": t, "paragraph_text": text, "is_supporting": gold}
                           for i, (t, text, gold) in enumerate(paragraphs)],
            "question_decomposition": [{"id": n, "question": f"step {n}", "answer": f"a{n}",
                                        "paragraph_support_idx": idx} for n, idx in enumerate(steps)]}


MUSIQUE = [
    musique("2hop__1_2", "Who founded the lab that made X?",
            [("X", "X was made by the Lab.", True), ("Lab", "The Lab was founded by Ada.", True),
             ("Publix", "Publix is a grocery chain.", False)], [0, 1]),
    musique("3hop1__3_4_5", "Where was the founder of Y born?",
            [("Publix", "Publix is a grocery chain.", False),            # the same passage again
             ("Publix", "Publix employs 193,000 people.", True),         # the same title, another passage
             ("Y", "Y was founded by Bob.", True)], [2, 1]),
]


def test_musique_questions_and_one_corpus_of_distinct_passages():
    converted = datasets.convert(MUSIQUE, "musique")
    assert [p["title"] for p in converted.corpus] == ["X", "Lab", "Publix", "Publix", "Y"]
    # one id each: a second passage of a title gets a numbered id, the title is kept
    assert [p["id"] for p in converted.corpus] == ["X", "Lab", "Publix", "Publix #2", "Y"]
    first, second = converted.questions
    assert first["type"] == "2hop" and second["type"] == "3hop"
    assert first["supporting_titles"] == ["X", "Lab"]
    assert second["supporting_titles"] == ["Publix", "Y"]
    assert first["answer_aliases"] == ["A."]
    assert [(s["title"], s["corpus_index"]) for s in second["question_decomposition"]] == [("Y", 4), ("Publix", 3)]


def test_hotpotqa_and_2wiki_context():
    hotpot = {"_id": "h1", "type": "bridge", "question": "Q?", "answer": "yes",
              "context": [["A", ["A is one.", " It is two."]], ["B", ["B is three."]]],
              "supporting_facts": [["B", 0], ["A", 1], ["B", 0]]}
    wiki = {"_id": "w1", "type": "compositional", "question": "R?", "answer": "no",
            "context": [["C", ["C is four.", "It is five."]], ["A", ["A is one.", " It is two."]]],
            "supporting_facts": [["C", 1]]}
    converted = datasets.convert([hotpot, wiki], "hotpotqa")
    assert converted.corpus[0]["text"] == "A is one. It is two."
    assert converted.corpus[2]["text"] == "C is four. It is five."     # 2Wiki's sentences get their space
    assert len(converted.corpus) == 3                                   # A once
    assert converted.questions[0]["supporting_titles"] == ["B", "A"]
    assert converted.questions[1]["type"] == "compositional"


@pytest.mark.parametrize("record, message", [
    ({**MUSIQUE[0], "paragraphs": [{"idx": 0, "title": "X", "paragraph_text": "x", "is_supporting": False}]},
     "2hop__1_2: no supporting paragraph"),
    ({**MUSIQUE[0], "question": " "}, "'question' must be a non-empty string"),
    ({**MUSIQUE[0], "paragraphs": ["X"]}, "2hop__1_2: a paragraph is not a JSON object"),
])
def test_a_bad_musique_question_is_named(record, message):
    with pytest.raises(InputError, match=message):
        datasets.convert([record], "musique")


@pytest.mark.parametrize("change, message", [
    ({"context": [["A", "a."]]}, "a context entry is not"),
    ({"supporting_facts": ["A"]}, "a supporting fact is not"),
])
def test_a_malformed_context_question_is_named(change, message):
    record = {"_id": "h3", "question": "Q?", "answer": "a", "context": [["A", ["a."]]],
              "supporting_facts": [["A", 0]], **change}
    with pytest.raises(InputError, match=f"h3: {message}"):
        datasets.convert([record], "hotpotqa")


def test_gold_outside_the_context_is_refused():
    record = {"_id": "h2", "question": "Q?", "answer": "a", "context": [["A", ["a."]]],
              "supporting_facts": [["Z", 0]]}
    with pytest.raises(InputError, match="h2: supporting passages not in its context: Z"):
        datasets.convert([record], "2wiki")


def test_the_cli_writes_what_eval_and_ingest_read(tmp_path):
    source = tmp_path / "musique_train.json"
    source.write_text(json.dumps(MUSIQUE))
    tuning = tmp_path / "tuning.jsonl"
    tuning.write_text(json.dumps({"id": "2hop__1_2", "question": "Q?", "answer": "a",
                                  "supporting_titles": ["X"]}) + "\n")
    out = tmp_path / "set"
    result = CliRunner().invoke(main, ["bench", "convert", str(source), "--format", "musique",
                                       "--out", str(out), "--without", str(tuning)])
    assert result.exit_code == 0, result.output
    assert "1 questions" in result.output and "1 left out" in result.output and "5 passages" in result.output
    [question] = load_questions(out / "questions.jsonl")
    assert question.id == "3hop1__3_4_5" and question.type == "3hop"
    documents = validate(json.loads((out / "corpus.json").read_text()))
    assert len(documents) == 5                     # ingest takes both Publix passages


def test_leaving_out_every_question_is_an_error():
    with pytest.raises(InputError, match="every question"):
        datasets.without(datasets.convert(MUSIQUE[:1], "musique"), {"2hop__1_2"})
