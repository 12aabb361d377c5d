"""``pgrag bench graph``: the token graph's costs, the CSR build and PPR in scipy
against PPR in SQL."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ...database import Database
from ...progress import tqdm
from ..metrics import percentile


def graph_benchmark(db: Database, corpus_file: Path, questions_file: Path, *, limit: int = 10,
                    progress: bool = True) -> dict[str, Any]:
    """The token graph's costs: building the CSR matrix from the database, and
    PPR in scipy against PPR in SQL (``pgrag.ppr``) on the seeds of the first
    ``limit`` questions, with whether their top-γ tokens agree."""
    from ...index import pagerank
    from ...index.graph import load_graph
    from ...methods.tigrag import TigragSettings
    from ..evaluate import load_questions, prepare_corpus

    settings = TigragSettings()
    kb, corpus = prepare_corpus(db, corpus_file, progress=progress)
    t0 = time.perf_counter()
    g = load_graph(db, kb.id)
    build = time.perf_counter() - t0
    scipy_ms: list[float] = []
    sql_ms: list[float] = []
    agree = 0
    max_diff = 0.0
    questions = load_questions(questions_file)[:limit]
    for q in tqdm(questions, desc="bench graph", unit="q", disable=not progress):
        seeds = sorted({t for t in kb.tokenize(q.question) if t in g.index})
        t0 = time.perf_counter()
        pr = pagerank.personalized_pagerank(g, [g.index[t] for t in seeds], damping=settings.damping,
                                            tolerance=settings.tolerance)
        top = pagerank.top_nodes(pr.scores, settings.gamma)
        t1 = time.perf_counter()
        rows = db.fetchall("ppr", {"corpus": kb.name, "seeds": seeds, "damping": settings.damping,
                                   "top": settings.gamma, "tolerance": settings.tolerance,
                                   "max_iterations": settings.max_iterations})
        t2 = time.perf_counter()
        scipy_ms.append((t1 - t0) * 1000)
        sql_ms.append((t2 - t1) * 1000)
        agree += [r[0] for r in rows] == [g.terms[i] for i in top]
        max_diff = max([max_diff, *(abs(score - pr.scores[g.index[term]]) for term, score in rows)])
    return {
        "corpus": corpus.name, "nodes": g.nodes, "edges": g.edges,
        "csr_build_seconds": round(build, 3),
        "questions": len(questions), "gamma": settings.gamma, "damping": settings.damping,
        "tolerance": settings.tolerance,
        "ppr_scipy_ms_p50": round(percentile(scipy_ms, 50), 2),
        "ppr_sql_ms_p50": round(percentile(sql_ms, 50), 2),
        "sql_to_scipy": round(percentile(sql_ms, 50) / percentile(scipy_ms, 50), 1),
        "same_top_tokens": agree,
        "max_score_difference": max_diff,
    }
