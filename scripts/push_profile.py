"""Where PPR push spends its time at each corpus size: per question, how many
rounds of each kind it runs (a full sweep, a spread of the frontier's rows by
one sparse product, a gather of their entries) and the milliseconds each kind
takes, with the stored entries one round of each kind scans.

    python scripts/push_profile.py --dsn postgresql://... \\
        --database pgrag_scale_1x --database pgrag_scale_10x --labels 1x,10x \\
        --questions ../shared/bench/2wiki/questions.jsonl --out docs/benchmarks/push_profile_epyc.json

The databases are those `pgrag bench scale --database ...` grew (corpus "scale").
The rounds are timed by wrapping pgrag.graph's own functions, so the totals
include the timers' overhead (a few microseconds a round); the per-entry costs
say whether a size is slower because it scans more entries or because each
entry costs more (memory bandwidth, say).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import pgrag
from pgrag import graph as pgraph
from pgrag.bench import scale
from pgrag.bench.evaluate import load_questions
from pgrag.postings import ranking_index

KINDS = ("sweep", "spread", "gather")


def profiled(rounds: dict[str, list[tuple[float, int]]]) -> tuple[Any, Any]:
    """Replacements for _push_round and TokenGraph.step that record (ms, entries) per round."""
    push_round, step = pgraph._push_round, pgraph.TokenGraph.step

    def timed_round(graph, estimate, residual, nodes, damping, threshold, slot, edges):
        t0 = time.perf_counter()
        out = push_round(graph, estimate, residual, nodes, damping, threshold, slot, edges)
        kind = "spread" if edges * pgraph._SPREAD > graph.nodes else "gather"
        rounds[kind].append(((time.perf_counter() - t0) * 1000, edges))
        return out

    def timed_step(self, r, *, precise=False):
        t0 = time.perf_counter()
        out = step(self, r, precise=precise)
        rounds["sweep"].append(((time.perf_counter() - t0) * 1000, self.nnz))
        return out

    return timed_round, timed_step


def profile(graph: pgraph.TokenGraph, seeds: list[list[int]], repeats: int) -> dict[str, Any]:
    rounds: dict[str, list[tuple[float, int]]] = {k: [] for k in KINDS}
    timed_round, timed_step = profiled(rounds)
    original = pgraph._push_round, pgraph.TokenGraph.step
    pgraph._push_round, pgraph.TokenGraph.step = timed_round, timed_step
    try:
        for s in seeds[:10]:                        # warm-up, not counted
            pgraph.push_pagerank(graph, s, damping=0.5, tolerance=1e-4)
        for values in rounds.values():
            values.clear()
        total = []
        for _ in range(repeats):
            for s in seeds:
                t0 = time.perf_counter()
                pgraph.push_pagerank(graph, s, damping=0.5, tolerance=1e-4)
                total.append((time.perf_counter() - t0) * 1000)
    finally:
        pgraph._push_round, pgraph.TokenGraph.step = original
    n = len(total)
    out: dict[str, Any] = {"nodes": graph.nodes, "stored_entries": graph.nnz,
                           "push_ms_p50": round(statistics.median(total), 2),
                           "push_ms_mean": round(sum(total) / n, 2)}
    for kind, values in rounds.items():
        ms, entries = sum(v[0] for v in values), sum(v[1] for v in values)
        out[kind] = {"rounds_per_question": round(len(values) / n, 2), "ms_per_question": round(ms / n, 2),
                     "entries_per_round": round(entries / len(values)) if values else 0,
                     "ns_per_entry": round(ms * 1e6 / entries, 2) if entries else None}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", required=True, help="any database of the server (its name is replaced)")
    parser.add_argument("--database", action="append", required=True, help="a database grown by bench scale")
    parser.add_argument("--labels", required=True, help="one label per --database, comma-separated")
    parser.add_argument("--corpus", default="scale")
    parser.add_argument("--questions", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=2, help="timed passes over the questions")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    labels = args.labels.split(",")
    if len(labels) != len(args.database):
        parser.error("--labels needs one label per --database")
    questions = [q.question for q in load_questions(args.questions)]
    report: dict[str, Any] = {"questions": len(questions), "repeats": args.repeats, "sizes": {}}
    for label, name in zip(labels, args.database):
        db = pgrag.connect(scale.database_dsn(args.dsn, name), migrate=False)
        kb = db.corpus(args.corpus, create=False)
        graph = ranking_index(db, kb.id).graph
        seeds = [graph.index.seeds(terms) for terms in kb.context(False).tokenize_many(questions)]
        report["sizes"][label] = {"database": name, **profile(graph, seeds, args.repeats)}
    scale.print_report(report, args.out)


if __name__ == "__main__":
    main()
