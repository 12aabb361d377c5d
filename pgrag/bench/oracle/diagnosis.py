"""Where a loop lost the hop: each failed question of the loop methods labelled
from the oracle's log of its prompts."""

from __future__ import annotations

from typing import Any

from .reader import ANSWER_KINDS

LOOP_METHODS = ("t2rag", "cirag", "threadrag")


def diagnose(calls: list[dict[str, Any]], triples: int, *, correct: bool) -> str:
    """Where a failed question lost its evidence, from the oracle's log of the
    method's prompts: ``no_llm_call`` (the loop never asked), ``never_retrieved``
    (some gold triple was supported by no prompt: the evidence never came),
    ``dropped`` (every triple was in some prompt but no answer prompt held them
    all: retrieved, then not carried forward), ``ranked_out`` (answered, but a
    gold document is not among the top-k hits), ``answered`` (the answer prompt
    held everything; the answer still missed, e.g. a normalisation mismatch)."""
    if not calls:
        return "no_llm_call"
    if correct:
        return "ranked_out"
    seen = {t for c in calls for t in c["supported"]}
    if len(seen) < triples:
        return "never_retrieved"
    if not any(c["kind"] in ANSWER_KINDS and len(c["supported"]) == triples for c in calls):
        return "dropped"
    return "answered"


def failures(report: dict[str, Any], log: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The per-question records of the loop methods' failures (EM below 100, or
    a gold document missing from the top max-k documents), each with the
    method's trace (taken out of ``report["per_question"]``), the oracle's
    calls for it and a ``diagnose`` label; also sets ``report["failures"]``
    (label counts per method)."""
    top = f"recall@{max(report['ks'])}"
    out: list[dict[str, Any]] = []
    counts: dict[str, dict[str, int]] = {}
    for row in report["per_question"]:
        trace = row.pop("trace", None)
        if row["method"] not in LOOP_METHODS:
            continue
        correct = (row.get("em") or 0) >= 100
        if correct and row[top] >= 100:
            continue
        calls = [c for c in log.get(row["id"], []) if c["kind"].startswith(row["method"] + "_")]
        triples = calls[0]["triples"] if calls else 0
        label = diagnose(calls, triples, correct=correct)
        counts.setdefault(row["method"], {}).setdefault(label, 0)
        counts[row["method"]][label] += 1
        out.append({**row, "diagnosis": label, "oracle_calls": calls, "trace": trace})
    report["failures"] = {m: dict(sorted(c.items())) for m, c in counts.items()}
    return out
