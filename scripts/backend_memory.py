"""What one server backend costs: its private memory after each method, and the
time of its first pgrag.retrieve (issue 36's baseline for a shared model runtime).

    python scripts/backend_memory.py --dsn postgresql://... --corpus eval-9d6e352952aafb18 \
        --connections 4 --out docs/benchmarks/backend_memory.json

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


def one_backend(dsn: str, corpus: str, methods: list[str]) -> dict:
    with psycopg.connect(dsn, autocommit=True) as conn:
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        out = {"fresh": rollup(pid), "methods": {}}
        for i, method in enumerate(methods):
            t0 = time.perf_counter()
            conn.execute("SELECT count(*) FROM pgrag.retrieve(%s, %s, %s, 5)", (corpus, QUESTION, method)).fetchone()
            ms = (time.perf_counter() - t0) * 1000
            if i == 0:
                out["first_call_ms"] = round(ms, 1)
            out["methods"][method] = {**rollup(pid), "ms": round(ms, 1)}
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--methods", default="bm25,dense,tigrag,threadrag,cirag,t2rag")
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    methods = [m for m in args.methods.split(",") if m]
    backends = [one_backend(args.dsn, args.corpus, methods) for _ in range(args.connections)]
    last = [b["methods"][methods[-1]]["private_mb"] for b in backends]
    result = {"corpus": args.corpus, "methods": methods, "backends": backends,
              "private_mb_after_all_median": statistics.median(last),
              "first_call_ms_median": statistics.median(b["first_call_ms"] for b in backends)}
    text = json.dumps(result, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
