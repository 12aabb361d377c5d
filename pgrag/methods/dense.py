"""Dense baseline: cosine top-k over chunk embeddings (pgrag.dense, HNSW)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ..results import Hits, Trace

if TYPE_CHECKING:
    from ..corpus import Corpus


def retrieve(corpus: "Corpus", question: str, k: int) -> Hits:
    trace = Trace(method="dense", query=question)
    t0 = time.perf_counter()
    vector = corpus.embedder.encode([question])[0]
    t1 = time.perf_counter()
    rows = corpus.db.fetchall("dense", {"corpus": corpus.name, "embedding": vector, "k": k})
    t2 = time.perf_counter()
    trace.timings_ms.update(embed=(t1 - t0) * 1000, search=(t2 - t1) * 1000)
    trace.step("dense", model=corpus.info.embedding_model, k=k, candidates=len(rows))
    return Hits(corpus.hits_from_rows(rows), trace)
