"""The bundled sample: a few dozen 2WikiMultiHopQA passages and questions
(see pgrag/data/ATTRIBUTION.md), ingested and queried with every method."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

from . import methods
from .database import Database
from .ingest import IngestReport
from .results import Hits

if TYPE_CHECKING:
    from .llm import LLMSettings

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


def run(db: Database, *, k: int = 3, llm: "LLMSettings | None" = None,
        progress: bool = True) -> tuple[IngestReport, Iterator[DemoAnswer]]:
    """Ingest the sample corpus (a no-op when already there), with spaCy triples
    for the proposition-based methods, and ask every question with every main
    method; answering methods use ``llm`` (else PGRAG_LLM_*, else none). The
    answers come lazily, so a caller can show each as soon as it exists."""
    kb = db.corpus(SAMPLE_CORPUS)
    names = methods.names(variants=False)
    # methods=names: every family they need (ThreadRAG's nodes) is built by this
    # ingest, or backfilled for a sample ingested without it.
    report = kb.ingest(sample_documents(), progress=progress, methods=names,
                       extract_triples="spacy" if methods.needs_triples(names) else False)
    client = kb.llm(llm) if llm is not None and llm.configured else None

    def answers() -> Iterator[DemoAnswer]:
        for q in sample_questions():
            for m in names:
                options = {"llm": client} if client is not None and methods.takes_option(m, "llm") else {}
                yield DemoAnswer(question=q, method=m, hits=kb.retrieve(q["question"], method=m, k=k, **options))

    return report, answers()
