"""Latency of TIGRAG's second-hop rerank vectors (TigragSettings.hop_embedding) on
../shared/bench/2wiki, against dense, in one run.

    python scripts/hop_embedding_latency.py [--limit N] [--out FILE]

Like `pgrag bench queries` (k = 10, 5 untimed warm-up questions per variant, the
variants taking turns on each question, so a noisy moment on a shared machine
hits all of them alike), plus the time of the second hop's encoding, read from
the trace's hop_embeddings step. The corpus must have been indexed by `pgrag eval`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pgrag  # noqa: E402
from pgrag.bench.evaluate import corpus_name_for, load_questions  # noqa: E402
from pgrag.bench.metrics import percentile  # noqa: E402

BENCH = ROOT.parent / "shared" / "bench" / "2wiki"
VARIANTS: dict[str, tuple[str, dict]] = {
    "dense": ("dense", {}),
    "tigrag": ("tigrag", {}),
    "tigrag hop_embedding=sum": ("tigrag", {"hop_embedding": "sum"}),
    "tigrag hop_embedding=joint": ("tigrag", {"hop_embedding": "joint"}),
    "tigrag-paper": ("tigrag-paper", {}),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    kb = pgrag.connect().corpus(corpus_name_for(BENCH / "corpus.json"), create=False)
    questions = [q.question for q in load_questions(BENCH / "questions.jsonl")[: args.limit]]

    def once(variant: str, question: str) -> tuple[float, float, int]:
        method, options = VARIANTS[variant]
        t0 = time.perf_counter()
        hits = kb.retrieve(question, method=method, k=10, **options)
        ms = (time.perf_counter() - t0) * 1000
        step = next((s for s in hits.trace.steps if s["step"] == "hop_embeddings"), None)
        return ms, step["ms"] if step else 0.0, step["vectors"] if step else 0

    for variant in VARIANTS:
        for q in questions[:5]:
            once(variant, q)
    runs: dict[str, list[tuple[float, float, int]]] = {v: [] for v in VARIANTS}
    for q in questions:
        for variant in VARIANTS:
            runs[variant].append(once(variant, q))
    dense = percentile([r[0] for r in runs["dense"]], 50)
    out = {}
    for variant, rows in runs.items():
        p50 = percentile([r[0] for r in rows], 50)
        out[variant] = {"p50_ms": round(p50, 1), "p95_ms": round(percentile([r[0] for r in rows], 95), 1),
                        "p50_to_dense": round(p50 / dense, 2),
                        "hop2_embed_ms_mean": round(sum(r[1] for r in rows) / len(rows), 1),
                        "hop2_vectors_mean": round(sum(r[2] for r in rows) / len(rows), 2)}
        print(json.dumps({"variant": variant, **out[variant]}), flush=True)
    if args.out:
        args.out.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
