"""Hybrid baseline: dense and BM25 fused by reciprocal rank fusion (k=60), as
SQL's ``pgrag.hybrid`` fuses them: BM25 from the cached postings (the bm25
method's ranking), dense as the dense method ranks (exact from the cached
vectors, or pgrag.dense's HNSW past their size). What many users would pick
instead of a graph method, so every report shows it."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ..results import Hits, Trace
from .bm25 import ranking as bm25_ranking
from .spec import MethodSpec

if TYPE_CHECKING:
    from ..context import Context

RRF_K = 60
DEPTH = 100  # chunks each list contributes to the fusion


def fuse(rankings: list[list[int]], rrf_k: int = RRF_K) -> list[tuple[int, float]]:
    """Reciprocal rank fusion of chunk rankings (ranks from 1), as pgrag.hybrid:
    (chunk, sum over the lists of 1 / (rrf_k + rank)), score desc, then chunk id."""
    score: dict[int, float] = {}
    for ranked in rankings:
        for rank, chunk_id in enumerate(ranked, start=1):
            score[chunk_id] = score.get(chunk_id, 0.0) + 1.0 / (rrf_k + rank)
    return sorted(score.items(), key=lambda item: (-item[1], item[0]))


def run(ctx: "Context", question: str, k: int, _settings: Any = None) -> Hits:
    trace = Trace(method="hybrid", query=question)
    vector = ctx.encode([question], trace)[0]
    t0 = time.perf_counter()
    depth = max(DEPTH, k)
    lexical, _, _ = bm25_ranking(ctx, question, depth)
    nearest = ctx.ranking_index().postings.nearest([vector], depth)
    if nearest is None and ctx.scope is not None:
        nearest = ctx.nearest_within([vector], depth)
    dense = nearest[0][0] if nearest is not None else [chunk_id for _, chunk_id, _ in ctx.db.fetchall(
        "dense_many", {"corpus": ctx.name, "embeddings": [vector], "k": depth})]
    fused = fuse([lexical, dense])[: max(k, 0)]
    trace.time("search", t0)
    trace.step("hybrid", fusion="reciprocal rank", rrf_k=RRF_K, depth=depth, k=k, candidates=len(fused))
    return Hits(ctx.hits([c for c, _ in fused], [s for _, s in fused], None, trace), trace)


SPEC = MethodSpec(name="hybrid", run=run, filters=True)
