"""``pgrag bench queries``: query latency per method, in this process, through
SQL or both, with each p50 as a ratio to dense's from the same run."""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ... import methods
from ...database import Database
from ...exceptions import PgragError
from ...progress import tqdm
from ..metrics import percentile

VIAS = ("python", "sql", "both")


def query_benchmark(db: Database, corpus_file: Path, questions_file: Path, method_names: Sequence[str], *,
                    k: int = 10, warmup: int = 5, limit: int | None = None, via: str = "python",
                    keep_cache: bool = False, progress: bool = True) -> dict[str, Any]:
    """Query latency per method over a question set, after ``warmup`` untimed
    questions per method. Methods take turns on each question, so a noisy moment
    on a shared machine hits all of them alike; each p50 is also given as a ratio
    to dense's p50 from the same run (dense is always measured, as the yardstick).

    ``via``: ``python`` (``kb.retrieve`` in this process), ``sql`` (``pgrag.retrieve``
    from a plain psycopg connection: the same method code in the server) or
    ``both``, which also counts the questions on which both homes returned the same
    chunks. SQL entries are named ``<method>@sql``.

    The model runtime's vector cache is off for the run unless ``keep_cache``
    (pgrag.bench.timing.cache): each method then pays for its own encoding."""
    from ..evaluate import load_questions, prepare_corpus
    from .cache import runtime_cache

    if via not in VIAS:
        raise PgragError(f"via must be one of {', '.join(VIAS)}")
    for name in method_names:
        methods.get(name)
    kb, corpus = prepare_corpus(db, corpus_file, progress=progress,
                                methods=list(dict.fromkeys(["dense", *method_names])))
    questions = [q.question for q in load_questions(questions_file)[:limit]]
    with runtime_cache(db.dsn, keep_cache) as cache:
        timed = time_methods(db, kb, questions, method_names, k=k, warmup=warmup, via=via, progress=progress)
    return {**timed, **cache, "corpus_file": str(corpus_file), "corpus": corpus.name, "documents": corpus.documents,
            "chunks": corpus.chunks, "embedding_model": corpus.embedding_model,
            "machine": {"python": platform.python_version(), "processor": platform.machine(),
                        "cpus": os.cpu_count()}}


def time_methods(db: Database, kb: Any, questions: Sequence[str], method_names: Sequence[str], *,
                 k: int = 10, warmup: int = 5, via: str = "python", progress: bool = True) -> dict[str, Any]:
    """The timing loop of ``query_benchmark`` over an open corpus ``kb``."""
    import psycopg

    from ...queries import query

    names = list(dict.fromkeys(["dense", *method_names]))
    homes = ["python", "sql"] if via == "both" else [via]
    runs = [(name, home) for name in names for home in homes]
    label = {(n, h): n if h == "python" else f"{n}@sql" for n, h in runs}
    agree: dict[str, int] = {n: 0 for n in names}
    with psycopg.connect(db.dsn, autocommit=True) as conn:   # imports nothing of pgrag into the query

        def once(name: str, home: str, question: str) -> tuple[list[int], dict[str, float]]:
            if home == "python":
                hits = kb.retrieve(question, method=name, k=k)
                return [h.provenance.chunk_id for h in hits], hits.trace.timings_ms
            rows = conn.execute(query("retrieve_sql"), {"corpus": kb.name, "question": question, "method": name,
                                                        "k": k, "options": "{}"}).fetchall()
            return [r[1] for r in rows], {}

        for name, home in runs:
            for q in questions[:warmup]:
                once(name, home, q)
        times: dict[str, list[float]] = {label[r]: [] for r in runs}
        stages: dict[str, dict[str, float]] = {label[r]: {} for r in runs}
        for q in tqdm(questions, desc="bench queries", unit="q", disable=not progress):
            for name in names:
                seen = []
                for home in homes:
                    t0 = time.perf_counter()
                    ids, timings = once(name, home, q)
                    times[label[name, home]].append((time.perf_counter() - t0) * 1000)
                    seen.append(ids)
                    for stage, ms in timings.items():
                        stages[label[name, home]][stage] = (stages[label[name, home]].get(stage, 0.0)
                                                            + ms / len(questions))
                agree[name] += all(ids == seen[0] for ids in seen)
    dense_p50 = percentile(times[label["dense", homes[0]]], 50)
    extra: dict[str, Any] = {"via": via}
    if via == "both":
        extra["same_chunks"] = {n: f"{agree[n]}/{len(questions)}" for n in names}
        extra["sql_p50_to_python"] = {n: round(percentile(times[f"{n}@sql"], 50) / percentile(times[n], 50), 3)
                                      for n in names if times[n]}
    return {**extra,
        "questions": len(questions),
        "k": k,
        "warmup": warmup,
        "methods": {
            name: {
                "latency_ms_p50": round(percentile(ts, 50), 2),
                "latency_ms_p95": round(percentile(ts, 95), 2),
                "p50_to_dense": round(percentile(ts, 50) / dense_p50, 3) if dense_p50 else None,
                "stage_ms_mean": {stage: round(ms, 2) for stage, ms in stages[name].items()},
            }
            for name, ts in times.items()
        },
    }
