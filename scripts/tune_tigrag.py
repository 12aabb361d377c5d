"""Grid over TIGRAG settings on a tuning set: ../shared/bench/2wiki (the 111) or
../shared/bench/musique (the 102), the only sets tuning may use; ``--bench FOLDER``
runs the same grid on another set, to check that a setting holds there.

    python scripts/tune_tigrag.py gamma=10,50,200 damping=0.3,0.5,0.85 [--preset tigrag] [--limit N] [--bench musique]

Prints Recall@k (--k, default 2,5) and p50 latency for each combination, with the model runtime's
vector cache off (a later combination would find the earlier ones' texts there; --runtime-cache
keeps it) (--stages: each
stage's mean time and the questions ranked as under the first combination);
--per-question FILE appends each question's retrieved documents as JSON lines; --untitled runs on the
corpus stored without titles (`pgrag eval --untitled`). The corpus must have been indexed by `pgrag eval`
(it reuses the eval corpus of the same file).

--long-document N asks instead one question, "What does The Big Book say about the Korean War?", of a
corpus whose first N passages of the bench's corpus are one document titled "The Big Book", beside the
next 1,500 (built, then dropped): each combination's p50 over 5 runs in turns, with the chunks linked,
the names found and the seeds of each hop (``linked_drivers``, docs/methods.md):

    python scripts/tune_tigrag.py linked_drivers=0,5 --bench musique --long-document 300
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path
from typing import Any

from common import BENCH

import pgrag
from pgrag.bench.evaluate import Question, corpus_name_for, document_titles, hit_documents, load_questions
from pgrag.bench.metrics import percentile, recall_at_k
from pgrag.bench.timing.cache import runtime_cache


def parse_value(text: str) -> object:
    if text in ("None", "none"):
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    if text in ("true", "false"):
        return text == "true"
    return text


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("grid", nargs="*", help="name=v1,v2,... (TigragSettings fields)")
    parser.add_argument("--bench", default="2wiki",
                        help="2wiki or musique (../shared/bench), or a folder with corpus.json and "
                             "questions.jsonl (e.g. from `pgrag bench convert`), to check a setting "
                             "on questions it was not tuned on")
    parser.add_argument("--preset", default="tigrag")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--depth", type=int, default=20)
    parser.add_argument("--out", type=Path, default=None, help="append each result as a JSON line here")
    parser.add_argument("--k", default="2,5", help="comma-separated k for Recall@k")
    parser.add_argument("--per-question", type=Path, default=None,
                        help="append each question's retrieved documents here (JSON lines)")
    parser.add_argument("--stages", action="store_true",
                        help="also report each stage's mean time (the trace's timings) and how many questions "
                             "rank the same chunks as under the grid's first setting")
    parser.add_argument("--runtime-cache", action="store_true",
                        help="keep the model runtime's vector cache on (off by default, so that each "
                             "combination's p50 pays for its own encoding)")
    parser.add_argument("--untitled", action="store_true",
                        help="the corpus stored without titles (`pgrag eval --untitled`), scored by the titles "
                             "of the documents' ids")
    parser.add_argument("--long-document", type=int, default=None, metavar="N",
                        help="one question of a corpus with one document of the bench corpus's first N passages")
    args = parser.parse_args()
    grid = {k: [parse_value(v) for v in vs.split(",")] for k, vs in (g.split("=", 1) for g in args.grid)}
    db = pgrag.connect()
    bench = BENCH.parent / args.bench if args.bench in ("2wiki", "musique") else Path(args.bench)
    if args.long_document:
        with runtime_cache(db.dsn, args.runtime_cache):
            long_document_run(db, bench / "corpus.json", args.long_document, grid, args)
        return
    kb = db.corpus(corpus_name_for(bench / "corpus.json", args.untitled), create=False)
    args.titles = document_titles(bench / "corpus.json") if args.untitled else None
    questions = load_questions(bench / "questions.jsonl")[: args.limit]
    kb.retrieve(questions[0].question, method=args.preset, k=args.depth)  # warm-up
    with runtime_cache(db.dsn, args.runtime_cache):
        grid_run(kb, questions, grid, args)


def grid_run(kb: Any, questions: list[Question], grid: dict[str, list[object]], args: argparse.Namespace) -> None:
    first: list[list[int]] = []     # the first setting's chunks, question by question
    for values in itertools.product(*grid.values()):
        options = dict(zip(grid, values))
        ks = [int(k) for k in args.k.split(",")]
        recall = dict.fromkeys(ks, 0.0)
        times = []
        stages: dict[str, float] = {}
        same = 0
        for i, q in enumerate(questions):
            t0 = time.perf_counter()
            hits = kb.retrieve(q.question, method=args.preset, k=args.depth, **options)
            times.append((time.perf_counter() - t0) * 1000)
            for stage, ms in hits.trace.timings_ms.items():
                stages[stage] = stages.get(stage, 0.0) + ms / len(questions)
            chunks = [h.provenance.chunk_id for h in hits]
            if len(first) < len(questions):
                first.append(chunks)
            same += chunks == first[i]
            docs = hit_documents(hits, args.titles)
            for k in ks:
                recall[k] += recall_at_k(docs, q.supporting_titles, k)
            if args.per_question:
                with args.per_question.open("a") as f:
                    f.write(json.dumps({"bench": args.bench, "preset": args.preset, **options,
                                        **({"untitled": True} if args.untitled else {}),
                                        "id": q.id, "type": q.type,
                                        "question": q.question, "gold": list(q.supporting_titles),
                                        "retrieved": docs}) + "\n")
        n = len(questions)
        line = json.dumps({"bench": args.bench, "preset": args.preset, **options,
                           **({"untitled": True} if args.untitled else {}),
                           **{f"R@{k}": round(100 * recall[k] / n, 1) for k in ks},
                           "p50_ms": round(percentile(times, 50), 1),
                           **({"stage_ms_mean": {k: round(v, 2) for k, v in stages.items()},
                               "same_chunks_as_first": same} if args.stages else {})})
        print(line, flush=True)
        if args.out:
            with args.out.open("a") as f:
                f.write(line + "\n")


LONG_QUESTION = "What does The Big Book say about the Korean War?"


def long_document_run(db: Any, corpus_file: Path, paragraphs: int, grid: dict[str, list[object]],
                      args: argparse.Namespace, repeat: int = 5) -> None:
    """--long-document: the grid's combinations asked LONG_QUESTION in turns, on a corpus built for it."""
    passages = json.loads(corpus_file.read_text(encoding="utf-8"))
    big = {"id": "big", "title": "The Big Book", "text": "\n\n".join(p["text"] for p in passages[:paragraphs])}
    rest = [{"id": f"p{i}", "title": p["title"], "text": p["text"]}
            for i, p in enumerate(passages[paragraphs: paragraphs + 1500])]
    name = f"long-document-{paragraphs}"
    kb = db.corpus(name, create=True)
    try:
        kb.ingest([big, *rest], progress=False)
        combos = [dict(zip(grid, values)) for values in itertools.product(*grid.values())]
        times: list[list[float]] = [[] for _ in combos]
        last = []
        for options in combos:     # warm-up
            last.append(kb.retrieve(LONG_QUESTION, method=args.preset, k=args.depth, **options))
        for _ in range(repeat):
            for i, options in enumerate(combos):
                t0 = time.perf_counter()
                last[i] = kb.retrieve(LONG_QUESTION, method=args.preset, k=args.depth, **options)
                times[i].append((time.perf_counter() - t0) * 1000)
        for options, ms, hits in zip(combos, times, last):
            steps = hits.trace.steps
            print(json.dumps({"long_document": paragraphs, "preset": args.preset, **options,
                              "p50_ms": round(percentile(ms, 50), 1),
                              "linked": [len(s["chunks"]) for s in steps if s["step"] == "titles"],
                              "names": [len(s["found"]) for s in steps if s["step"] == "entities"],
                              "seeds": [len(s["seeds"]) for s in steps if s["step"] == "hop"]}), flush=True)
    finally:
        db.drop_corpus(name)


if __name__ == "__main__":
    main()
