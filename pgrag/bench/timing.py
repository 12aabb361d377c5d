"""Benchmarks (``pgrag bench``): wall-clock figures and ratios from one run.

Timings belong here, not in unit tests: these machines are shared and noisy, so
the figures to compare are ratios measured within the same run.
"""

from __future__ import annotations

import hashlib
import os
import platform
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..progress import tqdm

from .. import methods
from ..database import Database
from ..exceptions import PgragError
from .metrics import percentile
from ..sources import load_path


def ingest_benchmark(db: Database, corpus_file: Path, *, limit: int | None = None,
                     batch_size: int | None = None, progress: bool = True,
                     methods: Sequence[str] = (), model_runtimes: Sequence[str | None] = (None,)) -> dict[str, Any]:
    """Ingest ``corpus_file`` into a fresh corpus and report the split of the wall
    time: neural embedding, spaCy (sentences, NER) and everything else. The corpus
    maintains the families ``methods`` need (ThreadRAG's semantic nodes, whose
    share is ``node_embedding_seconds``), else none. ``model_runtimes``: one
    ingest per entry with this process's models there (config.set_model_runtime;
    None: as configured), side by side as "runs" when there are several."""
    from ..config import set_model_runtime

    runs = []
    for runtime in model_runtimes:
        set_model_runtime(runtime)
        try:
            runs.append({"model_runtime": runtime or "as configured",
                         **_ingest_run(db, corpus_file, limit, batch_size, progress, methods)})
        finally:
            set_model_runtime(None)
    return runs[0] if len(runs) == 1 else {"runs": runs}


def _ingest_run(db: Database, corpus_file: Path, limit: int | None, batch_size: int | None, progress: bool,
                methods: Sequence[str]) -> dict[str, Any]:
    docs = load_path(corpus_file)
    if limit:
        docs = docs[:limit]
    digest = hashlib.sha256(corpus_file.read_bytes()).hexdigest()[:12]
    name = f"bench-ingest-{digest}-{len(docs)}"
    if any(c["name"] == name for c in db.corpora()):
        db.drop_corpus(name)
    kb = db.corpus(name)
    kb.embedder  # load the model before the clock starts
    report = kb.ingest(docs, batch_size=batch_size, progress=progress, methods=methods)
    return {
        "corpus_file": str(corpus_file),
        "corpus": name,
        "documents": report.added,
        "sentences": report.sentences,
        "chunks": report.chunks,
        "entities": report.entities,
        "families": list(kb.families),
        "semantic_nodes": report.nodes,
        "node_embedding_seconds": round(report.node_embedding_seconds, 3),
        "name_vectors": report.names,
        "name_embedding_seconds": round(report.name_embedding_seconds, 3),
        "total_seconds": round(report.total_seconds, 3),
        "embedding_seconds": round(report.embedding_seconds, 3),
        "nlp_seconds": round(report.nlp_seconds, 3),
        "other_seconds": round(report.other_seconds, 3),
        "other_to_embedding": round(report.other_seconds / report.embedding_seconds, 4)
        if report.embedding_seconds else None,
        "docs_per_second": round(report.added / report.total_seconds, 2) if report.total_seconds else None,
        "embedding_model": kb.info.embedding_model,
        "machine": {"python": platform.python_version(), "processor": platform.machine(),
                    "cpus": os.cpu_count()},
    }


VIAS = ("python", "sql", "both")


def query_benchmark(db: Database, corpus_file: Path, questions_file: Path, method_names: Sequence[str], *,
                    k: int = 10, warmup: int = 5, limit: int | None = None, via: str = "python",
                    progress: bool = True) -> dict[str, Any]:
    """Query latency per method over a question set, after ``warmup`` untimed
    questions per method. Methods take turns on each question, so a noisy moment
    on a shared machine hits all of them alike; each p50 is also given as a ratio
    to dense's p50 from the same run (dense is always measured, as the yardstick).

    ``via``: ``python`` (``kb.retrieve`` in this process), ``sql`` (``pgrag.retrieve``
    from a plain psycopg connection: the same method code in the server) or
    ``both``, which also counts the questions on which both homes returned the same
    chunks. SQL entries are named ``<method>@sql``."""
    from .evaluate import load_questions, prepare_corpus

    if via not in VIAS:
        raise PgragError(f"via must be one of {', '.join(VIAS)}")
    for name in method_names:
        methods.get(name)
    kb, corpus = prepare_corpus(db, corpus_file, progress=progress,
                                methods=list(dict.fromkeys(["dense", *method_names])))
    questions = [q.question for q in load_questions(questions_file)[:limit]]
    timed = time_methods(db, kb, questions, method_names, k=k, warmup=warmup, via=via, progress=progress)
    return {**timed, "corpus_file": str(corpus_file), "corpus": corpus.name, "documents": corpus.documents,
            "chunks": corpus.chunks, "embedding_model": corpus.embedding_model,
            "machine": {"python": platform.python_version(), "processor": platform.machine(),
                        "cpus": os.cpu_count()}}


def time_methods(db: Database, kb: Any, questions: Sequence[str], method_names: Sequence[str], *,
                 k: int = 10, warmup: int = 5, via: str = "python", progress: bool = True) -> dict[str, Any]:
    """The timing loop of ``query_benchmark`` over an open corpus ``kb``."""
    import psycopg

    from ..queries import query

    names = list(dict.fromkeys(["dense", *method_names]))
    homes = ["python", "sql"] if via == "both" else [via]
    runs = [(name, home) for name in names for home in homes]
    label = {(n, h): n if h == "python" else f"{n}@sql" for n, h in runs}
    agree: dict[str, int] = {n: 0 for n in names}
    with psycopg.connect(db.dsn, autocommit=True) as conn:   # imports nothing of pgrag into the query

        def once(name: str, home: str, question: str) -> tuple[list[int], dict[str, float]]:
            if home == "python":
                hits = kb.retrieve(question, method=name, k=k)
                return [h.provenance.chunk_id for h in hits], hits.trace.timings_ms
            rows = conn.execute(query("retrieve_sql"), {"corpus": kb.name, "question": question, "method": name,
                                                        "k": k, "options": "{}"}).fetchall()
            return [r[1] for r in rows], {}

        for name, home in runs:
            for q in questions[:warmup]:
                once(name, home, q)
        times: dict[str, list[float]] = {label[r]: [] for r in runs}
        stages: dict[str, dict[str, float]] = {label[r]: {} for r in runs}
        for q in tqdm(questions, desc="bench queries", unit="q", disable=not progress):
            for name in names:
                seen = []
                for home in homes:
                    t0 = time.perf_counter()
                    ids, timings = once(name, home, q)
                    times[label[name, home]].append((time.perf_counter() - t0) * 1000)
                    seen.append(ids)
                    for stage, ms in timings.items():
                        stages[label[name, home]][stage] = stages[label[name, home]].get(stage, 0.0) + ms / len(questions)
                agree[name] += all(ids == seen[0] for ids in seen)
    dense_p50 = percentile(times[label["dense", homes[0]]], 50)
    extra: dict[str, Any] = {"via": via}
    if via == "both":
        extra["same_chunks"] = {n: f"{agree[n]}/{len(questions)}" for n in names}
        extra["sql_p50_to_python"] = {n: round(percentile(times[f"{n}@sql"], 50) / percentile(times[n], 50), 3)
                                      for n in names if times[n]}
    return {**extra,
        "questions": len(questions),
        "k": k,
        "warmup": warmup,
        "methods": {
            name: {
                "latency_ms_p50": round(percentile(ts, 50), 2),
                "latency_ms_p95": round(percentile(ts, 95), 2),
                "p50_to_dense": round(percentile(ts, 50) / dense_p50, 3) if dense_p50 else None,
                "stage_ms_mean": {stage: round(ms, 2) for stage, ms in stages[name].items()},
            }
            for name, ts in times.items()
        },
    }


def graph_benchmark(db: Database, corpus_file: Path, questions_file: Path, *, limit: int = 10,
                    progress: bool = True) -> dict[str, Any]:
    """The token graph's costs: building the CSR matrix from the database, and
    PPR in scipy against PPR in SQL (``pgrag.ppr``) on the seeds of the first
    ``limit`` questions, with whether their top-γ tokens agree."""
    from ..index import pagerank
    from ..index.graph import load_graph
    from ..methods.tigrag import TigragSettings
    from .evaluate import load_questions, prepare_corpus

    settings = TigragSettings()
    kb, corpus = prepare_corpus(db, corpus_file, progress=progress)
    t0 = time.perf_counter()
    g = load_graph(db, kb.id)
    build = time.perf_counter() - t0
    scipy_ms: list[float] = []
    sql_ms: list[float] = []
    agree = 0
    max_diff = 0.0
    questions = load_questions(questions_file)[:limit]
    for q in tqdm(questions, desc="bench graph", unit="q", disable=not progress):
        seeds = sorted({t for t in kb.tokenize(q.question) if t in g.index})
        t0 = time.perf_counter()
        pr = pagerank.personalized_pagerank(g, [g.index[t] for t in seeds], damping=settings.damping,
                                            tolerance=settings.tolerance)
        top = pagerank.top_nodes(pr.scores, settings.gamma)
        t1 = time.perf_counter()
        rows = db.fetchall("ppr", {"corpus": kb.name, "seeds": seeds, "damping": settings.damping,
                                   "top": settings.gamma, "tolerance": settings.tolerance,
                                   "max_iterations": settings.max_iterations})
        t2 = time.perf_counter()
        scipy_ms.append((t1 - t0) * 1000)
        sql_ms.append((t2 - t1) * 1000)
        agree += [r[0] for r in rows] == [g.terms[i] for i in top]
        max_diff = max([max_diff, *(abs(score - pr.scores[g.index[term]]) for term, score in rows)])
    return {
        "corpus": corpus.name, "nodes": g.nodes, "edges": g.edges,
        "csr_build_seconds": round(build, 3),
        "questions": len(questions), "gamma": settings.gamma, "damping": settings.damping,
        "tolerance": settings.tolerance,
        "ppr_scipy_ms_p50": round(percentile(scipy_ms, 50), 2),
        "ppr_sql_ms_p50": round(percentile(sql_ms, 50), 2),
        "sql_to_scipy": round(percentile(sql_ms, 50) / percentile(scipy_ms, 50), 1),
        "same_top_tokens": agree,
        "max_score_difference": max_diff,
    }


# -- load (``pgrag bench load``) ------------------------------------------------

# Each is one SQL call. tigrag is the multi-hop method through pgrag.retrieve (the
# in-server runtime, no vector passed); tigrag-1hop the pure-SQL single hop that
# takes a vector (pgrag.tigrag).
LOAD_METHODS = ("dense", "bm25", "hybrid", "tigrag", "tigrag-1hop")
LOAD_DEFAULT = ("dense", "bm25", "hybrid", "tigrag")
_LOAD_QUERY = {"dense": "dense", "bm25": "bm25", "hybrid": "hybrid", "tigrag": "retrieve_sql",
               "tigrag-1hop": "tigrag"}


def rss_mb() -> float:
    """This process's resident set size now, in MiB (Linux /proc; ru_maxrss elsewhere)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@dataclass
class _LoadLog:
    """Latencies and errors recorded by the client threads (under one lock)."""

    times: dict[str, list[float]]
    errors: int = 0
    error_samples: list[str] | None = None

    def record(self, lock: threading.Lock, method: str, ms: float | None, error: str | None) -> None:
        with lock:
            if error is None and ms is not None:
                self.times[method].append(ms)
                return
            self.errors += 1
            if self.error_samples is not None and len(self.error_samples) < 5:
                self.error_samples.append(f"{method}: {error}")


def _load_params(method: str, corpus: str, question: str, embedding: Any, k: int) -> dict[str, Any]:
    params: dict[str, Any] = {"corpus": corpus, "k": k}
    if method == "tigrag":
        return {**params, "question": question, "method": "tigrag", "options": "{}"}
    if method in ("bm25", "hybrid", "tigrag-1hop"):
        params["query"] = question
    if method in ("dense", "hybrid", "tigrag-1hop"):
        params["embedding"] = embedding
    if method == "hybrid":
        params.update(depth=100, rrf_k=60)
    return params


def _client(pool: Any, index: int, deadline: float, work: list[tuple[str, str, Any]], corpus: str, k: int,
            log: _LoadLog, lock: threading.Lock) -> None:
    """One client: requests back to back until the deadline, each on a pooled
    connection, cycling through (method, question) from its own offset so that
    clients run different methods at the same moment."""
    from ..queries import query

    i = index * 7919  # a prime stride spreads the clients over the mix
    while time.perf_counter() < deadline:
        method, question, embedding = work[i % len(work)]
        i += 1
        t0 = time.perf_counter()
        try:
            with pool.connection() as conn:
                conn.execute(query(_LOAD_QUERY[method]), _load_params(method, corpus, question, embedding, k)
                             ).fetchall()
        except Exception as error:  # counted and reported: a load test must not stop at the first
            log.record(lock, method, None, f"{type(error).__name__}: {str(error).strip()[:200]}")
        else:
            log.record(lock, method, (time.perf_counter() - t0) * 1000, None)


def load_benchmark(db: Database, corpus_file: Path, questions_file: Path, *, clients: int | Sequence[int] = 8,
                   seconds: float = 60.0, method_names: Sequence[str] = LOAD_DEFAULT, k: int = 10,
                   compare_python: bool = False, torch_threads: Sequence[int | None] = (None,),
                   model_runtimes: Sequence[str | None] = (None,), progress: bool = True) -> dict[str, Any]:
    """Concurrent retrieval clients against one corpus through a psycopg_pool
    ConnectionPool (one connection per client), for ``seconds``.

    Clients are threads calling the SQL retrieval functions (pgrag.dense, bm25,
    hybrid, tigrag) with query embeddings computed once beforehand. psycopg
    releases the GIL while a query runs, so threads load the server fully; query
    embedding (torch) and the Python-side TIGRAG steps would instead serialise
    on the GIL and measure this client, not the database. So the figures are the
    database's retrieval throughput and latency under concurrency, as an
    application calling the SQL API sees them.

    ``torch_threads``: one run per entry, each on fresh backends whose sessions
    set ``pgrag.torch_threads`` to it (None: the server's default, 1 a backend);
    with more than one entry the result holds the runs side by side ("runs").
    ``model_runtimes`` likewise sets ``pgrag.model_runtime`` (None: the server's
    setting), and ``clients`` may be a list of levels: one run per combination,
    in the order runtime, threads, clients.

    ``compare_python`` then runs multi-hop tigrag the other way for as long: one
    client *process* per client calling ``kb.retrieve`` (processes, since threads
    would serialise on the GIL), and reports the SQL/Python p95 ratio."""
    from .evaluate import load_questions, prepare_corpus

    unknown = [m for m in method_names if m not in LOAD_METHODS]
    if unknown or not method_names:
        raise PgragError(f"bench load runs the SQL methods {', '.join(LOAD_METHODS)}; not {', '.join(unknown)}")
    levels = [clients] if isinstance(clients, int) else list(clients)
    if not levels or min(levels) < 1 or seconds <= 0:
        raise PgragError("clients must be at least 1 and seconds positive")
    if not torch_threads or not model_runtimes:
        raise PgragError("torch_threads and model_runtimes need at least one entry")
    kb, corpus = prepare_corpus(db, corpus_file, progress=progress)
    questions = [q.question for q in load_questions(questions_file)]
    if not questions:
        raise PgragError(f"no questions in {questions_file}")
    embeddings = list(kb.embedder.encode(questions))
    work = [(m, q, e) for q, e in zip(questions, embeddings) for m in method_names]
    runs = [_load_run(db.dsn, kb.name, questions[0], work, method_names, clients=n, seconds=seconds, k=k,
                      threads=threads, model_runtime=runtime)
            for runtime in model_runtimes for threads in torch_threads for n in levels]
    python = _python_clients(db.dsn, kb.name, questions, levels[0], seconds, k) if compare_python else None
    head = {"corpus": corpus.name, "documents": corpus.documents, "chunks": corpus.chunks,
            "clients": levels[0] if len(levels) == 1 else levels, "k": k, "methods": list(method_names),
            "client_model": "threads; SQL functions through psycopg_pool; query embeddings precomputed",
            "machine": {"python": platform.python_version(), "processor": platform.machine(),
                        "cpus": os.cpu_count()}}
    body: dict[str, Any] = runs[0] if len(runs) == 1 else {"runs": runs}
    if python is not None:
        sql_p95 = runs[-1]["per_method"].get("tigrag", {}).get("p95_ms")
        body = {**body, "python_tigrag": python, "tigrag_sql_p95_to_python": round(sql_p95 / python["p95_ms"], 3)
                if sql_p95 and python["p95_ms"] else None}
    return {**head, **body}


def _load_run(dsn: str, corpus: str, warm_question: str, work: list[tuple[str, str, Any]],
              method_names: Sequence[str], *, clients: int, seconds: float, k: int,
              threads: int | None, model_runtime: str | None = None) -> dict[str, Any]:
    """One timed run of ``clients`` threads on a pool of fresh connections."""
    from pgvector.psycopg import register_vector
    from psycopg_pool import ConnectionPool

    log = _LoadLog(times={m: [] for m in method_names}, error_samples=[])
    lock = threading.Lock()
    kwargs: dict[str, Any] = {"autocommit": True}
    settings = [f"-c pgrag.torch_threads={int(threads)}"] if threads is not None else []
    if model_runtime is not None:   # from the command line: a word, a socket path or a URL, no spaces
        settings.append(f"-c pgrag.model_runtime={model_runtime}")
    if settings:
        kwargs["options"] = " ".join(settings)
    with ConnectionPool(dsn, min_size=clients, max_size=clients, configure=register_vector,
                        kwargs=kwargs, open=True) as pool:
        pool.wait(timeout=30)
        # Each backend's first in-server call loads the model and the graph (seconds):
        # measured here, outside the timed window, as the Python clients warm up too.
        first_calls = _warm_backends(pool, clients, corpus, warm_question, k) if "tigrag" in method_names else []
        rss_start = rss_mb()
        t0 = time.perf_counter()
        workers = [threading.Thread(target=_client, args=(pool, i, t0 + seconds, work, corpus, k, log, lock),
                                    name=f"pgrag-load-{i}", daemon=True) for i in range(clients)]
        for t in workers:
            t.start()
        for t in workers:
            t.join()
        elapsed = time.perf_counter() - t0
        rss_end = rss_mb()
    every = [ms for ts in log.times.values() for ms in ts]

    def pct(ts: list[float], p: float) -> float | None:
        return round(percentile(ts, p), 2) if ts else None

    return {
        "clients": clients, "torch_threads": threads if threads is not None else "server default",
        "model_runtime": model_runtime or "server default", "seconds": round(elapsed, 2), "requests": len(every) + log.errors, "errors": log.errors,
        "error_samples": log.error_samples,
        "throughput_rps": round(len(every) / elapsed, 2) if elapsed else 0.0,
        "p50_ms": pct(every, 50), "p95_ms": pct(every, 95), "p99_ms": pct(every, 99),
        "per_method": {m: {"requests": len(ts), "p50_ms": pct(ts, 50), "p95_ms": pct(ts, 95), "p99_ms": pct(ts, 99)}
                       for m, ts in log.times.items()},
        "rss_start_mb": round(rss_start, 1), "rss_end_mb": round(rss_end, 1),
        **({"first_call_ms": [round(ms, 1) for ms in first_calls]} if first_calls else {}),
    }


def _warm_backends(pool: Any, clients: int, corpus: str, question: str, k: int) -> list[float]:
    """One multi-hop pgrag.retrieve on every pooled connection (all held at once, so
    each is a distinct backend), one after another; their times in ms."""
    from ..queries import query

    conns = [pool.getconn() for _ in range(clients)]
    times = []
    try:
        for conn in conns:
            t0 = time.perf_counter()
            conn.execute(query(_LOAD_QUERY["tigrag"]), _load_params("tigrag", corpus, question, None, k)).fetchall()
            times.append((time.perf_counter() - t0) * 1000)
    finally:
        for conn in conns:
            pool.putconn(conn)
    return times


def _python_worker(dsn: str, corpus: str, questions: list[str], offset: int, seconds: float, k: int,
                   ready: Any, start: Any, out: Any) -> None:
    """One Python client process: multi-hop tigrag by ``kb.retrieve`` until the deadline."""
    from ..database import open_database

    db = open_database(dsn, migrate=False)
    kb = db.corpus(corpus, create=False)
    kb.retrieve(questions[0], method="tigrag", k=k)   # warm-up: model, graph
    ready.put(offset)
    start.wait()
    times, errors = [], 0
    i = offset * 7919
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        t0 = time.perf_counter()
        try:
            kb.retrieve(questions[i % len(questions)], method="tigrag", k=k)
        except PgragError:
            errors += 1
        else:
            times.append((time.perf_counter() - t0) * 1000)
        i += 1
    out.put((times, errors, rss_mb()))
    db.close()


def _python_clients(dsn: str, corpus: str, questions: list[str], clients: int, seconds: float,
                    k: int) -> dict[str, Any]:
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    ready, out, start = ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=_python_worker, args=(dsn, corpus, questions, i, seconds, k, ready, start, out))
             for i in range(clients)]
    for p in procs:
        p.start()
    for _ in procs:
        ready.get(timeout=600)
    start.set()
    results = [out.get(timeout=seconds + 600) for _ in procs]
    for p in procs:
        p.join()
    times = [ms for ts, _, _ in results for ms in ts]
    return {"clients": clients, "model": "one process per client, kb.retrieve(method='tigrag')",
            "requests": len(times), "errors": sum(e for _, e, _ in results),
            "p50_ms": round(percentile(times, 50), 2) if times else None,
            "p95_ms": round(percentile(times, 95), 2) if times else None,
            "rss_mb_per_process": round(sum(r for _, _, r in results) / len(results), 1)}


# -- following an application table (issue 16) -------------------------------

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

    from .. import follow

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

    from .. import follow

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
            kb.embedder  # loaded before the clock starts
            t0 = time.perf_counter()
            report = kb.ingest(docs, batch_size=batch_size, progress=progress)
            model[kind].append(report.embedding_seconds + report.nlp_seconds)
        else:
            db.attach(name, f"{BENCH_SCHEMA}.articles", id_column="id", text_column="body", title_column="title")
            kb = db.corpus(name, create=False)
            kb.embedder
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
