"""Hybrid baseline: dense and BM25 fused by reciprocal rank fusion (k=60), in SQL
(pgrag.hybrid). What many users would pick instead of a graph method, so every
report shows it."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ..results import Hits, Trace

if TYPE_CHECKING:
    from ..corpus import Corpus

RRF_K = 60
DEPTH = 100  # chunks each list contributes to the fusion


def retrieve(corpus: "Corpus", question: str, k: int) -> Hits:
    trace = Trace(method="hybrid", query=question)
    t0 = time.perf_counter()
    vector = corpus.embedder.encode([question])[0]
    t1 = time.perf_counter()
    rows = corpus.db.fetchall("hybrid", {
        "corpus": corpus.name, "query": question, "embedding": vector, "k": k,
        "depth": max(DEPTH, k), "rrf_k": RRF_K})
    t2 = time.perf_counter()
    trace.timings_ms.update(embed=(t1 - t0) * 1000, search=(t2 - t1) * 1000)
    trace.step("hybrid", fusion="reciprocal rank", rrf_k=RRF_K, depth=max(DEPTH, k), k=k,
               candidates=len(rows))
    return Hits(corpus.hits_from_rows(rows), trace)
