"""BM25 baseline: Okapi BM25 (k1=1.2, b=0.75) over chunk postings, ranked as
SQL's ``pgrag.bm25`` ranks, from the cached postings matrix (pgrag.index): a
query reads its terms' columns in memory instead of scanning their posting
lists, whose length grows with the corpus (docs/SCALING.md). The first query of
a process maps the corpus's shared index files, or reads the index once."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ..index.postings import K1, B
from ..results import Hits, Trace
from .spec import MethodSpec

if TYPE_CHECKING:
    from ..context import Context


def ranking(ctx: "Context", question: str, depth: int) -> tuple[list[int], list[float], list[str]]:
    """The question's best ``depth`` chunk ids with their BM25 scores, and its terms."""
    terms = ctx.tokenize(question)
    index = ctx.ranking_index()
    ids, scores = index.postings.bm25_ranking([index.graph.index[t] for t in terms if t in index.graph.index],
                                              depth)
    return ids, scores, terms


def run(ctx: "Context", question: str, k: int, _settings: Any = None) -> Hits:
    trace = Trace(method="bm25", query=question)
    t0 = time.perf_counter()
    ids, scores, terms = ranking(ctx, question, k)
    trace.time("search", t0)
    trace.step("bm25", query_terms=terms, k1=K1, b=B, k=k, candidates=len(ids))
    return Hits(ctx.hits(ids, scores, None, trace), trace)


SPEC = MethodSpec(name="bm25", run=run, filters=True)
