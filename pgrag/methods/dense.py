"""Dense baseline: cosine top-k over chunk embeddings (pgrag.dense, HNSW)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ..results import Hits, Trace
from . import MethodSpec

if TYPE_CHECKING:
    from ..context import Context


def run(ctx: "Context", question: str, k: int, _settings: Any = None) -> Hits:
    trace = Trace(method="dense", query=question)
    vector = ctx.encode([question], trace)[0]
    t0 = time.perf_counter()
    rows = ctx.db.fetchall("dense", {"corpus": ctx.name, "embedding": vector, "k": k})
    trace.time("search", t0)
    trace.step("dense", model=ctx.info.embedding_model, k=k, candidates=len(rows))
    return Hits(ctx.hits_from_rows(rows), trace)


SPEC = MethodSpec(name="dense", run=run)
