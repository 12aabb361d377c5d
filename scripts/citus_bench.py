"""Single PostgreSQL vs Citus (coordinator + 2 workers) on the same machine, same run.

Starts a local Citus cluster (tests/citus/cluster.py, needs `make citus`) and a
plain embedded PostgreSQL, ingests the same corpus into both, lists where six
tenant corpora live, runs `pgrag bench load` against each (1 client: latency;
8 clients: throughput), then moves the benchmark corpus's shard group to the
other worker while 8 clients keep querying, and checks the results after it.

    PYTHONPATH=. .venv/bin/python scripts/citus_bench.py \
        --corpus-file ../shared/bench/2wiki/corpus.json --limit 1000 \
        --questions ../shared/bench/2wiki/questions.jsonl --out docs/benchmarks/citus.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import threading
import time
from pathlib import Path

import common  # noqa: F401  (the checkout first on sys.path, for tests.citus)
import psycopg

import pgrag
from pgrag import distribute, server
from pgrag.bench.evaluate import load_questions, prepare_corpus
from pgrag.bench.timing.load import load_benchmark
from tests.citus.cluster import LocalCitusCluster
from tests.citus.conftest import CORPORA


def ranked_all(db: pgrag.Database, corpus: str, questions: list[str], embeddings: list) -> list:
    out = []
    with db.transaction() as conn:
        for q, e in zip(questions, embeddings):
            rows = conn.execute("SELECT title, score FROM pgrag.hybrid(%s, %s, %s, 10)", (corpus, q, e)).fetchall()
            out.append([(t, float(s)) for t, s in rows])
    return out


def same(a: list, b: list) -> bool:
    return all([t for t, _ in x] == [t for t, _ in y] and all(abs(s1 - s2) <= 1e-6 for (_, s1), (_, s2) in zip(x, y))
               for x, y in zip(a, b)) and len(a) == len(b)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus-file", type=Path, required=True)
    ap.add_argument("--questions", type=Path, required=True)
    ap.add_argument("--limit", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--shards", type=int, default=32)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()

    root = Path(tempfile.mkdtemp(prefix="pgrag-citus-bench-"))
    docs = json.loads(args.corpus_file.read_text())[: args.limit]
    corpus_file = root / f"corpus-{len(docs)}.json"
    corpus_file.write_text(json.dumps(docs))
    result: dict = {"documents": len(docs), "shards_per_table": args.shards, "seconds": args.seconds}
    cluster = LocalCitusCluster(root / "citus")
    single_dir = root / "single"
    try:
        cluster.start()
        citus_uri = cluster.form("pgrag_bench")
        single_uri = server.start(single_dir)
        citus_db = pgrag.connect(citus_uri)
        result["layout"] = [dict(zip(("table", "kind", "colocation", "shards"), r))
                            for r in distribute.distribute(citus_db, shard_count=args.shards)]
        single_db = pgrag.connect(single_uri)

        for label, db in (("single", single_db), ("citus", citus_db)):
            t0 = time.perf_counter()
            prepare_corpus(db, corpus_file, progress=False)
            result.setdefault("ingest_seconds", {})[label] = round(time.perf_counter() - t0, 1)
        for name, tenant_docs in CORPORA.items():
            citus_db.corpus(name).ingest([dict(d) for d in tenant_docs], progress=False)
        names = [c["name"] for c in citus_db.corpora()]
        result["placement"] = {n: sorted({f"{h}:{p}" for _t, _s, h, p in distribute.placement(citus_db, n)})
                               for n in names}
        bench_corpus = next(n for n in names if n not in CORPORA)

        for clients in (1, 8):
            for label, uri in (("single", single_uri), ("citus", citus_uri)):
                db = pgrag.connect(uri)
                r = load_benchmark(db, corpus_file, args.questions, clients=clients, seconds=args.seconds,
                                   method_names=["dense", "bm25", "hybrid"], progress=False)
                db.close()
                result.setdefault("load", {})[f"{label}_{clients}"] = {
                    k: r[k] for k in ("requests", "errors", "throughput_rps", "p50_ms", "p95_ms", "p99_ms",
                                      "per_method")}
                print(label, clients, r["throughput_rps"], r["p50_ms"], r["errors"], flush=True)

        # Results equal on both, then a shard move under load.
        kb = citus_db.corpus(bench_corpus)
        questions = [q.question for q in load_questions(args.questions)]
        embeddings = list(kb.embedder.encode(questions))
        before = ranked_all(citus_db, bench_corpus, questions, embeddings)
        result["citus_equals_single"] = same(before, ranked_all(single_db, bench_corpus, questions, embeddings))
        placement = distribute.placement(citus_db, bench_corpus)
        source = placement[0][3]
        target = next(w.port for w in cluster.workers if w.port != source)
        shard = next(s for t, s, _h, _p in placement if t == "document")
        load: dict = {}

        def run_load() -> None:
            db = pgrag.connect(citus_uri)
            load.update(load_benchmark(db, corpus_file, args.questions, clients=8, seconds=args.seconds,
                                       method_names=["dense", "bm25", "hybrid"], progress=False))
            db.close()

        t = threading.Thread(target=run_load)
        t.start()
        time.sleep(args.seconds / 3)
        t0 = time.perf_counter()
        with psycopg.connect(citus_uri, autocommit=True) as conn:
            conn.execute("SELECT citus_move_shard_placement(%s, '127.0.0.1', %s, '127.0.0.1', %s)",
                         (shard, source, target))
        moved = time.perf_counter() - t0
        t.join()
        after = ranked_all(citus_db, bench_corpus, questions, embeddings)
        result["shard_move"] = {
            "corpus": bench_corpus, "from_port": source, "to_port": target, "seconds": round(moved, 2),
            "placement_after": sorted({p for _t, _s, _h, p in distribute.placement(citus_db, bench_corpus)}),
            "requests_during": load["requests"], "errors_during": load["errors"],
            "error_samples": load["error_samples"], "throughput_rps_during": load["throughput_rps"],
            "results_unchanged": same(before, after),
        }
        print(json.dumps(result["shard_move"]), flush=True)
        citus_db.close()
        single_db.close()
    finally:
        cluster.stop()
        server.stop(single_dir)
        shutil.rmtree(root, ignore_errors=True)
    text = json.dumps(result, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
