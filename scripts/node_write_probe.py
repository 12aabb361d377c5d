"""What storing ThreadRAG's node terms (migration 0011) costs at ingest: semantic
node rows written by binary COPY without their terms (before) against
pgrag.bulk.write (after: the terms asked of pgrag.tokenize in one round trip,
then COPY with them), alternating, each inside a transaction that is rolled
back. The rows are the first --nodes nodes of the corpus that `pgrag bench
queries` indexes for --corpus-file (run it first, with threadrag among --methods).

    python scripts/node_write_probe.py --corpus-file ../shared/bench/2wiki/corpus.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import psycopg
from pgvector.psycopg import register_vector

import pgrag
from pgrag import bulk
from pgrag.bench.evaluate import corpus_name_for

COLUMNS = [name for name, _ in bulk.TABLES["semantic_node"]]
BEFORE = f"COPY pgrag.semantic_node ({', '.join(COLUMNS)}) FROM STDIN (FORMAT BINARY)"


def copy_without_terms(conn: psycopg.Connection, rows: list[tuple]) -> None:
    with conn.cursor() as cur, cur.copy(BEFORE) as copy:
        copy.set_types([t for _, t in bulk.TABLES["semantic_node"]])
        for row in rows:
            copy.write_row(row)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus-file", type=Path, required=True)
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=6, help="timed writes each way (the first not counted)")
    parser.add_argument("--dsn", default=None)
    args = parser.parse_args()
    db = pgrag.connect(args.dsn)
    corpus_id = db.corpus(corpus_name_for(args.corpus_file), create=False).id
    with psycopg.connect(db.dsn) as conn:
        register_vector(conn)
        rows = conn.execute(f"SELECT {', '.join(COLUMNS)} FROM pgrag.semantic_node WHERE corpus_id = %s "
                            "ORDER BY node_id LIMIT %s", (corpus_id, args.nodes)).fetchall()
        documents = sorted({r[1] for r in rows})
        conn.rollback()
        times: dict[str, list[float]] = {"copy_without_terms": [], "bulk_write": []}
        for _ in range(args.repeats):
            for name in times:
                conn.execute("DELETE FROM pgrag.semantic_node WHERE corpus_id = %s AND document_id = ANY (%s)",
                             (corpus_id, documents))
                t0 = time.perf_counter()
                if name == "bulk_write":
                    bulk.write(conn, "semantic_node", rows)
                else:
                    copy_without_terms(conn, rows)
                times[name].append((time.perf_counter() - t0) * 1000)
                conn.rollback()
    report = {"nodes": len(rows), "repeats": args.repeats}
    for name, ms in times.items():
        median = statistics.median(ms[1:])
        report[name] = {"median_ms": round(median, 1), "us_per_node": round(median / len(rows) * 1000, 1)}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
