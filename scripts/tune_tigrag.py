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

--bridge-ceiling asks instead how far the default's recall on a MuSiQue-style set (its questions carry
``question_decomposition``) is from what it reaches when it knows each hop's bridge, and where the bridges
it misses are lost (issue 44). A question's gold bridges are the answers of its sub-questions but the last.
Three runs, by question type (R@2, R@5, R@20): ``default``; ``bridges at hop 2``, every driving chunk's
names replaced by the gold bridges (two hops, text titles off), as if the second hop chose its bridges
without a miss; ``one bridge a hop``, hop h's names the h-th bridge alone (four hops, no stop on the
question's remaining part). Then each gold bridge of the default run by where it stands: named by the
question, given a vector at some hop, found as a name but given no vector (``bridge_limit``), or never
among the driving chunks' names. The ceilings replace ``pgrag.methods.tigrag._entities_of`` for the length
of a run: an analysis, not a setting.

    python scripts/tune_tigrag.py --bench musique --bridge-ceiling
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from common import BENCH

import pgrag
from pgrag.bench.evaluate import Question, corpus_name_for, document_titles, hit_documents, load_questions
from pgrag.bench.metrics import gold_groups, percentile, recall_at_k
from pgrag.bench.timing.cache import runtime_cache
from pgrag.methods import tigrag


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
    parser.add_argument("--bridge-ceiling", action="store_true",
                        help="the default's recall against its recall with the gold bridges, and where the "
                             "bridges are lost (MuSiQue-style questions)")
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
    if args.bridge_ceiling:
        bridge_ceiling_run(kb, bench, questions)
        return
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


CEILING_RUNS: dict[str, dict[str, Any]] = {
    "default": {},
    "bridges at hop 2": {"hops": 2, "text_titles": False},
    "one bridge a hop": {"hops": 4, "remainder_stop": 0, "text_titles": False},
}


def bridge_ceiling_run(kb: Any, bench: Path, questions: list[Question], ks: tuple[int, ...] = (2, 5, 20)) -> None:
    """--bridge-ceiling: each of CEILING_RUNS by question type, and by whether the default gave every gold
    bridge a vector (or the question names it) or lost one; then where the default's gold bridges stand."""
    rows = map(json.loads, (bench / "questions.jsonl").read_text(encoding="utf-8").splitlines())
    decomposition = {row["id"]: row.get("question_decomposition") for row in rows}
    if not all(decomposition.values()):
        raise SystemExit(f"--bridge-ceiling needs MuSiQue's question_decomposition on every question of {bench}")
    types = sorted({q.type[:4] for q in questions})
    for t in types:
        golds = [q.supporting_titles for q in questions if q.type.startswith(t)]
        print(json.dumps({"type": t, "questions": len(golds), "groups": len(set(gold_groups(golds)))}))
    standings: dict[str, dict[str, int]] = {t: {} for t in types}
    lost: dict[str, bool] = {}      # by question: the default lost one of its bridges
    for run, options in CEILING_RUNS.items():
        recall: dict[tuple[str, str], list[list[float]]] = {}
        for q in questions:
            bridges = [step["answer"] for step in decomposition[q.id][:-1]]
            with gold_names(bridges, run == "one bridge a hop") if options else contextlib.nullcontext():
                hits = kb.retrieve(q.question, method="tigrag", k=max(ks), **options)
            if not options:
                where = [standing(q.question, bridge, hits.trace) for bridge in bridges]
                for w in where:
                    standings[q.type[:4]][w] = standings[q.type[:4]].get(w, 0) + 1
                lost[q.id] = any(w not in ("named by the question", "given a vector") for w in where)
            got = [recall_at_k(hit_documents(hits), q.supporting_titles, k) for k in ks]
            for group in ("all", "a bridge lost" if lost[q.id] else "none lost"):
                recall.setdefault((q.type[:4], group), []).append(got)
        for (t, group), got in sorted(recall.items()):
            print(json.dumps({"run": run, "type": t, "questions": group, "n": len(got),
                              **{f"R@{k}": round(100 * sum(r[i] for r in got) / len(got), 1)
                                 for i, k in enumerate(ks)}}))
    for t, counts in standings.items():
        print(json.dumps({"bridges": t, **counts}))


@contextlib.contextmanager
def gold_names(bridges: list[str], one_a_hop: bool) -> Iterator[None]:
    """Every driving chunk names ``bridges`` (``one_a_hop``: the next one alone) while inside."""
    real = tigrag._entities_of
    hop = itertools.count()

    def names(ctx: Any, chunk_ids: list[int], settings: Any, trace: Any) -> dict[int, list[str]]:
        real(ctx, chunk_ids, settings, trace)   # the method's own query and trace step
        given = bridges[next(hop):][:1] if one_a_hop else bridges
        return {c: list(given) for c in chunk_ids}

    tigrag._entities_of = names
    try:
        yield
    finally:
        tigrag._entities_of = real


def _key(name: str) -> str:
    return " ".join(name.casefold().removeprefix("the ").split())


def standing(question: str, bridge: str, trace: Any) -> str:
    """Where a gold bridge stands in a default run's trace. A name matches it when
    equal, or one holds the other ("the Army", "United States Army")."""
    b = _key(bridge)

    def among(names: list[str]) -> bool:
        return any(b == _key(n) or (len(b) > 3 and (b in _key(n) or _key(n) in b)) for n in names)

    if b in _key(question):
        return "named by the question"
    if among([e for s in trace.steps if s.get("step") == "hop_embeddings" for e in s.get("context") or {}]):
        return "given a vector"
    found = [e for s in trace.steps if s.get("step") == "entities" for e in s["found"]]
    return "found, no vector" if among(found) else "never found"


if __name__ == "__main__":
    main()
