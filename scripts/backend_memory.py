"""What one server backend costs: its private memory after each method, and the
time of its first pgrag.retrieve, with its models in process and through the
shared model runtime (issue 36).

    python scripts/backend_memory.py --dsn postgresql://... --corpus sample \
        --model-runtime inprocess,shared --connections 4 \
        --hold 64 --hold-corpus eval-9d6e352952aafb18 --out docs/benchmarks/backend_memory.json

``--hold N`` then opens N connections at once through the shared runtime, has
each run tigrag on ``--hold-corpus``, and sums what they and the runtime hold
(Pss, each shared page split among its users, so the sum is the machine's).

Each of ``--connections`` fresh connections runs every method once, in the
order given, through SQL (as an application would), and after each the backend's
/proc/<pid>/smaps_rollup is read: Private_Clean + Private_Dirty (what this
backend alone holds) and Pss. Needs a server on this machine and the right to
read its processes' /proc (root, or the server's OS user).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import psycopg

QUESTION = "When did Lothair II's mother die?"


def rollup(pid: int) -> dict[str, float]:
    """Private and proportional memory of a process, in MB."""
    fields = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        name, _, rest = line.partition(":")
        fields[name.strip()] = int(rest.split()[0]) / 1024
    return {"private_mb": round(fields["Private_Clean"] + fields["Private_Dirty"], 1),
            "pss_mb": round(fields["Pss"], 1)}


def options(runtime: str) -> str:
    return f"-c pgrag.model_runtime={runtime}"


def one_backend(dsn: str, corpus: str, methods: list[str], runtime: str) -> dict:
    with psycopg.connect(dsn, autocommit=True, options=options(runtime)) as conn:
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        out = {"fresh": rollup(pid), "methods": {}}
        for i, method in enumerate(methods):
            t0 = time.perf_counter()
            conn.execute("SELECT count(*) FROM pgrag.retrieve(%s, %s, %s, 5)", (corpus, QUESTION, method)).fetchone()
            ms = (time.perf_counter() - t0) * 1000
            if i == 0:
                out["first_call_ms"] = round(ms, 1)
            out["methods"][method] = {**rollup(pid), "ms": round(ms, 1)}
        out["loaded"] = conn.execute("SELECT pgrag_internal._py('ping', '{}')").fetchone()[0]["loaded"]
        return out


def hold(dsn: str, corpus: str, n: int) -> dict:
    """N backends at once, each after tigrag through the shared runtime: their and the runtime's memory."""
    conns = [psycopg.connect(dsn, autocommit=True, options=options("shared")) for _ in range(n)]
    try:
        for conn in conns:
            conn.execute("SELECT count(*) FROM pgrag.retrieve(%s, %s, 'tigrag', 5)", (corpus, QUESTION)).fetchone()
        backends = [rollup(c.execute("SELECT pg_backend_pid()").fetchone()[0]) for c in conns]
        health = conns[0].execute("SELECT pgrag.model_runtime()").fetchone()[0]["health"]
        runtime = rollup(int(health["pid"]))
    finally:
        for conn in conns:
            conn.close()
    total = sum(b["pss_mb"] for b in backends) + runtime["pss_mb"]
    return {"connections": n, "corpus": corpus, "backends_private_mb_sum": round(sum(b["private_mb"] for b in backends)),
            "backends_pss_mb_sum": round(sum(b["pss_mb"] for b in backends)), "runtime": runtime,
            "total_pss_mb_with_runtime": round(total), "backend_private_mb_median":
                statistics.median(b["private_mb"] for b in backends)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--methods", default="bm25,dense,tigrag,threadrag,cirag,t2rag")
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--model-runtime", default="inprocess,shared", help="one set of backends per value")
    parser.add_argument("--hold", type=int, default=0, help="then N connections at once through the shared runtime")
    parser.add_argument("--hold-corpus", default=None, help="the corpus the held connections run tigrag on")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    methods = [m for m in args.methods.split(",") if m]
    result: dict = {"corpus": args.corpus, "methods": methods, "runs": {}}
    for runtime in [r for r in args.model_runtime.split(",") if r]:
        backends = [one_backend(args.dsn, args.corpus, methods, runtime) for _ in range(args.connections)]
        last = [b["methods"][methods[-1]]["private_mb"] for b in backends]
        result["runs"][runtime] = {
            "backends": backends, "private_mb_after_all_median": statistics.median(last),
            "first_call_ms_median": statistics.median(b["first_call_ms"] for b in backends)}
    if args.hold:
        result["hold"] = hold(args.dsn, args.hold_corpus or args.corpus, args.hold)
    text = json.dumps(result, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
