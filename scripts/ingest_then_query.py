"""The first TIGRAG query after a small ingest against the steady state, on one
corpus: what the cached graph's delta (pgrag.postings.advance) costs.

    python scripts/ingest_then_query.py --corpus-file ../shared/bench/2wiki/corpus.json --out delta.json

It times --queries multi-hop TIGRAG questions (steady p50), ingests --docs
documents (copies of corpus passages under new ids, so their token statistics
are real), times the next question (the delta, then writing the new version's
shared files), deletes the documents again (the corpus is as before: a delete
restores every statistic exactly) and times the question after the delete
(the delete's delta).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import pgrag
from pgrag.bench.evaluate import load_questions, prepare_corpus
from pgrag.sources import load_path


def timed(kb, question: str) -> tuple[float, str, dict[str, float]]:
    t0 = time.perf_counter()
    hits = kb.retrieve(question, method="tigrag", k=10)
    graph_step = next(s for s in hits.trace.steps if s["step"] == "graph")
    stages = {k: round(v, 1) for k, v in hits.trace.timings_ms.items()}
    return (time.perf_counter() - t0) * 1000, graph_step["source"], stages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus-file", type=Path, required=True)
    parser.add_argument("--questions", type=Path, default=Path("../shared/bench/2wiki/questions.jsonl"))
    parser.add_argument("--docs", type=int, default=10)
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    db = pgrag.connect()
    kb, corpus = prepare_corpus(db, args.corpus_file, progress=False)
    questions = [q.question for q in load_questions(args.questions)][: args.queries]
    timed(kb, questions[0])
    steady = [timed(kb, q)[0] for q in questions]
    same_before = timed(kb, questions[1])
    copies = [{"id": f"delta-probe-{i}", "title": f"{d.title} (copy {i})", "text": d.body}
              for i, d in enumerate(load_path(args.corpus_file)[: args.docs])]
    kb.ingest(copies, progress=False)
    after_ingest = timed(kb, questions[1])
    kb.delete([c["id"] for c in copies])
    after_delete = timed(kb, questions[2])
    p50 = statistics.median(steady)
    report = {"corpus": corpus.name, "documents": corpus.documents, "chunks": corpus.chunks,
              "steady_p50_ms": round(p50, 1), "steady_queries": len(steady), "docs_ingested": len(copies),
              "first_after_ingest": {"ms": round(after_ingest[0], 1), "graph_source": after_ingest[1],
                                     "stages_ms": after_ingest[2],
                                     "to_steady_p50": round(after_ingest[0] / p50, 2)},
              "same_question_before": {"ms": round(same_before[0], 1), "stages_ms": same_before[2]},
              "first_after_delete": {"ms": round(after_delete[0], 1), "graph_source": after_delete[1],
                                     "stages_ms": after_delete[2],
                                     "to_steady_p50": round(after_delete[0] / p50, 2)}}
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
