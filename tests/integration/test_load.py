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
    # what the cores allow: each method alone, CPU a request by process
    capacity = data["capacity"]
    assert "error" not in capacity, capacity
    alone = capacity["methods"]
    assert set(alone) == set(data["per_method"]) and all(m["requests"] == 40 for m in alone.values())
    for m in alone.values():
        assert m["cpu_ms"] == pytest.approx(m["backend_cpu_ms"] + m["runtime_cpu_ms"] + m["client_cpu_ms"], abs=0.03)
    assert alone["tigrag"]["backend_cpu_ms"] + alone["tigrag"]["runtime_cpu_ms"] > 0
    mix = sum(m["cpu_ms"] for m in alone.values()) / len(alone)
    assert capacity["mix_cpu_ms"] == pytest.approx(mix, abs=0.01)
    assert capacity["capacity_rps"] == pytest.approx(1000 * capacity["cores"] / mix, rel=1e-3)
    assert data["capacity_fraction"] == pytest.approx(data["throughput_rps"] / capacity["capacity_rps"], abs=1e-3)
    assert 0 < data["cores_busy"] <= 1.05 and data["machine_cpu_ms_per_request"] > 0
    assert 0 < data["stack_cpu_ms_per_request"] <= data["machine_cpu_ms_per_request"] * 1.05
    assert data["capacity_fraction"] <= data["capacity_fraction_of_free_cores"]
    # the runtime's vector cache is off for the run: every text runs the model
    assert data["runtime_cache"] == "off" and data["runtime_texts"] > 0 and data["runtime_cache_hits"] == 0


def test_bench_load_keeps_the_runtime_cache_when_asked(database_uri, tmp_path, wiki_docs):
    """Four questions asked again and again: after the first round their texts
    come from the runtime's cache."""
    out = tmp_path / "load.json"
    corpus, questions = small_files(tmp_path, wiki_docs)
    result = CliRunner().invoke(main, [
        "bench", "load", "--corpus-file", str(corpus), "--questions", str(questions), "--clients", "2",
        "--seconds", "2", "--methods", "tigrag", "--no-capacity", "--runtime-cache", "--dsn", database_uri,
        "--out", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["runtime_cache"] == "kept" and data["errors"] == 0
    assert data["runtime_texts"] > 0 and 0.5 < data["runtime_cache_share"] <= 1
    assert data["runtime_cache_share"] == pytest.approx(data["runtime_cache_hits"] / data["runtime_texts"], abs=1e-3)


def test_bench_load_rejects_methods_without_a_sql_function(database_uri):
    result = CliRunner().invoke(main, [
        "bench", "load", "--corpus-file", str(DATA / "sample_corpus.json"),
        "--questions", str(DATA / "sample_questions.jsonl"), "--methods", "t2rag", "--dsn", database_uri])
    assert result.exit_code == 1
    assert "SQL methods" in result.output
