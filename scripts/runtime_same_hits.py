"""Same results with the models in two places (issue 36; issue 45: ONNX Runtime
against torch): every question's hits through SQL ``pgrag.retrieve``, once on a
connection with ``pgrag.model_runtime`` set to the first of ``--runtimes``
(default ``inprocess``) and once to the second (default ``shared``), and each
question's vector both ways.

    python scripts/runtime_same_hits.py --dsn postgresql://... --corpus eval-9d6e352952aafb18 \
        --questions ../shared/bench/2wiki/questions.jsonl --methods dense,hybrid,tigrag,tigrag-paper \
        --runtimes unix:/tmp/torch.sock,unix:/tmp/onnx.sock

Prints, per method, how many questions gave identical chunk ids in the same
order, the largest score difference, and the largest cosine distance between a
question's two vectors.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import psycopg


def questions(path: Path) -> list[str]:
    return [json.loads(line)["question"] for line in path.read_text().splitlines() if line.strip()]


def run(dsn: str, runtime: str, corpus: str, qs: list[str], methods: list[str], k: int) -> tuple[dict, list]:
    with psycopg.connect(dsn, autocommit=True, options=f"-c pgrag.model_runtime={runtime}") as conn:
        hits = {m: [conn.execute("SELECT chunk_id, score FROM pgrag.retrieve(%s, %s, %s, %s)",
                                 (corpus, q, m, k)).fetchall() for q in qs] for m in methods}
        vectors = [json.loads(conn.execute("SELECT pgrag.embed(%s, %s)::text", (corpus, q)).fetchone()[0]) for q in qs]
    return hits, vectors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--questions", type=Path, required=True)
    parser.add_argument("--methods", default="dense,bm25,hybrid,tigrag")
    parser.add_argument("-k", type=int, default=10)
    parser.add_argument("--runtimes", default="inprocess,shared", help="two pgrag.model_runtime values")
    args = parser.parse_args()
    first, second = args.runtimes.split(",")
    qs = questions(args.questions)
    methods = [m for m in args.methods.split(",") if m]
    here, here_vectors = run(args.dsn, first, args.corpus, qs, methods, args.k)
    there, there_vectors = run(args.dsn, second, args.corpus, qs, methods, args.k)
    a, b = np.array(here_vectors), np.array(there_vectors)
    report = {"corpus": args.corpus, "questions": len(qs), "k": args.k, "runtimes": [first, second],
              "max_vector_cosine_distance": float(np.max(1 - np.sum(a * b, axis=1))), "methods": {}}
    for m in methods:
        same = sum([c for c, _ in x] == [c for c, _ in y] for x, y in zip(here[m], there[m]))
        diff = max((abs(p[1] - q[1]) for x, y in zip(here[m], there[m]) for p, q in zip(x, y)), default=0.0)
        report["methods"][m] = {"identical_hits": same, "max_score_difference": diff}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
