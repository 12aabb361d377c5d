"""``pgrag bench load``: concurrent retrieval clients against one corpus, through
the SQL functions on a connection pool (and, to compare, Python clients in
processes of their own)."""

from __future__ import annotations

import os
import platform
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...database import Database
from ...exceptions import PgragError
from ..metrics import percentile

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
    from ...queries import query

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
                   model_runtimes: Sequence[str | None] = (None,), capacity: bool = True,
                   keep_cache: bool = False, progress: bool = True) -> dict[str, Any]:
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

    ``capacity`` first measures each method's CPU a request alone, by process
    (pgrag.bench.timing.capacity), once for each runtime and thread setting; each
    run then reports its throughput as a fraction of what the cores allow
    (``capacity_fraction``) and the share of the cores that were busy.

    ``compare_python`` then runs multi-hop tigrag the other way for as long: one
    client *process* per client calling ``kb.retrieve`` (processes, since threads
    would serialise on the GIL), and reports the SQL/Python p95 ratio.

    The model runtimes' vector caches are off for the whole benchmark unless
    ``keep_cache`` (pgrag.bench.timing.cache): its questions come round again."""
    from ..evaluate import load_questions, prepare_corpus
    from .cache import runtime_cache

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
    runs = []
    with runtime_cache(db.dsn, keep_cache, model_runtimes) as cache:
        for runtime in model_runtimes:
            for threads in torch_threads:
                alone = _cpu_alone(db.dsn, kb.name, work, method_names, k=k, threads=threads,
                                   model_runtime=runtime) if capacity else None
                for n in levels:
                    run = _load_run(db.dsn, kb.name, questions[0], work, method_names, clients=n, seconds=seconds,
                                    k=k, threads=threads, model_runtime=runtime)
                    runs.append(_with_capacity(run, alone) if alone is not None else run)
        python = _python_clients(db.dsn, kb.name, questions, levels[0], seconds, k) if compare_python else None
    head = {**cache, "corpus": corpus.name, "documents": corpus.documents, "chunks": corpus.chunks,
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


def _session_kwargs(threads: int | None, model_runtime: str | None) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"autocommit": True}
    settings = [f"-c pgrag.torch_threads={int(threads)}"] if threads is not None else []
    if model_runtime is not None:   # from the command line: a word, a socket path or a URL, no spaces
        settings.append(f"-c pgrag.model_runtime={model_runtime}")
    if settings:
        kwargs["options"] = " ".join(settings)
    return kwargs


def _cpu_alone(dsn: str, corpus: str, work: list[tuple[str, str, Any]], method_names: Sequence[str], *, k: int,
               threads: int | None, model_runtime: str | None) -> dict[str, Any]:
    from pgvector.psycopg import register_vector
    from psycopg_pool import ConnectionPool

    from ...queries import query
    from .capacity import cpu_alone

    calls = [(m, (query(_LOAD_QUERY[m]), _load_params(m, corpus, q, e, k))) for m, q, e in work]
    with ConnectionPool(dsn, min_size=1, max_size=1, configure=register_vector,
                        kwargs=_session_kwargs(threads, model_runtime), open=True) as pool:
        pool.wait(timeout=30)
        return cpu_alone(pool, calls, method_names)


def _with_capacity(run: dict[str, Any], alone: dict[str, Any]) -> dict[str, Any]:
    """The run's throughput as a fraction of what the cores allow; on a shared
    machine also of what the cores left free by other work allow (the machine's
    busy time that is not this stack's)."""
    capacity = alone.get("capacity_rps")
    if not capacity:
        return {**run, "capacity": alone, "capacity_fraction": None}
    out = {**run, "capacity": alone, "capacity_fraction": round(run["throughput_rps"] / capacity, 3)}
    machine, stack = run.get("machine_cpu_ms_per_request"), run.get("stack_cpu_ms_per_request")
    if machine is not None and stack is not None:
        other = max(0.0, (machine - stack) * run["throughput_rps"] / 1000)   # cores busy with other work
        free = alone["cores"] - other
        out["other_work_cores"] = round(other, 2)
        out["capacity_fraction_of_free_cores"] = round(run["throughput_rps"] / (capacity * free / alone["cores"]), 3) \
            if free > 0 else None
    return out


def _load_run(dsn: str, corpus: str, warm_question: str, work: list[tuple[str, str, Any]],
              method_names: Sequence[str], *, clients: int, seconds: float, k: int,
              threads: int | None, model_runtime: str | None = None) -> dict[str, Any]:
    """One timed run of ``clients`` threads on a pool of fresh connections."""
    from pgvector.psycopg import register_vector
    from psycopg_pool import ConnectionPool

    from .capacity import busy_share, cache_share, machine_busy_s, runtime_health, stack_cpu_s

    log = _LoadLog(times={m: [] for m in method_names}, error_samples=[])
    lock = threading.Lock()
    with ConnectionPool(dsn, min_size=clients, max_size=clients, configure=register_vector,
                        kwargs=_session_kwargs(threads, model_runtime), open=True) as pool:
        pool.wait(timeout=30)
        # Each backend's first in-server call loads the model and the graph (seconds):
        # measured here, outside the timed window, as the Python clients warm up too.
        first_calls = _warm_backends(pool, clients, corpus, warm_question, k) if "tigrag" in method_names else []
        stack = _stack_pids(pool, clients)
        with pool.connection() as conn:
            health0 = runtime_health(conn)
        rss_start = rss_mb()
        busy0, stack0, client0 = machine_busy_s(), stack_cpu_s(stack), time.process_time()
        t0 = time.perf_counter()
        workers = [threading.Thread(target=_client, args=(pool, i, t0 + seconds, work, corpus, k, log, lock),
                                    name=f"pgrag-load-{i}", daemon=True) for i in range(clients)]
        for t in workers:
            t.start()
        for t in workers:
            t.join()
        elapsed = time.perf_counter() - t0
        rss_end = rss_mb()
        done = sum(len(ts) for ts in log.times.values()) + log.errors
        busy = busy_share(busy0, elapsed, done)
        stack1, client1 = stack_cpu_s(stack), time.process_time()
        with pool.connection() as conn:
            cached = cache_share(health0, runtime_health(conn))
        if stack0 is not None and stack1 is not None and done:
            busy["stack_cpu_ms_per_request"] = round(1000 * (stack1 - stack0 + client1 - client0) / done, 2)
    every = [ms for ts in log.times.values() for ms in ts]

    def pct(ts: list[float], p: float) -> float | None:
        return round(percentile(ts, p), 2) if ts else None

    return {
        "clients": clients, "torch_threads": threads if threads is not None else "server default",
        "model_runtime": model_runtime or "server default", "seconds": round(elapsed, 2),
        "requests": len(every) + log.errors, "errors": log.errors,
        "error_samples": log.error_samples,
        "throughput_rps": round(len(every) / elapsed, 2) if elapsed else 0.0,
        "p50_ms": pct(every, 50), "p95_ms": pct(every, 95), "p99_ms": pct(every, 99),
        "per_method": {m: {"requests": len(ts), "p50_ms": pct(ts, 50), "p95_ms": pct(ts, 95), "p99_ms": pct(ts, 99)}
                       for m, ts in log.times.items()},
        "rss_start_mb": round(rss_start, 1), "rss_end_mb": round(rss_end, 1), **busy, **cached,
        **({"first_call_ms": [round(ms, 1) for ms in first_calls]} if first_calls else {}),
    }


def _stack_pids(pool: Any, clients: int) -> list[int]:
    """The pooled connections' backends and the model runtime: the processes a
    request's CPU is spent in, besides this client."""
    from .capacity import runtime_pid

    conns = [pool.getconn() for _ in range(clients)]
    try:
        pids = [int(c.execute("SELECT pg_backend_pid()").fetchone()[0]) for c in conns]
        runtime = runtime_pid(conns[0])
    finally:
        for conn in conns:
            pool.putconn(conn)
    return pids + ([runtime] if runtime else [])


def _warm_backends(pool: Any, clients: int, corpus: str, question: str, k: int) -> list[float]:
    """One multi-hop pgrag.retrieve on every pooled connection (all held at once, so
    each is a distinct backend), one after another; their times in ms."""
    from ...queries import query

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
    from ...database import open_database

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
