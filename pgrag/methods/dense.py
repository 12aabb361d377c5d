"""Dense baseline: cosine top-k over chunk embeddings. Up to
EXACT_SEARCH_MAX_VECTORS chunks, exact from the cached vectors
(``Postings.nearest``), the ranking pgrag.dense's HNSW approximates; past it,
pgrag.dense in SQL. Like bm25, the first query of a process maps the corpus's
shared index files (or reads the index once)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ..results import Hits, Trace
from .spec import MethodSpec

if TYPE_CHECKING:
    from ..context import Context


def run(ctx: "Context", question: str, k: int, _settings: Any = None) -> Hits:
    trace = Trace(method="dense", query=question)
    vector = ctx.encode([question], trace)[0]
    t0 = time.perf_counter()
    nearest = ctx.ranking_index().postings.nearest([vector], k)
    search = "exact"
    if nearest is None and ctx.scope is not None:
        nearest, search = ctx.nearest_within([vector], k), "hnsw, filtered"
    if nearest is None:
        rows = ctx.db.fetchall("dense_hits", {"corpus": ctx.name, "embedding": vector, "k": k})
        trace.time("search", t0)
        trace.step("dense", model=ctx.info.embedding_model, k=k, search="hnsw", candidates=len(rows))
        return Hits(ctx.hits_from_rows(rows), trace)
    ids, scores = nearest[0]
    trace.time("search", t0)
    trace.step("dense", model=ctx.info.embedding_model, k=k, search=search, candidates=len(ids))
    return Hits(ctx.hits(ids, scores, None, trace), trace)


SPEC = MethodSpec(name="dense", run=run, filters=True)
