"""TIGRAG on the 2Wiki questions with the token graph's weights stored as
float64 and as float32 (pgrag.graph.compact_weights), in one process.

    python scripts/weights_precision_check.py --out docs/benchmarks/weights_float32_2wiki.json

Each pass reads the graph from the database (no shared files are written or
mapped), the first with compaction off, the second with it on. Reported: the
weights' type in each pass, how many questions rank the same chunk ids, the
largest score difference, R@2/R@5 of each, and p50 milliseconds of each. The
corpus must have been indexed by ``pgrag eval`` (its eval corpus is reused).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pgrag  # noqa: E402
from pgrag import graph, postings  # noqa: E402
from pgrag.bench.evaluate import corpus_name_for, load_questions  # noqa: E402
from pgrag.bench.metrics import recall_at_k  # noqa: E402

BENCH = ROOT.parent / "shared" / "bench" / "2wiki"


def one_pass(kb: Any, db: Any, questions: list, k: int) -> dict:
    graph.clear_cache()
    postings.clear_cache()
    dtype = str(postings.ranking_index(db, kb.id).graph.weights.dtype)
    ranked, ms = [], []
    kb.retrieve(questions[0].question, method="tigrag", k=k)        # warm-up
    for q in questions:
        t0 = time.perf_counter()
        hits = kb.retrieve(q.question, method="tigrag", k=k)
        ms.append((time.perf_counter() - t0) * 1000)
        ranked.append([(h.provenance.chunk_id, h.score, h.provenance.title) for h in hits])
    return {"dtype": dtype, "ranked": ranked, "ms": ms}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--corpus-file", type=Path, default=BENCH / "corpus.json")
    parser.add_argument("--questions", type=Path, default=BENCH / "questions.jsonl")
    parser.add_argument("--k", type=int, default=5)
    args = parser.parse_args()
    os.environ["PGRAG_GRAPH_DIR"] = "off"
    db = pgrag.connect()
    kb = db.corpus(corpus_name_for(args.corpus_file), create=False)
    questions = load_questions(args.questions)
    compact = graph.COMPACT_MIN_ENTRIES
    graph.COMPACT_MIN_ENTRIES = 1 << 62
    wide = one_pass(kb, db, questions, args.k)
    graph.COMPACT_MIN_ENTRIES = compact
    narrow = one_pass(kb, db, questions, args.k)

    def recall(run: dict, at: int) -> float:
        return round(statistics.mean(recall_at_k([t for _, _, t in r], q.supporting_titles, at)
                                     for r, q in zip(run["ranked"], questions)), 4)

    same = sum([c for c, _, _ in a] == [c for c, _, _ in b] for a, b in zip(wide["ranked"], narrow["ranked"]))
    diff = max((abs(x[1] - y[1]) for a, b in zip(wide["ranked"], narrow["ranked"]) for x, y in zip(a, b)),
               default=0.0)
    report = {"questions": len(questions), "k": args.k, "same_chunk_ids": same, "max_score_difference": diff}
    for name, run in (("float64", wide), ("float32", narrow)):
        report[name] = {"weights_dtype": run["dtype"], "recall@2": recall(run, 2), "recall@5": recall(run, 5),
                        "p50_ms": round(statistics.median(run["ms"]), 2)}
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
