"""`pgrag bench load`: concurrent clients through a psycopg_pool, a few seconds
on five documents (the 60 s, 8-client run on 2Wiki is in docs/SCALING.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from pgrag.cli import main

# A timed multi-client run after an ingest.
pytestmark = pytest.mark.slow

DATA = Path(__file__).resolve().parents[2] / "pgrag" / "data"
QUESTIONS = ["Who is the mother of Lothair II?", "Where was the performer of Changed It born?",
             "When did Ermengarde of Tours die?", "Which river runs through the valley?"]


def small_files(tmp_path: Path, docs: list[dict]) -> tuple[Path, Path]:
    corpus, questions = tmp_path / "corpus.json", tmp_path / "questions.jsonl"
    corpus.write_text(json.dumps(docs))
    questions.write_text("\n".join(json.dumps({"id": str(i), "question": q, "answer": "x",
                                               "supporting_titles": ["Lothair II"]})
                                   for i, q in enumerate(QUESTIONS)))
    return corpus, questions
KEYS = {"requests", "errors", "throughput_rps", "p50_ms", "p95_ms", "p99_ms", "rss_start_mb", "rss_end_mb"}


def test_bench_load_runs_mixed_methods_with_no_errors(database_uri, tmp_path, wiki_docs):
    out = tmp_path / "load.json"
    corpus, questions = small_files(tmp_path, wiki_docs)
    result = CliRunner().invoke(main, [
        "bench", "load", "--corpus-file", str(corpus),
        "--questions", str(questions), "--clients", "3", "--seconds", "3",
        "--methods", "dense,bm25,hybrid,tigrag,tigrag-1hop", "--dsn", database_uri, "--out", str(out)],
        catch_exceptions=False)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert KEYS <= set(data)
    assert data["errors"] == 0, data["error_samples"]
    assert data["requests"] > 0 and data["throughput_rps"] > 0
    assert all(m["requests"] > 0 for m in data["per_method"].values()), data["per_method"]
    assert data["p50_ms"] <= data["p95_ms"] <= data["p99_ms"]
    assert data["clients"] == 3 and 2.5 < data["seconds"] < 30


def test_bench_load_rejects_methods_without_a_sql_function(database_uri):
    result = CliRunner().invoke(main, [
        "bench", "load", "--corpus-file", str(DATA / "sample_corpus.json"),
        "--questions", str(DATA / "sample_questions.jsonl"), "--methods", "t2rag", "--dsn", database_uri])
    assert result.exit_code == 1
    assert "SQL methods" in result.output
