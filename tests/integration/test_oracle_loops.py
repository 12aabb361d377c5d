"""T2RAG, CIRAG and ThreadRAG driven by the oracle reader (pgrag.bench.oracle) over
HTTP, on the bundled 2WikiMultiHopQA sample (real passages, real embeddings,
spaCy triples): two-hop questions reach the gold answer through each loop, a
corpus without the second hop's passage does not, and ``pgrag eval --oracle``
reports the loops' figures and their failures."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest
from click.testing import CliRunner

from pgrag.bench.oracle import ANSWER_KINDS, Gold, OracleServer
from pgrag.cli import main

DATA = Path(str(resources.files("pgrag") / "data"))
CORPUS = DATA / "sample_corpus.json"
BENCH = Path(__file__).resolve().parents[2] / ".." / "shared" / "bench" / "2wiki"

# The gold records of three sample questions (../shared/bench/2wiki/questions.jsonl).
GOLD = [
    Gold(id="83bf3b5a0bd911eba7f7acde48001122", type="compositional", question="When did Lothair Ii's mother die?",
         answer="20 March 851", supporting_titles=("Lothair II", "Ermengarde of Tours"),
         evidences=(("Lothair II", "mother", "Ermengarde of Tours"),
                    ("Ermengarde of Tours", "date of death", "20 March 851"))),
    Gold(id="2dc690ba0bdc11eba7f7acde48001122", type="compositional",
         question="What is the place of birth of the performer of song Changed It?", answer="Port of Spain",
         supporting_titles=("Changed It", "Nicki Minaj"),
         evidences=(("Changed It", "performer", "Nicki Minaj"), ("Nicki Minaj", "place of birth", "Port of Spain"))),
    Gold(id="a80d84e7096d11ebbdb0ac1f6bf848b6", type="comparison",
         question="Which film was released first, Aas Ka Panchhi or Phoolwari?", answer="Phoolwari",
         supporting_titles=("Aas Ka Panchhi", "Phoolwari"),
         evidences=(("Aas Ka Panchhi", "publication date", "1961"), ("Phoolwari", "publication date", "1946"))),
]
METHODS = ("t2rag", "cirag", "threadrag")
FINISHED = {"t2rag": {"natural"}, "threadrag": {"sufficient"}, "cirag": {"natural", "repeat", "cap"}}


def sample() -> list[dict]:
    return json.loads(CORPUS.read_text(encoding="utf-8"))


def run(kb, method: str, gold: Gold):
    with OracleServer([gold]) as server:
        hits = kb.retrieve(gold.question, method=method, k=5, llm=kb.llm(server.settings()))
    assert not server.errors, server.errors
    return hits, server.oracle.log.get(gold.id, [])


@pytest.mark.slow
def test_two_hop_questions_reach_the_gold_answer_through_each_loop(db):
    kb = db.corpus("oracle", methods=METHODS)
    kb.ingest(sample(), progress=False, extract_triples="spacy")
    wrong = {}
    for gold in GOLD:
        for method in METHODS:
            hits, calls = run(kb, method, gold)
            answered = [c for c in calls if c["kind"] in ANSWER_KINDS and c["supported"] == [0, 1]]
            # T2RAG resolved every placeholder, ThreadRAG found the evidence sufficient.
            finish = hits.trace.outcome.get("finish")
            if hits.answer != gold.answer or not answered or finish not in FINISHED[method]:
                wrong[(method, gold.question)] = (hits.answer, dict(hits.trace.outcome), calls)
            # The answer needs both hops' evidence, which the loop retrieved.
            assert {c["kind"].split("_")[0] for c in calls} == {method}
    assert not wrong, wrong


@pytest.mark.slow
def test_without_the_second_hop_passage_no_loop_reaches_the_answer(db):
    kb = db.corpus("oracle-no-hop2", methods=METHODS)
    kb.ingest([d for d in sample() if d["title"] != "Ermengarde of Tours"], progress=False, extract_triples="spacy")
    for method in METHODS:
        hits, calls = run(kb, method, GOLD[0])
        assert hits.answer != GOLD[0].answer, method
        assert all(1 not in c["supported"] for c in calls), method


def test_cli_eval_with_the_oracle_reports_loops_and_failures(database_uri, tmp_path):
    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(json.dumps({
        "id": g.id, "type": g.type, "question": g.question, "answer": g.answer,
        "supporting_titles": list(g.supporting_titles), "evidences": [list(e) for e in g.evidences]}) + "\n"
        for g in GOLD[:2]))
    out = tmp_path / "r.json"
    args = ["eval", "--corpus-file", str(CORPUS), "--questions", str(questions), "--methods", "bm25,t2rag,cirag",
            "--oracle", "--out", str(out), "--no-progress", "--dsn", database_uri]
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["reader"] == "oracle" and "upper bound under ideal reasoning" in result.output
    for method in ("t2rag", "cirag"):
        m = data["methods"][method]
        assert m["em"] == 100.0 and m["rounds"] > 1 and m["llm_calls"] >= 2 * 3, (method, m)   # a second hop
    assert data["methods"]["t2rag"]["resolved"] == 100.0 and data["methods"]["cirag"]["resolved"] is None
    assert data["methods"]["bm25"]["rounds"] is None
    assert "| t2rag |" in result.output.split("The LLM loops:")[1]
    rows = [json.loads(line) for line in out.with_name("r.questions.jsonl").read_text().splitlines()]
    assert rows and all("trace" not in row for row in rows)
    failures = [json.loads(line) for line in out.with_suffix(".failures.jsonl").read_text().splitlines()]
    # Every failure (a gold document outside the top 5, here) carries the trace and the oracle's calls.
    for f in failures:
        assert f["method"] in ("t2rag", "cirag") and f["diagnosis"] == "ranked_out" and f["trace"]["steps"]
        assert f["oracle_calls"]
    assert sum(data["failures"].get(m, {}).get("ranked_out", 0) for m in ("t2rag", "cirag")) == len(failures)
    # The oracle's replies are not left in the LLM cache.
    import psycopg
    with psycopg.connect(database_uri) as conn:
        assert conn.execute("SELECT count(*) FROM pgrag.llm_cache WHERE model LIKE 'pgrag-oracle-%'").fetchone() == (0,)


def test_cli_eval_oracle_needs_evidences_and_no_other_llm(database_uri, tmp_path):
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"id": "x", "question": "Who?", "answer": "a", "supporting_titles": ["A"]}) + "\n")
    base = ["eval", "--corpus-file", str(CORPUS), "--questions", str(questions), "--methods", "t2rag", "--oracle",
            "--no-progress", "--dsn", database_uri]
    result = CliRunner().invoke(main, base)
    assert result.exit_code == 1 and "needs 'evidences'" in result.output
    result = CliRunner().invoke(main, [*base, "--llm", "http://127.0.0.1:9/v1"])
    assert result.exit_code == 2 and "does not combine" in result.output


@pytest.mark.slow
@pytest.mark.skipif(not (BENCH / "questions.jsonl").exists(),
                    reason="../shared/bench/2wiki is absent (the shared benchmark data)")
def test_bench_subset_with_the_oracle(database_uri, tmp_path):
    """The first 10 bench questions on their gold passages plus 150 others: every
    loop answers most of them and T2RAG ranks both hops' documents in its top 5."""
    import random

    golds = [json.loads(line) for line in (BENCH / "questions.jsonl").read_text().splitlines()[:10]]
    corpus = json.loads((BENCH / "corpus.json").read_text(encoding="utf-8"))
    titles = {t for g in golds for t in g["supporting_titles"]}
    rest = [d for d in corpus if d["title"] not in titles]
    docs = [d for d in corpus if d["title"] in titles] + random.Random(0).sample(rest, 150)
    corpus_file, questions = tmp_path / "c.json", tmp_path / "q.jsonl"
    corpus_file.write_text(json.dumps(docs))
    questions.write_text("".join(json.dumps(g) + "\n" for g in golds))
    out = tmp_path / "r.json"
    result = CliRunner().invoke(main, ["eval", "--corpus-file", str(corpus_file), "--questions", str(questions),
                                       "--methods", ",".join(METHODS), "--oracle", "--out", str(out),
                                       "--no-progress", "--dsn", database_uri], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    for method in METHODS:
        assert data["methods"][method]["em"] >= 50, (method, data["methods"][method])
    assert data["methods"]["t2rag"]["recall@5"] >= 70, data["methods"]["t2rag"]
