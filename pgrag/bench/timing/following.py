"""``pgrag bench follow``: corpora that follow an application table (issue 16),
the triggers' overhead on the application's UPDATEs and the worker's
throughput against ``pgrag ingest``."""

from __future__ import annotations

import hashlib
import os
import platform
import time
from pathlib import Path
from typing import Any

from ...database import Database
from ...sources import load_path

BENCH_SCHEMA = "pgrag_bench_app"   # created and dropped by follow_benchmark


def follow_benchmark(db: Database, corpus_file: Path, *, limit: int | None = 1000, rows: int = 10_000,
                     repeat: int = 3, batch_size: int = 64, progress: bool = True) -> dict[str, Any]:
    """Two figures for corpora that follow a table:

    - trigger overhead: a ``rows``-row application UPDATE of an attached column,
      timed without and with an attachment (each run rolled back, best of
      ``repeat``), and an UPDATE of a non-attached column with the attachment;
    - worker throughput: the first ``limit`` documents of ``corpus_file`` indexed
      by ``pgrag ingest`` and by the worker from an attached table, in the order
      ingest, worker, worker, ingest (so drift on a shared machine hits both)."""
    import psycopg
    from psycopg import sql

    from ... import follow

    docs = load_path(corpus_file)[:limit]
    table = sql.Identifier(BENCH_SCHEMA, "articles")
    digest = hashlib.sha256(corpus_file.read_bytes()).hexdigest()[:8]
    names = {"ingest": f"bench-follow-ingest-{digest}", "worker": f"bench-follow-worker-{digest}",
             "trigger": f"bench-follow-trigger-{digest}"}
    for name in names.values():
        if any(c["name"] == name for c in db.corpora()):
            if follow.attachments(db, name):
                db.detach(name)
            db.drop_corpus(name)
    assert db.dsn
    with psycopg.connect(db.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(BENCH_SCHEMA)))
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(BENCH_SCHEMA)))
        try:
            trigger = _trigger_overhead(db, conn, table, names["trigger"], rows, repeat)
            throughput = _worker_throughput(db, conn, table, names, docs, batch_size, progress)
        finally:
            for name in names.values():
                if any(c["name"] == name for c in db.corpora()):
                    if follow.attachments(db, name):
                        db.detach(name)
                    db.drop_corpus(name)
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(BENCH_SCHEMA)))
    return {"corpus_file": str(corpus_file), "trigger": trigger, "throughput": throughput,
            "machine": {"python": platform.python_version(), "processor": platform.machine(),
                        "cpus": os.cpu_count()}}


def _timed_update(conn: Any, statement: Any, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        conn.execute("BEGIN")
        t0 = time.perf_counter()
        conn.execute(statement)
        best = min(best, time.perf_counter() - t0)
        conn.execute("ROLLBACK")
    return best


def _trigger_overhead(db: Database, conn: Any, table: Any, corpus: str, rows: int, repeat: int) -> dict[str, Any]:
    from psycopg import sql

    conn.execute(sql.SQL("CREATE TABLE {} (id integer PRIMARY KEY, title text, body text, author text, "
                         "views integer NOT NULL DEFAULT 0)").format(table))
    conn.execute(sql.SQL("INSERT INTO {} (id, title, body, author) SELECT g, 'Title ' || g, "
                         "'Body number ' || g || ' of the benchmark table, a sentence of ordinary length.', "
                         "'author' || (g %% 10) FROM generate_series(1, %s) AS g").format(table), (rows,))
    conn.execute(sql.SQL("VACUUM ANALYZE {}").format(table))
    attached_col = sql.SQL("UPDATE {} SET body = body || ' (edited)'").format(table)
    other_col = sql.SQL("UPDATE {} SET views = views + 1").format(table)
    without = _timed_update(conn, attached_col, repeat)
    other_without = _timed_update(conn, other_col, repeat)
    db.attach(corpus, f"{BENCH_SCHEMA}.articles", id_column="id", text_column="body", title_column="title",
              metadata_columns=["author"])
    conn.execute("DELETE FROM pgrag.follow_queue WHERE corpus_id = (SELECT corpus_id FROM pgrag.corpus "
                 "WHERE name = %s)", (corpus,))        # the attach backlog is not what is measured
    with_ = _timed_update(conn, attached_col, repeat)
    other_with = _timed_update(conn, other_col, repeat)
    db.detach(corpus, drop_corpus=True)
    return {
        "rows": rows, "repeat": repeat,
        "update_seconds_without": round(without, 4), "update_seconds_with": round(with_, 4),
        "overhead_us_per_row": round((with_ - without) / rows * 1e6, 2),
        "ratio": round(with_ / without, 3),
        "other_column_seconds_without": round(other_without, 4),
        "other_column_seconds_with": round(other_with, 4),
        "other_column_ratio": round(other_with / other_without, 3),
    }


def _worker_throughput(db: Database, conn: Any, table: Any, names: dict[str, str], docs: list[Any],
                       batch_size: int, progress: bool) -> dict[str, Any]:
    from psycopg import sql

    from ... import follow

    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table))
    conn.execute(sql.SQL("CREATE TABLE {} (id text PRIMARY KEY, title text, body text)").format(table))
    with conn.cursor() as cur, cur.copy(sql.SQL("COPY {} (id, title, body) FROM STDIN").format(table)) as cp:
        for d in docs:
            cp.write_row((d.external_id, d.title, d.body))
    runs: dict[str, list[float]] = {"ingest": [], "worker": []}
    model: dict[str, list[float]] = {"ingest": [], "worker": []}   # spaCy + embedding: the same work in both
    for kind in ("ingest", "worker", "worker", "ingest"):
        name = names[kind]
        if any(c["name"] == name for c in db.corpora()):
            if follow.attachments(db, name):
                db.detach(name)
            db.drop_corpus(name)
        if kind == "ingest":
            kb = db.corpus(name)
            _ = kb.embedder  # loaded before the clock starts
            t0 = time.perf_counter()
            report = kb.ingest(docs, batch_size=batch_size, progress=progress)
            model[kind].append(report.embedding_seconds + report.nlp_seconds)
        else:
            db.attach(name, f"{BENCH_SCHEMA}.articles", id_column="id", text_column="body", title_column="title")
            kb = db.corpus(name, create=False)
            _ = kb.embedder
            t0 = time.perf_counter()
            reports = kb.sync(batch_size=batch_size)
            assert sum(r.indexed for r in reports) == len(docs), "the worker did not index every row"
            model[kind].append(sum(r.ingest.embedding_seconds + r.ingest.nlp_seconds for r in reports if r.ingest))
        runs[kind].append(time.perf_counter() - t0)
    ingest_s, worker_s = min(runs["ingest"]), min(runs["worker"])
    rest = {k: [round(t - m, 2) for t, m in zip(runs[k], model[k])] for k in runs}
    return {
        "documents": len(docs), "batch_size": batch_size,
        "ingest_seconds": [round(s, 2) for s in runs["ingest"]],
        "worker_seconds": [round(s, 2) for s in runs["worker"]],
        "ingest_docs_per_second": round(len(docs) / ingest_s, 2),
        "worker_docs_per_second": round(len(docs) / worker_s, 2),
        "worker_to_ingest_throughput": round(ingest_s / worker_s, 3),
        # Wall time outside spaCy and the embedding model (SQL, COPY, queue work),
        # per run: what the worker adds shows here, free of the model's noise.
        "ingest_non_model_seconds": rest["ingest"],
        "worker_non_model_seconds": rest["worker"],
        "load_average_after": [round(x, 1) for x in os.getloadavg()],
    }
