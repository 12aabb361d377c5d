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
