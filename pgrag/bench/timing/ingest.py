"""``pgrag bench ingest``: one ingest's wall time split into neural embedding,
spaCy and everything else, and the CPU it used against what the cores allow."""

from __future__ import annotations

import hashlib
import os
import platform
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...database import Database
from ...sources import load_path
from .capacity import cores, machine_busy_s, process_cpu_s


def ingest_benchmark(db: Database, corpus_file: Path, *, limit: int | None = None,
                     batch_size: int | None = None, progress: bool = True,
                     methods: Sequence[str] = (), model_runtimes: Sequence[str | None] = (None,)) -> dict[str, Any]:
    """Ingest ``corpus_file`` into a fresh corpus and report the split of the wall
    time: neural embedding, spaCy (sentences, NER) and everything else. The corpus
    maintains the families ``methods`` need (ThreadRAG's semantic nodes, whose
    share is ``node_embedding_seconds``), else none. ``model_runtimes``: one
    ingest per entry with this process's models there (config.set_model_runtime;
    None: as configured), side by side as "runs" when there are several."""
    from ...config import set_model_runtime

    runs = []
    for runtime in model_runtimes:
        set_model_runtime(runtime)
        try:
            runs.append({"model_runtime": runtime or "as configured",
                         **_ingest_run(db, corpus_file, limit, batch_size, progress, methods)})
        finally:
            set_model_runtime(None)
    return runs[0] if len(runs) == 1 else {"runs": runs}


def _ingest_run(db: Database, corpus_file: Path, limit: int | None, batch_size: int | None, progress: bool,
                methods: Sequence[str]) -> dict[str, Any]:
    docs = load_path(corpus_file)
    if limit:
        docs = docs[:limit]
    digest = hashlib.sha256(corpus_file.read_bytes()).hexdigest()[:12]
    name = f"bench-ingest-{digest}-{len(docs)}"
    if any(c["name"] == name for c in db.corpora()):
        db.drop_corpus(name)
    kb = db.corpus(name)
    runtime = _runtime_pid(kb.embedder)  # also loads the model before the clock starts
    before = _cpu(runtime)
    t0 = time.perf_counter()
    report = kb.ingest(docs, batch_size=batch_size, progress=progress, methods=methods)
    cpu = _cpu_used(before, _cpu(runtime), time.perf_counter() - t0)
    return {
        "corpus_file": str(corpus_file),
        "corpus": name,
        "documents": report.added,
        "sentences": report.sentences,
        "chunks": report.chunks,
        "entities": report.entities,
        "families": list(kb.families),
        "semantic_nodes": report.nodes,
        "node_embedding_seconds": round(report.node_embedding_seconds, 3),
        "name_vectors": report.names,
        "name_embedding_seconds": round(report.name_embedding_seconds, 3),
        "total_seconds": round(report.total_seconds, 3),
        "embedding_seconds": round(report.embedding_seconds, 3),
        "nlp_seconds": round(report.nlp_seconds, 3),
        "other_seconds": round(report.other_seconds, 3),
        "other_to_embedding": round(report.other_seconds / report.embedding_seconds, 4)
        if report.embedding_seconds else None,
        "docs_per_second": round(report.added / report.total_seconds, 2) if report.total_seconds else None,
        "cpu": cpu,
        "embedding_model": kb.info.embedding_model,
        "machine": {"python": platform.python_version(), "processor": platform.machine(),
                    "cpus": os.cpu_count()},
    }


def _runtime_pid(embedder: Any) -> int | None:
    """The pid of the model runtime that ``embedder`` calls (None: models in process)."""
    from ...model_client import RemoteEmbedder, health

    if not isinstance(embedder, RemoteEmbedder):
        return None
    pid = health(embedder.target).get("pid")
    return int(pid) if pid else None


def _cpu(runtime: int | None) -> dict[str, float | None]:
    try:
        runtime_s = process_cpu_s(runtime) if runtime else 0.0
    except (OSError, ValueError, IndexError):
        runtime_s = None    # another user's process: its CPU is in "rest"
    return {"busy": machine_busy_s(), "client": time.process_time(), "runtime": runtime_s}


def _cpu_used(before: dict[str, float | None], after: dict[str, float | None], seconds: float) -> dict[str, Any]:
    """CPU seconds of this client, the model runtime and the rest of the machine
    (the server's backends, and whatever else ran) over the ingest, and the floor
    they set: their sum spread evenly over the cores. ``busy_share`` near 1 says
    the cores were full, so only less CPU work makes the ingest faster."""
    used = {k: _delta(after[k], before[k]) for k in before}
    busy = used["busy"]
    if busy is None:
        return {"error": "/proc/stat is not readable here"}
    n = cores()
    client, runtime = used["client"] or 0.0, used["runtime"] or 0.0
    return {"cores": n, "busy_seconds": round(busy, 1), "client_seconds": round(client, 1),
            "runtime_seconds": None if used["runtime"] is None else round(runtime, 1),
            "rest_seconds": round(busy - client - runtime, 1),
            "busy_share": round(busy / (seconds * n), 3) if seconds else None,
            "floor_seconds": round(busy / n, 1)}


def _delta(after: float | None, before: float | None) -> float | None:
    return None if after is None or before is None else after - before
