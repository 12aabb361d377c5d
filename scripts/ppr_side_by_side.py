"""PPR at two corpus sizes in one run: push (TIGRAG's default) on each
question's seeds, the sizes taking turns on every question (or, with --order
blocks, on every pass over the questions), so that the ratio of their p50s is
measured under the same conditions.

    python scripts/ppr_side_by_side.py --dsn postgresql://...  \\
        --database pgrag_scale_c --database pgrag_scale_b --labels 1x,10x \\
        --questions ../shared/bench/2wiki/questions.jsonl --out docs/benchmarks/ppr_side_by_side.json

The databases are those `pgrag bench scale --database ...` grew (corpus
"scale"); each one's ranking index is read (or mapped) once before timing.
Also reported: how often push's top-20 tokens equal the exact power
iteration's at each size. With --float64-too every graph is also timed with
its weights widened to float64 (pgrag stores counts as float32 since
graph.compact_weights), the two taking turns like the sizes.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from pathlib import Path

import pgrag
from pgrag.bench import scale
from pgrag.bench.evaluate import load_questions
from pgrag.graph import TokenGraph, personalized_pagerank, push_pagerank, top_nodes, widened
from pgrag.postings import ranking_index


def agreement(graph: TokenGraph, seeds: list[list[int]], gamma: int) -> float:
    """Share of the seed sets whose top-γ tokens by push are the exact power iteration's."""
    same = sum(set(top_nodes(push_pagerank(graph, s, damping=0.5, tolerance=1e-4).scores, gamma).tolist())
               == set(top_nodes(personalized_pagerank(graph, s, damping=0.5, tolerance=1e-4).scores, gamma).tolist())
               for s in seeds)
    return same / len(seeds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", required=True, help="any database of the server (its name is replaced)")
    parser.add_argument("--database", action="append", required=True, help="a database grown by bench scale")
    parser.add_argument("--labels", required=True, help="one label per --database, comma-separated")
    parser.add_argument("--corpus", default="scale")
    parser.add_argument("--questions", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=3, help="timed passes over the questions")
    parser.add_argument("--gamma", type=int, default=20)
    parser.add_argument("--order", choices=("interleaved", "blocks"), default="interleaved",
                        help="interleaved: the sizes take turns on every question (each push then starts "
                             "with the other graph in the CPU caches); blocks: on every pass over the questions")
    parser.add_argument("--float64-too", action="store_true",
                        help="also time each graph with its weights as float64 (what pgrag stored before "
                             "graph.compact_weights), taking turns with the float32 one; labels get '/float64'")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    labels = args.labels.split(",")
    if len(labels) != len(args.database):
        parser.error("--labels needs one label per --database")
    questions = [q.question for q in load_questions(args.questions)]

    sizes = []
    for label, name in zip(labels, args.database):
        db = pgrag.connect(scale.database_dsn(args.dsn, name), migrate=False)
        kb = db.corpus(args.corpus, create=False)
        graph = ranking_index(db, kb.id).graph
        ctx = kb.context(False)
        seeds = [graph.index.seeds(terms) for terms in ctx.tokenize_many(questions)]
        graphs = [(label, graph)]
        if args.float64_too:
            graphs.append((label + "/float64", dataclasses.replace(graph, weights=widened(graph.weights))))
        for tag, g in graphs:
            sizes.append({"label": tag, "graph": g, "seeds": seeds, "ms": [], "agree": agreement(g, seeds, args.gamma),
                          "nodes": g.nodes, "edges": g.edges, "name": name})

    def timed(size: dict, i: int) -> None:
        t0 = time.perf_counter()
        push_pagerank(size["graph"], size["seeds"][i], damping=0.5, tolerance=1e-4)
        size["ms"].append((time.perf_counter() - t0) * 1000)

    for _ in range(args.repeats):
        if args.order == "interleaved":
            for i in range(len(questions)):
                for size in sizes:         # the sizes take turns on each question
                    timed(size, i)
        else:
            for size in sizes:             # each size's questions in a row, the sizes taking turns per pass
                for i in range(len(questions)):
                    timed(size, i)

    report = {"questions": len(questions), "repeats": args.repeats, "order": args.order, "sizes": {}}
    for size in sizes:
        ms = sorted(size["ms"])
        report["sizes"][size["label"]] = {
            "database": size["name"], "nodes": size["nodes"], "edges": size["edges"],
            "weights_dtype": str(size["graph"].weights.dtype),
            "push_ms_p50": round(statistics.median(ms), 2), "push_ms_p95": round(ms[int(0.95 * (len(ms) - 1))], 2),
            f"top{args.gamma}_agree_with_exact": round(size["agree"], 3)}
    for suffix in ("", "/float64") if args.float64_too else ("",):
        first = report["sizes"][labels[0] + suffix]["push_ms_p50"]
        for label in labels[1:]:
            entry = report["sizes"][label + suffix]
            entry["p50_over_" + labels[0] + suffix] = round(entry["push_ms_p50"] / first, 2)
    scale.print_report(report, args.out)


if __name__ == "__main__":
    main()
