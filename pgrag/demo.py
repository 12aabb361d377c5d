"""The bundled sample: a few dozen 2WikiMultiHopQA passages and questions
(see pgrag/data/ATTRIBUTION.md), ingested and queried with every method."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

from . import methods
from .db import Database
from .ingest import IngestReport
from .results import Hits

SAMPLE_CORPUS = "pgrag-sample"


def _data(name: str) -> str:
    return (resources.files("pgrag") / "data" / name).read_text(encoding="utf-8")


def sample_documents() -> list[dict[str, Any]]:
    return json.loads(_data("sample_corpus.json"))


def sample_questions() -> list[dict[str, Any]]:
    return [json.loads(line) for line in _data("sample_questions.jsonl").splitlines() if line.strip()]


@dataclass(frozen=True, kw_only=True)
class DemoAnswer:
    question: dict[str, Any]
    method: str
    hits: Hits


def run(db: Database, *, k: int = 3, progress: bool = True) -> tuple[IngestReport, list[DemoAnswer]]:
    """Ingest the sample corpus (a no-op when already there) and ask every question
    with every available method."""
    kb = db.corpus(SAMPLE_CORPUS)
    report = kb.ingest(sample_documents(), progress=progress)
    kb.build_semantic_nodes(progress=progress)   # ThreadRAG, for a sample ingested before nodes existed
    answers = [
        DemoAnswer(question=q, method=m, hits=kb.retrieve(q["question"], method=m, k=k))
        for q in sample_questions()
        for m in methods.names(variants=False)
    ]
    return report, answers
