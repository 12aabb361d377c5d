"""CIRAG trajectory export (the paper's §3.5 data): the integration steps of CIRAG
runs as chat fine-tuning records. Fine-tuning itself happens elsewhere."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import prompts
from ..results import Hits
from .metrics import exact_match

if TYPE_CHECKING:
    from ..corpus import Corpus
    from ..llm import LLM
    from .evaluate import Question


def trajectory_lines(question_id: str, question: str, hits: Hits,
                     gold: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """One chat fine-tuning record per integration step of a CIRAG run:
    ``{"messages": [system, user, assistant], "meta": {...}}``, the assistant
    message being the integrator's decision as JSON. ``meta.correct`` (exact
    match of the final answer against ``gold``) lets a user keep only the
    trajectories that led to a right answer."""
    steps = [s for s in hits.trace.steps if s["step"] == "integrate"]
    correct = bool(exact_match(hits.answer, gold)) if gold and hits.answer is not None else None
    return [{
        "messages": [{"role": "system", "content": prompts.CIRAG_INTEGRATE_SYSTEM},
                     {"role": "user", "content": s["prompt"]},
                     {"role": "assistant", "content": json.dumps(s["decision"], ensure_ascii=False)}],
        "meta": {"question_id": question_id, "question": question, "round": s["round"], "query": s["query"],
                 "rounds": len(steps), "finish": hits.trace.outcome.get("finish"), "answer": hits.answer,
                 "granularity": hits.trace.outcome.get("granularity"), "correct": correct},
    } for s in steps]


@dataclass(frozen=True, kw_only=True)
class ExportReport:
    questions: int
    steps: int
    correct: int
    prompt_tokens: int
    completion_tokens: int


def export_trajectories(kb: "Corpus", questions: Sequence["Question"], llm: "LLM", out: Path, *,
                        k: int = 5, progress: bool = True, **options: Any) -> ExportReport:
    """Run CIRAG with ``llm`` (the teacher) on every question and write its
    integration steps to ``out`` as JSONL (see ``trajectory_lines``)."""
    from ..progress import tqdm

    steps = correct = prompt = completion = 0
    with Path(out).open("w", encoding="utf-8") as f:
        for q in tqdm(questions, desc="trajectories", unit="q", disable=not progress):
            hits = kb.retrieve(q.question, method="cirag", k=k, llm=llm, **options)
            lines = trajectory_lines(q.id, q.question, hits, q.answers)
            for line in lines:
                f.write(json.dumps(line, ensure_ascii=False) + "\n")
            steps += len(lines)
            correct += bool(lines and lines[0]["meta"]["correct"])
            prompt += hits.trace.prompt_tokens
            completion += hits.trace.completion_tokens
    return ExportReport(questions=len(questions), steps=steps, correct=correct, prompt_tokens=prompt,
                        completion_tokens=completion)
