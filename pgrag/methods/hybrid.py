"""Hybrid baseline: dense and BM25 fused by reciprocal rank fusion (k=60), in SQL
(pgrag.hybrid). What many users would pick instead of a graph method, so every
report shows it."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ..results import Hits, Trace
from . import MethodSpec

if TYPE_CHECKING:
    from ..context import Context

RRF_K = 60
DEPTH = 100  # chunks each list contributes to the fusion


def run(ctx: "Context", question: str, k: int, _settings: Any = None) -> Hits:
    trace = Trace(method="hybrid", query=question)
    vector = ctx.encode([question], trace)[0]
    t0 = time.perf_counter()
    rows = ctx.db.fetchall("hybrid", {
        "corpus": ctx.name, "query": question, "embedding": vector, "k": k,
        "depth": max(DEPTH, k), "rrf_k": RRF_K})
    trace.time("search", t0)
    trace.step("hybrid", fusion="reciprocal rank", rrf_k=RRF_K, depth=max(DEPTH, k), k=k,
               candidates=len(rows))
    return Hits(ctx.hits_from_rows(rows), trace)


SPEC = MethodSpec(name="hybrid", run=run)
