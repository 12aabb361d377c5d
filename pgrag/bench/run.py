"""One ``pgrag eval`` run from start to end: its reader (an LLM, the oracle, or
none), the corpus prepared once, the report, and with the oracle the failed
questions. pgrag.bench.evaluate holds the pieces; this puts them in order."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import methods as method_registry
from . import evaluate

if TYPE_CHECKING:
    from ..database import Database
    from ..llm import LLMSettings


@dataclass(frozen=True, kw_only=True)
class EvalRun:
    """What a run leaves: the report (as JSON) and the requests the oracle refused."""

    data: dict[str, Any]
    oracle_errors: list[str] = field(default_factory=list)


def run_eval(db: "Database", corpus_file: Path, questions_file: Path, questions: Sequence[evaluate.Question],
             method_names: list[str], *, ks: Sequence[int], llm: "LLMSettings", depth: int | None = None,
             extract: str | None = None, oracle: bool = False, failures: Path | None = None,
             progress: bool = True, keep_cache: bool = False, untitled: bool = False) -> EvalRun:
    """Compare ``method_names`` on the corpus of ``corpus_file`` (indexed once,
    then reused) and ``questions``, loaded from ``questions_file`` (the oracle
    reads their gold evidence there).

    The answering methods get ``llm`` when it is configured, or with ``oracle``
    the oracle reader (pgrag.bench.oracle), whose failed questions are written
    to ``failures`` (JSONL) when given. Methods that search propositions get a
    spaCy extraction unless ``extract`` names another extractor.

    The model runtime's vector cache is off while the methods run, unless
    ``keep_cache`` (pgrag.bench.timing.cache): the methods ask the same
    questions in turn, and the later ones would find the question's vector
    there and report a latency without its encoding. ``untitled``: the corpus
    stored without its documents' titles (pgrag.bench.evaluate)."""
    from .timing.cache import runtime_cache

    name = evaluate.corpus_name_for(corpus_file, untitled)
    with contextlib.ExitStack() as stack:
        server = None
        client = None
        if oracle:
            from . import oracle as oracle_mod

            golds = {g.id: g for g in oracle_mod.load_gold(questions_file)}
            server = stack.enter_context(oracle_mod.OracleServer([golds[q.id] for q in questions]))
            client = db.corpus(name).llm(server.settings())
            stack.callback(server.forget, db, client.corpus_id)
        elif extract == "llm" or llm.configured:  # replies are cached in the eval corpus
            client = db.corpus(name).llm(llm)
        if extract is None and method_registry.needs_triples(method_names):
            extract = "spacy"  # the proposition index T2RAG searches; built once, then reused
        kb, corpus = evaluate.prepare_corpus(db, corpus_file, extract=extract, methods=method_names,
                                             llm=None if oracle else client, progress=progress, untitled=untitled)
        with runtime_cache(db.dsn, keep_cache) as cache:
            report = evaluate.evaluate(kb, corpus, questions, method_names, ks=ks, depth=depth, llm=client,
                                       progress=progress, traces=oracle, reader="oracle" if oracle else None,
                                       titles=evaluate.document_titles(corpus_file) if untitled else None)
        data = {**report.to_json(), **cache}
        if server is None:
            return EvalRun(data=data)
        records = oracle_mod.failures(data, server.oracle.log)
        if failures:
            _write_jsonl(failures, records)
        return EvalRun(data=data, oracle_errors=list(server.errors))


def _write_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    with path.open("w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
