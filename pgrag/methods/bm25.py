"""BM25 baseline: Okapi BM25 (k1=1.2, b=0.75) over chunk postings, in SQL (pgrag.bm25)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ..results import Hits, Trace

if TYPE_CHECKING:
    from ..corpus import Corpus


def retrieve(corpus: "Corpus", question: str, k: int) -> Hits:
    trace = Trace(method="bm25", query=question)
    t0 = time.perf_counter()
    terms = corpus.tokenize(question)
    rows = corpus.db.fetchall("bm25", {"corpus": corpus.name, "query": question, "k": k})
    trace.timings_ms["search"] = (time.perf_counter() - t0) * 1000
    trace.step("bm25", query_terms=terms, k1=1.2, b=0.75, k=k, candidates=len(rows))
    return Hits(corpus.hits_from_rows(rows), trace)
