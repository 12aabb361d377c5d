"""`pgrag eval --out`: the aggregates in the report, the per-question rows beside it."""

from __future__ import annotations

import json

from pgrag.bench.evaluate import questions_path, write_report


def test_report_keeps_aggregates_and_rows_go_beside_it(tmp_path):
    rows = [{"id": "q1", "method": "bm25", "retrieved": ["A", "B"]},
            {"id": "q2", "method": "bm25", "retrieved": ["C"], "note": "ünïcode"}]
    data = {"questions": 2, "ks": [2, 5], "methods": {"bm25": {"recall@2": 50.0}}, "per_question": rows}
    out = tmp_path / "eval.json"
    path = write_report(data, out)
    assert path == questions_path(out) == tmp_path / "eval.questions.jsonl"
    assert json.loads(out.read_text()) == {"questions": 2, "ks": [2, 5], "methods": {"bm25": {"recall@2": 50.0}}}
    assert [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] == rows
    assert data["per_question"] == rows                           # the caller's report is left whole


def test_table_shows_intervals_and_recall_by_type():
    from pgrag.bench.report import markdown_report, markdown_table, type_table

    method = {"recall@2": 50.0, "recall@5": 75.0, "interval@2": [40.0, 60.0], "interval@5": [66.5, 83.25],
              "em": None, "f1": None, "latency_ms_p50": 1.0, "latency_ms_p95": 2.0, "llm_prompt_tokens": 0,
              "llm_completion_tokens": 0,
              "recall_by_type": {"2hop": {"questions": 3, "recall@2": 66.67, "recall@5": 100.0,
                                          "interval@2": [33.33, 100.0], "interval@5": [100.0, 100.0]},
                                 "3hop": {"questions": 1, "recall@2": 0.0, "recall@5": 0.0}}}
    report = {"questions": 4, "ks": [2, 5], "depth": 20, "methods": {"tigrag": method},
              "corpus": {"file": "c.json", "documents": 1, "chunks": 1, "embedding_model": "m", "index_seconds": 1}}
    table = markdown_table(report)
    assert table.startswith("| method | R@2 | R@5 | EM | F1 |") and "| R@2 95 % | R@5 95 % |" in table
    assert "| tigrag | 50.0 | 75.0 |" in table and "| 40.0–60.0 | 66.5–83.2 |" in table
    types = type_table(report).splitlines()
    assert types[0] == "| method | type | questions | R@2 | R@5 | R@2 95 % | R@5 95 % |"
    assert types[2:] == ["| tigrag | 2hop | 3 | 66.7 | 100.0 | 33.3–100.0 | 100.0–100.0 |",
                         "| tigrag | 3hop | 1 | 0.0 | 0.0 | – | – |"]
    assert "Recall@k by question type" in markdown_report(report)
    # a report written before the intervals existed renders as before
    old = {**report, "methods": {"tigrag": {k: v for k, v in method.items()
                                            if not k.startswith("interval") and k != "recall_by_type"}}}
    assert "95 %" not in markdown_table(old) and type_table(old) == ""


def test_tables_show_group_intervals_where_the_report_has_them():
    from pgrag.bench.report import markdown_report, markdown_table, type_table

    method = {"recall@2": 50.0, "recall@5": 75.0, "interval@2": [40.0, 60.0], "interval@5": [66.5, 83.25],
              "groups": 3, "group_interval@2": [30.0, 70.0], "group_interval@5": [50.0, 90.0],
              "em": None, "f1": None, "latency_ms_p50": 1.0, "latency_ms_p95": 2.0, "llm_prompt_tokens": 0,
              "llm_completion_tokens": 0,
              "recall_by_type": {"2hop": {"questions": 3, "recall@2": 66.67, "recall@5": 100.0,
                                          "interval@2": [33.33, 100.0], "interval@5": [100.0, 100.0],
                                          "groups": 2, "group_interval@2": [0.0, 100.0],
                                          "group_interval@5": [100.0, 100.0]},
                                 "3hop": {"questions": 1, "recall@2": 0.0, "recall@5": 0.0,
                                          "interval@2": [0.0, 0.0], "interval@5": [0.0, 0.0]}}}
    report = {"questions": 4, "ks": [2, 5], "depth": 20, "methods": {"tigrag": method},
              "corpus": {"file": "c.json", "documents": 1, "chunks": 1, "embedding_model": "m", "index_seconds": 1}}
    table = markdown_table(report)
    assert "| R@2 95 % | R@5 95 % | R@2 95 % by group | R@5 95 % by group |" in table
    assert "| 40.0–60.0 | 66.5–83.2 | 30.0–70.0 | 50.0–90.0 |" in table
    types = type_table(report).splitlines()
    assert types[0] == ("| method | type | questions | groups | R@2 | R@5 | R@2 95 % | R@5 95 % "
                        "| R@2 95 % by group | R@5 95 % by group |")
    assert types[2:] == [
        "| tigrag | 2hop | 3 | 2 | 66.7 | 100.0 | 33.3–100.0 | 100.0–100.0 | 0.0–100.0 | 100.0–100.0 |",
        "| tigrag | 3hop | 1 | 1 | 0.0 | 0.0 | 0.0–0.0 | 0.0–0.0 | – | – |"]
    assert "the 4 questions form 3 groups that share gold passages" in markdown_report(report)


def test_parse_failures_are_summed_per_method_and_shown():
    """Each question's trace counts its structured replies and the ones that did
    not parse; the report sums them per method and its Markdown shows them."""
    from pgrag.bench.evaluate import _aggregate, _method_json
    from pgrag.bench.report import llm_table, markdown_report

    def row(replies, failed, constrained):
        return {"recall@2": 50.0, "recall@5": 100.0, "em": None, "f1": None, "latency_ms": 10.0,
                "prompt_tokens": 300, "completion_tokens": 20, "llm_calls": replies, "llm_replies": replies,
                "parse_failures": failed, "constrained_calls": constrained, "outcome": {}, "rounds": None,
                "resolved": None, "type": None, "gold": ["A"]}

    method = _method_json(_aggregate([row(3, 0, 3), row(2, 1, 2)], (2, 5)))
    assert (method["llm_calls"], method["llm_replies"], method["parse_failures"], method["constrained_calls"]) == (
        5, 5, 1, 5)
    report = {"questions": 2, "ks": [2, 5], "depth": 20, "methods": {"tigrag-reader": method, "bm25": {
        **method, "llm_calls": 0}},
              "corpus": {"file": "c.json", "documents": 1, "chunks": 1, "embedding_model": "m", "index_seconds": 1}}
    lines = llm_table(report).splitlines()
    assert lines[0] == ("| method | LLM calls/q | prompt tokens/q | completion tokens/q | structured replies | "
                        "parse failures | parse failures % | constrained requests |")
    assert lines[2:] == ["| tigrag-reader | 2.50 | 300 | 20 | 5 | 1 | 20.0 | 5 |"]   # bm25 called no LLM
    assert "LLM calls and structured replies" in markdown_report(report)
