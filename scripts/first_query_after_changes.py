"""The first TIGRAG query after each of N small changes to a `bench scale`
corpus, against its steady p50: `bench scale`'s own probe
(pgrag.bench.scale.after_changes), repeated more often than the harness does.

    python scripts/first_query_after_changes.py --dsn postgresql://... --database pgrag_scale_c \\
        --corpus-file ../shared/bench/2wiki/corpus.json --questions ../shared/bench/2wiki/questions.jsonl \\
        --changes 10 --out docs/benchmarks/first_query_1x.json

Each change ingests 10 renamed copies of corpus passages and deletes them
again, so the corpus ends as it began.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import pgrag
from pgrag.bench import scale
from pgrag.bench.evaluate import load_questions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", required=True, help="any database of the server (its name is replaced)")
    parser.add_argument("--database", required=True, help="a database grown by bench scale (corpus 'scale')")
    parser.add_argument("--corpus-file", type=Path, required=True)
    parser.add_argument("--questions", type=Path, required=True)
    parser.add_argument("--changes", type=int, default=10)
    parser.add_argument("--steady-queries", type=int, default=60)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    dsn = scale.database_dsn(args.dsn, args.database)
    passages = json.loads(args.corpus_file.read_text(encoding="utf-8"))
    questions = [q.question for q in load_questions(args.questions)]
    db = pgrag.connect(dsn, migrate=False)
    kb = db.corpus("scale", create=False)
    for q in questions[:5]:
        kb.retrieve(q, method="tigrag", k=10)
    ms = []
    for q in questions[: args.steady_queries]:
        t0 = time.perf_counter()
        kb.retrieve(q, method="tigrag", k=10)
        ms.append((time.perf_counter() - t0) * 1000)
    steady = statistics.median(ms)
    names = scale.name_words(passages)
    extras = [scale.scaled_copy(passages[:10], 5000 + 100 * i, names) for i in range(args.changes)]
    changes = scale.after_changes(kb, extras, questions[0], steady)
    report = {"database": args.database, "steady_p50_ms": round(steady, 1), **changes}
    for kind in ("after_ingest", "after_delete"):
        ratios = [run[kind]["to_steady_p50"] for run in changes["runs"]]
        report[kind + "_range"] = [min(ratios), max(ratios)]
    db.close()
    scale.print_report(report, args.out)


if __name__ == "__main__":
    main()
