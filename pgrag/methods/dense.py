"""Dense baseline: cosine top-k over chunk embeddings. Up to
EXACT_SEARCH_MAX_VECTORS chunks, exact from the cached vectors
(``Postings.nearest``), the ranking pgrag.dense's HNSW approximates; past it,
pgrag.dense in SQL. Like bm25, the first query of a process maps the corpus's
shared index files (or reads the index once)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ..exceptions import InputError
from ..results import Hits, Trace
from .spec import MethodSpec

if TYPE_CHECKING:
    from ..context import Context


def run(ctx: "Context", question: str, k: int, _settings: Any = None) -> Hits:
    trace = Trace(method="dense", query=question)
    vector = ctx.encode([question], trace)[0]
    t0 = time.perf_counter()
    nearest = ctx.ranking_index().postings.nearest([vector], k)
    if nearest is None:
        if ctx.scope is not None:
            raise InputError(UNFILTERED_HNSW)
        rows = ctx.db.fetchall("dense_hits", {"corpus": ctx.name, "embedding": vector, "k": k})
        trace.time("search", t0)
        trace.step("dense", model=ctx.info.embedding_model, k=k, search="hnsw", candidates=len(rows))
        return Hits(ctx.hits_from_rows(rows), trace)
    ids, scores = nearest[0]
    trace.time("search", t0)
    trace.step("dense", model=ctx.info.embedding_model, k=k, search="exact", candidates=len(ids))
    return Hits(ctx.hits(ids, scores, None, trace), trace)


# pgrag.dense's HNSW scan has no filter yet: past EXACT_SEARCH_MAX_VECTORS
# chunks a filtered dense search is refused rather than run unfiltered.
UNFILTERED_HNSW = ("a filter on a corpus of more than 100,000 chunks is not supported yet by dense "
                   "(its HNSW search has no filter)")

SPEC = MethodSpec(name="dense", run=run, filters=True)
