"""The bundled sample: a few dozen 2WikiMultiHopQA passages and questions
(see pgrag/data/ATTRIBUTION.md), ingested and queried with every method."""

from __future__ import annotations

import contextlib
import dataclasses
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


@contextlib.contextmanager
def local_llm(settings: "LLMSettings") -> Iterator["LLMSettings"]:
    """The bundled SmolLM2 server (pgrag.local_llm) for the duration of the
    block, as ``settings`` for the answering methods."""
    from . import local_llm as local

    with local.running() as url:
        # A tiny model rambles: cap its replies so the demo stays a few minutes long.
        yield dataclasses.replace(settings, base_url=url, model=local.MODEL_ALIAS, max_tokens=160)


@contextlib.contextmanager
def reader_llm(settings: "LLMSettings", threads: int = 2) -> Iterator["LLMSettings"]:
    """The benchmark reader model (Qwen2.5-Coder-1.5B-Instruct, fetched with
    ``pgrag bench reader-model fetch``; pgrag.bench.reader_model) served for the
    duration of the block, as ``settings`` for the answering methods. ``ConfigError``
    when the file is absent or not the pinned model."""
    from .bench import reader_model

    with reader_model.running(threads=threads) as url:
        yield dataclasses.replace(settings, base_url=url, model=reader_model.ALIAS, max_tokens=256)


def sql_hits(db: Database, corpus: str, question: str, k: int) -> list[tuple[Any, ...]]:
    """``question`` asked from SQL alone (pgrag.retrieve with tigrag), as an
    application in any language asks it: the rows of pgrag.retrieve.
    Raises psycopg.Error where the server cannot (no in-server runtime)."""
    import psycopg

    from .queries import query

    with psycopg.connect(db.dsn, autocommit=True) as conn:
        return conn.execute(query("retrieve_sql"), {"corpus": corpus, "question": question, "method": "tigrag",
                                                    "k": k, "options": "{}"}).fetchall()


def sql_answer(db: Database, corpus: str, question: str, settings: "LLMSettings") -> tuple[Any, ...]:
    """``question`` answered in the server (pgrag.answer with t2rag), the LLM of
    ``settings`` set for the session: (answer, finish, llm_calls).
    Raises psycopg.Error where the server cannot."""
    import psycopg

    with psycopg.connect(db.dsn, autocommit=True) as conn:
        for name, value in (("base_url", settings.base_url), ("model", settings.model),
                            ("api_key", settings.api_key)):
            if value:
                conn.execute("SELECT set_config(%s, %s, false)", (f"pgrag.llm_{name}", value))
        row = conn.execute("SELECT answer, finish, llm_calls FROM pgrag.answer(%s, %s, 't2rag')",
                           (corpus, question)).fetchone()
    assert row is not None   # pgrag.answer returns one row
    return tuple(row)
