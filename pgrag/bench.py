"""Benchmarks (``pgrag bench``): wall-clock figures and ratios from one run.

Timings belong here, not in unit tests: these machines are shared and noisy, so
the figures to compare are ratios measured within the same run.
"""

from __future__ import annotations

import hashlib
import platform
from pathlib import Path
from typing import Any

from .db import Database
from .sources import load_path


def ingest_benchmark(db: Database, corpus_file: Path, *, limit: int | None = None,
                     batch_size: int | None = None, progress: bool = True) -> dict[str, Any]:
    """Ingest ``corpus_file`` into a fresh corpus and report the split of the wall
    time: neural embedding, spaCy (sentences, NER) and everything else."""
    docs = load_path(corpus_file)
    if limit:
        docs = docs[:limit]
    digest = hashlib.sha256(corpus_file.read_bytes()).hexdigest()[:12]
    name = f"bench-ingest-{digest}-{len(docs)}"
    if any(c["name"] == name for c in db.corpora()):
        db.drop_corpus(name)
    kb = db.corpus(name)
    kb.embedder  # load the model before the clock starts
    report = kb.ingest(docs, batch_size=batch_size, progress=progress)
    return {
        "corpus_file": str(corpus_file),
        "corpus": name,
        "documents": report.added,
        "sentences": report.sentences,
        "chunks": report.chunks,
        "entities": report.entities,
        "total_seconds": round(report.total_seconds, 3),
        "embedding_seconds": round(report.embedding_seconds, 3),
        "nlp_seconds": round(report.nlp_seconds, 3),
        "other_seconds": round(report.other_seconds, 3),
        "other_to_embedding": round(report.other_seconds / report.embedding_seconds, 4)
        if report.embedding_seconds else None,
        "docs_per_second": round(report.added / report.total_seconds, 2) if report.total_seconds else None,
        "embedding_model": kb.info.embedding_model,
        "machine": {"python": platform.python_version(), "processor": platform.machine()},
    }
