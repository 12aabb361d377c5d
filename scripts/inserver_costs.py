"""What the in-server runtime costs a backend: the first call (import, model load,
graph load) and the memory it then holds, on the bundled sample corpus.

    .venv/bin/python scripts/inserver_costs.py [--dsn URI] [--corpus-file FILE]

Each figure comes from a fresh backend (a new connection); RSS is read from
/proc for the backend's pid, so run it on the machine of the server.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import psycopg
from common import QUESTION, rss_mb
from common import SAMPLE as DATA

import pgrag
from pgrag.bench.evaluate import prepare_corpus


def timed(conn: psycopg.Connection, method: str, corpus: str) -> float:
    t0 = time.perf_counter()
    conn.execute("SELECT count(*) FROM pgrag.retrieve(%s, %s, %s, 5)", (corpus, QUESTION, method)).fetchone()
    return round((time.perf_counter() - t0) * 1000, 1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsn", default=None)
    parser.add_argument("--corpus-file", type=Path, default=DATA)
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args()
    db = pgrag.connect(args.dsn)
    kb, _ = prepare_corpus(db, args.corpus_file, progress=False, methods=["threadrag"])
    out: dict[str, object] = {"corpus": kb.name}
    with psycopg.connect(db.dsn, autocommit=True) as conn:
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        out["rss_mb_fresh_backend"] = round(rss_mb(pid), 1)
        out["first_bm25_ms (import pgrag)"] = timed(conn, "bm25", kb.name)
        out["rss_mb_after_import"] = round(rss_mb(pid), 1)
        out["first_dense_ms (model load)"] = timed(conn, "dense", kb.name)
        out["rss_mb_after_model"] = round(rss_mb(pid), 1)
        out["first_tigrag_ms (graph load)"] = timed(conn, "tigrag", kb.name)
        out["rss_mb_after_graph"] = round(rss_mb(pid), 1)
        out["steady_ms"] = {m: sorted(timed(conn, m, kb.name) for _ in range(5))[2]
                            for m in ("bm25", "dense", "hybrid", "tigrag", "threadrag", "cirag")}
        out["rss_mb_after_every_method"] = round(rss_mb(pid), 1)
    print(json.dumps(out, indent=2))
    if args.out:
        args.out.write_text(json.dumps(out, indent=2) + "\n")
    db.close()


if __name__ == "__main__":
    main()
