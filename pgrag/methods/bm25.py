"""BM25 baseline: Okapi BM25 (k1=1.2, b=0.75) over chunk postings, in SQL (pgrag.bm25)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ..results import Hits, Trace
from . import MethodSpec

if TYPE_CHECKING:
    from ..context import Context


def run(ctx: "Context", question: str, k: int, _settings: Any = None) -> Hits:
    trace = Trace(method="bm25", query=question)
    t0 = time.perf_counter()
    terms = ctx.tokenize(question)
    rows = ctx.db.fetchall("bm25", {"corpus": ctx.name, "query": question, "k": k})
    trace.time("search", t0)
    trace.step("bm25", query_terms=terms, k1=1.2, b=0.75, k=k, candidates=len(rows))
    return Hits(ctx.hits_from_rows(rows), trace)


SPEC = MethodSpec(name="bm25", run=run)
