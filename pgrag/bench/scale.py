"""``pgrag bench scale``: one corpus grown to 1x, 10x, ... its size, measured at
every size in one run (docs/SCALING.md).

The larger corpora keep the token statistics of the real one: copy j of every
document has its name words (capitalised words never written in lower case)
permuted among themselves by a bijection seeded with j, and a share of them
replaced by new names, so the vocabulary keeps growing as a real corpus's does
(more slowly than the text). Copy 0 is the corpus itself, so its questions
still have their answers; the copies are distractors that share its common
words and recombine its names.

At each size the harness records the size of every table, the ingest's stages,
the graph cache (a full read from the database, writing the shared files,
mapping them, their memory and a second process's), the PPR alone (push and
exact power iteration on the questions' seeds), every method's p50/p95 from
Python and from SQL (``pgrag.retrieve``), the p50/p95 of the plain SQL
functions (``pgrag.bm25``, ``pgrag.dense``, ``pgrag.hybrid``, single-hop
``pgrag.tigrag``: no Python in the server), and the first query after a
10-document ingest and after their delete, against the steady p50.

``--embeddings random`` stores seeded random unit vectors instead of the model's
(``random-<dim>``, pgrag.embed): ingest then costs no neural embedding, which
is what lets 10x and more fit on a small machine. Every figure that depends on
the vectors (dense and rerank latencies, HNSW size) is marked, and no recall is
measured from them.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

from .. import config
from ..exceptions import PgragError
from ..progress import tqdm
from .metrics import percentile

DEFAULT_METHODS = ("dense", "bm25", "hybrid", "tigrag", "threadrag")
NEW_NAME_SHARE = 0.25
# Syllables appended to a name to make a new one (copy j's new names differ from copy i's).
_SYLLABLES = ("an", "ber", "cor", "dal", "en", "fir", "gan", "hel", "is", "jor", "kel", "lin", "mor", "nus",
              "or", "par", "quin", "ros", "sel", "tor", "ul", "var", "wen", "xan", "yr", "zel")
_CAPITALISED = re.compile(r"\b[A-Z][a-z]{2,}\b")
_LOWER = re.compile(r"\b[a-z]{3,}\b")
# Capitalised but not names: permuting them would make dates of names.
_NOT_NAMES = frozenset("January February March April May June July August September October November December "
                       "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split())

# What the corpus's tables hold: every relation of the schema, with its TOAST and indexes.
SIZES = """
SELECT c.relname, pg_total_relation_size(c.oid), pg_table_size(c.oid), pg_indexes_size(c.oid)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'pgrag' AND c.relkind = 'r' AND c.relname <> 'alembic_version'
ORDER BY c.relname
"""
HNSW = """
SELECT coalesce(sum(pg_relation_size(i.oid)), 0)
FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_am a ON a.oid = i.relam
JOIN pg_namespace n ON n.oid = i.relnamespace
WHERE n.nspname = 'pgrag' AND a.amname = 'hnsw'
"""


def name_words(docs: Sequence[dict[str, Any]]) -> list[str]:
    """Capitalised words of the corpus that never occur in lower case: names."""
    text = " ".join(f"{d.get('title', '')} {d.get('text', '')}" for d in docs)
    lower = {w for w in _LOWER.findall(text)}
    return sorted({w for w in _CAPITALISED.findall(text) if w.lower() not in lower and w not in _NOT_NAMES})


def scaled_copy(docs: Sequence[dict[str, Any]], copy: int, names: Sequence[str],
                new_share: float = NEW_NAME_SHARE) -> list[dict[str, Any]]:
    """Copy ``copy`` of ``docs`` (0: the documents themselves) with its names
    permuted, ``new_share`` of them new; ids ``<copy>/<title>``."""
    if copy == 0:
        return [dict(d) for d in docs]
    rng = random.Random(copy)
    shuffled = list(names)
    rng.shuffle(shuffled)
    mapping = dict(zip(names, shuffled))
    for word in rng.sample(list(names), int(new_share * len(names))):
        mapping[word] += _SYLLABLES[copy % len(_SYLLABLES)] + _SYLLABLES[(copy // len(_SYLLABLES)) % len(_SYLLABLES)]

    def swap(text: str) -> str:
        return _CAPITALISED.sub(lambda m: mapping.get(m.group(0), m.group(0)), text)

    out = []
    for d in docs:
        title = swap(d.get("title", ""))
        out.append({"id": f"{copy}/{d.get('id', d.get('title', ''))}", "title": title, "text": swap(d.get("text", ""))})
    return out


def _ms(f: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = f()
    return (time.perf_counter() - t0) * 1000, out


def _spread(values: Sequence[float]) -> dict[str, float]:
    return {"p50": round(percentile(values, 50), 2), "p95": round(percentile(values, 95), 2)}


def table_sizes(dsn: str) -> dict[str, Any]:
    """Bytes per table (heap + TOAST, indexes) after VACUUM ANALYZE, HNSW apart, and row counts."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        tables = {name: {"total": total, "table": table, "indexes": indexes}
                  for name, total, table, indexes in conn.execute(SIZES)}
        hnsw = int(_one(conn, HNSW))
        rows = {t: _one(conn, sql.SQL("SELECT count(*) FROM pgrag.{}").format(sql.Identifier(t)))
                for t in ("document", "chunk", "token", "chunk_token", "token_edge", "chunk_entity",
                          "semantic_node")}
    total = sum(t["total"] for t in tables.values())
    return {"total_bytes": total, "hnsw_bytes": hnsw, "tables": tables, "rows": rows}


def _one(conn: Any, statement: Any) -> Any:
    row = conn.execute(statement).fetchone()
    assert row is not None   # an aggregate always returns a row
    return row[0]


def graph_cache(db: Any, corpus_id: int) -> dict[str, Any]:
    """The ranking index's costs: a full read from the database, writing the
    shared files, mapping them, and the bytes of each part."""
    from ..index import cache, shared_files

    cache.clear_cache()
    read_ms, (graph, index) = _ms(lambda: cache.from_database(db, corpus_id, 5))
    write_ms, folder = _ms(lambda: shared_files.save(db, corpus_id, graph.version, cache.shared_arrays(graph, index)))
    map_ms, mapped = _ms(lambda: shared_files.load(db, corpus_id, graph.version))
    w = graph.weights
    graph_bytes = int(sum(a.nbytes for a in (w.data, w.indices, w.indptr, graph.token_ids, graph.degree,
                                             graph.terms.by_node, graph.index.sorted_terms, graph.index.order)))
    return {"nodes": graph.nodes, "edges": graph.edges, "postings": int(index.entries),
            "read_from_database_ms": round(read_ms, 1), "write_files_ms": round(write_ms, 1),
            "map_files_ms": round(map_ms, 1), "shared": folder is not None and mapped is not None,
            "graph_bytes": graph_bytes, "postings_bytes": index.nbytes - index.vectors.nbytes,
            "vectors_bytes": index.vectors.nbytes}


def ppr_times(ctx: Any, questions: Sequence[str], gamma: int = 20) -> dict[str, Any]:
    """PPR alone on each question's seeds: push (TIGRAG's default) and the exact
    power iteration. How close push comes, three ways: how often the top-γ tokens
    are the same set; the mean share of the exact top-γ that push's holds; and,
    what the rerank sees, the mean share of TIGRAG's exact ρ pool (and of its top
    10 by ρ) that the pool from push's top-γ holds (default settings)."""
    from ..index.cache import ranking_index
    from ..index.pagerank import personalized_pagerank, push_pagerank
    from ..methods.tigrag import TigragSettings

    settings = TigragSettings()
    graph, index, _ = ranking_index(ctx.db, ctx.id)
    push, power, same, shared, pooled, top10 = [], [], 0, [], [], []
    for q in questions:
        seeds = graph.index.seeds(ctx.tokenize(q))
        # each lambda is called at once, within its iteration (B023 does not apply)
        ms_push, a = _ms(lambda: push_pagerank(graph, seeds, damping=0.5, tolerance=1e-4))  # noqa: B023
        ms_power, b = _ms(lambda: personalized_pagerank(graph, seeds, damping=0.5, tolerance=1e-4))  # noqa: B023
        push.append(ms_push)
        power.append(ms_power)
        (nodes_a, pool_a), (nodes_b, pool_b) = (_pool(index, s.scores, seeds, gamma, settings) for s in (a, b))
        same += nodes_a == nodes_b
        shared.append(_share(nodes_a, nodes_b))
        pooled.append(_share(pool_a, pool_b))
        top10.append(_share(pool_a[:10], pool_b[:10]))
    n = max(len(questions), 1)
    return {"push_ms": _spread(push), "power_ms": _spread(power),
            "top_gamma_agree": round(same / n, 3), "top_gamma_shared": round(sum(shared) / n, 3),
            "pool_shared": round(sum(pooled) / n, 3), "pool_top10_shared": round(sum(top10) / n, 3)}


def _share(approximate: Collection[int], exact: Collection[int]) -> float:
    """The share of ``exact`` that ``approximate`` holds (1 when both are empty)."""
    return len(set(approximate) & set(exact)) / len(exact) if exact else float(not approximate)


def _pool(index: Any, scores: Any, seeds: list[int], gamma: int, settings: Any) -> tuple[set[int], list[int]]:
    """The top-γ nodes of ``scores`` and the chunk ids of TIGRAG's pool they give, highest ρ first."""
    from ..methods.tigrag import expansion

    nodes, weights = expansion(scores, gamma)
    rows = index.pool(nodes, weights, seeds, threshold=settings.threshold, max_pool=settings.max_pool)
    return set(nodes.tolist()), [chunk_id for chunk_id, _, _ in rows]


SQL_FUNCTIONS = ("bm25", "dense", "hybrid", "tigrag")


def sql_function_times(db: Any, kb: Any, questions: Sequence[str], k: int = 10) -> dict[str, Any]:
    """p50/p95 of each plain SQL function on the questions (named queries of
    sql/queries_*.sql; hybrid with the method's depth and RRF constant). The
    first question's call of each is not counted (it warms the caches)."""
    from ..methods.hybrid import DEPTH, RRF_K

    vectors = kb.context(False).encode(list(questions))
    out: dict[str, Any] = {}
    for name in SQL_FUNCTIONS:
        times = []
        for i, (q, v) in enumerate(zip(questions, vectors)):
            params = {"corpus": kb.name, "query": q, "embedding": v, "k": k, "depth": DEPTH, "rrf_k": RRF_K}
            ms, _ = _ms(lambda: db.fetchall(name, params))  # noqa: B023 (called at once)
            if i or len(questions) == 1:
                times.append(ms)
        out[name] = _spread(times)
    return out


def first_query_after(kb: Any, question: str, change: Callable[[], Any], steady_p50: float) -> dict[str, Any]:
    """The first multi-hop TIGRAG query after ``change`` (an ingest or delete),
    against the steady p50, and where its graph came from ("fold" when that
    query folded the overlay into a new base: pgrag.index.delta)."""
    change()
    ms, hits = _ms(lambda: kb.retrieve(question, method="tigrag", k=10))
    step: dict[str, Any] = next((s for s in hits.trace.steps if s["step"] == "graph"), {})
    return {"first_query_ms": round(ms, 1), "to_steady_p50": round(ms / steady_p50, 2) if steady_p50 else None,
            "graph_stage_ms": round(hits.trace.timings_ms.get("graph", 0.0), 1), "source": step.get("source")}


CHILD = """
import json, sys, time
import pgrag
from pgrag.index.cache import ranking_index
db = pgrag.connect(sys.argv[1], migrate=False)
kb = db.corpus(sys.argv[2], create=False)
# what a dense query by HNSW in SQL loads (the model, a connection, the method
# registry, the hits path), without the ranking index, which every method now reads
from pgrag import methods
methods.registry()
ctx = kb.context(False)
ctx.hits_from_rows(db.fetchall("dense_hits", {"corpus": kb.name, "embedding": ctx.encode(["warm up"])[0], "k": 1}))
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
before = status("RssAnon")
t0 = time.perf_counter()
index = ranking_index(db, kb.id)
ms = (time.perf_counter() - t0) * 1000
kb.retrieve(sys.argv[3], method="tigrag", k=10)
print(json.dumps({"source": index.source, "load_ms": ms, "anon_growth_bytes": status("RssAnon") - before,
                  "rss_bytes": status("VmRSS")}))
"""


def second_process(dsn: str, corpus: str, question: str) -> dict[str, Any]:
    """A fresh process that maps the shared files and runs one TIGRAG query: what
    it adds to the machine (its anonymous memory; the mapped pages are the page
    cache's one copy)."""
    done = subprocess.run([sys.executable, "-c", CHILD, dsn, corpus, question],
                          capture_output=True, text=True, env=config.process_environment())
    if done.returncode != 0:
        # One probe failing must not throw away a run that took an hour to grow: say why in the report.
        return {"error": (done.stderr.strip().splitlines() or ["exit status %d" % done.returncode])[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _ingest(kb: Any, docs: list[dict[str, Any]], progress: bool) -> dict[str, Any]:
    report = kb.ingest(docs, progress=progress)
    return {k: (round(v, 2) if isinstance(v, float) else v) for k, v in vars(report).items()
            if k in ("added", "chunks", "entities", "nodes", "total_seconds", "embedding_seconds", "nlp_seconds",
                     "other_seconds", "node_embedding_seconds")}


def measure(db: Any, kb: Any, questions: Sequence[str], method_names: Sequence[str], *, via: str,
            progress: bool) -> dict[str, Any]:
    """Everything measured at one size (see the module's docstring)."""
    from .timing.latency import time_methods
    from .timing.load import rss_mb

    stats = next(c for c in db.corpora() if c["name"] == kb.name)
    point: dict[str, Any] = {"documents": stats["documents"], "chunks": stats["chunks"],
                             "sizes": table_sizes(db.dsn), "graph_cache": graph_cache(db, kb.id)}
    point["rss_mb_after_read"] = round(rss_mb(), 1)
    point["second_process"] = second_process(db.dsn, kb.name, questions[0])
    point["ppr"] = ppr_times(kb.context(False), questions)
    point["latency"] = time_methods(db, kb, questions, method_names, via=via, warmup=3, progress=progress)
    point["sql_functions_ms"] = sql_function_times(db, kb, questions)
    point["rss_mb_after_queries"] = round(rss_mb(), 1)
    return point


CHANGE_REPEATS = 3


def after_changes(kb: Any, extras: Sequence[list[dict[str, Any]]], question: str,
                  steady_p50: float) -> dict[str, Any]:
    """The first query after ingesting each of ``extras`` and after deleting it
    again, one change at a time: the run with the median first query of each
    kind, and every run (one query after a change is a sample of one)."""
    runs = []
    for extra in extras:
        # first_query_after calls each change at once, within this iteration (B023 does not apply)
        added = first_query_after(kb, question, lambda: _ingest(kb, extra, False), steady_p50)  # noqa: B023
        deleted = first_query_after(kb, question, lambda: kb.delete([d["id"] for d in extra]),  # noqa: B023
                                    steady_p50)
        runs.append({"after_ingest": added, "after_delete": deleted})

    def median(kind: str) -> dict[str, Any]:
        ordered = sorted((r[kind] for r in runs), key=lambda m: m["first_query_ms"])
        return ordered[(len(ordered) - 1) // 2]

    return {"documents": len(extras[0]) if extras else 0, "repeats": len(runs),
            "after_ingest": median("after_ingest"), "after_delete": median("after_delete"), "runs": runs}


def scale_benchmark(admin_dsn: str, corpus_file: Path, questions_file: Path, factors: Sequence[int], *,
                    embeddings: str = "model", method_names: Sequence[str] = DEFAULT_METHODS,
                    limit: int | None = 30, database: str = "pgrag_scale", replace: bool = False,
                    resume: bool = False, via: str = "both", progress: bool = True,
                    on_point: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Grow one corpus through ``factors`` (ascending, from 1) in database
    ``database`` of the server at ``admin_dsn`` and measure each size; see the
    module's docstring. ``on_point`` gets the report after every size (so a run
    stopped at 30x still leaves 1x and 10x). ``resume`` keeps an existing
    ``database`` built by an earlier run and grows its corpus from the size it
    has (sizes below it are skipped; the ingest of the copies already there is
    not in this run's figures)."""
    from ..sources import load_path
    from .evaluate import load_questions

    if not factors or list(factors) != sorted(set(factors)) or factors[0] < 1:
        raise PgragError("factors must be distinct, ascending and at least 1, e.g. 1,10")
    if embeddings not in ("model", "random"):
        raise PgragError("embeddings must be 'model' or 'random'")
    base = [{"id": d.external_id, "title": d.title, "text": d.body} for d in load_path(Path(corpus_file))]
    questions = [q.question for q in load_questions(questions_file)[:limit]]
    if not questions:
        raise PgragError(f"{questions_file}: no questions")
    dsn = _database(admin_dsn, database, replace, resume)
    # This run's shared files only, so that the second process maps what this one wrote.
    graph_dir = tempfile.mkdtemp(prefix="pgrag-scale-graphs-")
    try:
        with config.environment(config.process_environment(PGRAG_GRAPH_DIR=graph_dir)):
            return _grow(dsn, base, questions, factors, embeddings, method_names, via, progress, on_point,
                         {"corpus_file": str(corpus_file)})
    finally:
        shutil.rmtree(graph_dir, ignore_errors=True)


def _grow(dsn: str, base: list[dict[str, Any]], questions: list[str], factors: Sequence[int], embeddings: str,
          method_names: Sequence[str], via: str, progress: bool,
          on_point: Callable[[dict[str, Any]], None] | None, facts: dict[str, Any]) -> dict[str, Any]:
    from ..config import DEFAULT_EMBEDDING_MODEL
    from ..database import open_database

    db = open_database(dsn)
    model = "random-384" if embeddings == "random" else DEFAULT_EMBEDDING_MODEL
    kb = db.corpus("scale", embedding_model=model, methods=method_names)   # the families they need
    names = name_words(base)
    report: dict[str, Any] = {
        **facts, "questions": len(questions), "embeddings": embeddings,
        "embedding_model": model, "name_words": len(names), "new_name_share": NEW_NAME_SHARE,
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]}, "points": []}
    if embeddings == "random":
        report["random_embeddings_note"] = ("vectors are seeded random: dense, hybrid and every rerank rank "
                                            "noise, so their latencies are the worst case for HNSW and no "
                                            "recall is reported")
    stats = next((c for c in db.corpora() if c["name"] == kb.name), {"documents": 0})
    copies, rest = divmod(stats["documents"], len(base))
    if rest:
        raise PgragError(f"corpus 'scale' of {dsn.rsplit('/', 1)[-1]} holds {stats['documents']} documents, "
                         f"not a whole number of copies of {len(base)}: build it again with --replace")
    report["resumed_at"] = copies or None
    for factor in (f for f in factors if f >= copies):
        ingest: dict[str, Any] = {"added": 0, "seconds": {}}
        for copy in tqdm(range(copies, factor), desc=f"ingest to {factor}x", unit="copy", disable=not progress):
            r = _ingest(kb, scaled_copy(base, copy, names), False)
            ingest["added"] += r["added"]
            for key, value in r.items():
                if key.endswith("_seconds"):
                    ingest["seconds"][key] = round(ingest["seconds"].get(key, 0.0) + value, 2)
        copies = factor
        point = {"factor": factor, "ingest": ingest, **measure(db, kb, questions, method_names, via=via,
                                                               progress=progress)}
        steady = point["latency"]["methods"].get("tigrag", {}).get("latency_ms_p50", 0.0)
        extras = [scaled_copy(base[:10], factor + 1000 + 100 * i, names) for i in range(CHANGE_REPEATS)]
        point["changes"] = after_changes(kb, extras, questions[0], steady)
        report["points"].append(point)
        _ratios(report)
        if on_point is not None:
            on_point(report)
    db.close()
    return report


def _ratios(report: dict[str, Any]) -> None:
    """The largest size's figures over the first's: what the issue's targets read."""
    first, last = report["points"][0], report["points"][-1]
    report["largest_over_first"] = {
        "factor": last["factor"] / first["factor"],
        "ppr_push_p50": round(last["ppr"]["push_ms"]["p50"] / max(first["ppr"]["push_ms"]["p50"], 1e-9), 2),
        "ppr_power_p50": round(last["ppr"]["power_ms"]["p50"] / max(first["ppr"]["power_ms"]["p50"], 1e-9), 2),
        "graph_read": round(last["graph_cache"]["read_from_database_ms"]
                            / max(first["graph_cache"]["read_from_database_ms"], 1e-9), 2),
        "total_bytes": round(last["sizes"]["total_bytes"] / first["sizes"]["total_bytes"], 2),
        "methods_p50": {m: round(v["latency_ms_p50"] / max(first["latency"]["methods"][m]["latency_ms_p50"], 1e-9), 2)
                        for m, v in last["latency"]["methods"].items() if m in first["latency"]["methods"]},
    }


def database_dsn(dsn: str, name: str) -> str:
    """``dsn`` with its database name replaced by ``name`` (its parameters kept)."""
    base, _, params = dsn.partition("?")
    return base.rsplit("/", 1)[0] + "/" + name + ("?" + params if params else "")


def print_report(report: dict[str, Any], out: Path | None) -> None:
    """A measurement script's JSON report, printed and, with ``out``, written there."""
    text = json.dumps(report, indent=2)
    print(text)
    if out:
        out.write_text(text + "\n", encoding="utf-8")


def _database(admin_dsn: str, name: str, replace: bool, resume: bool) -> str:
    import psycopg
    from psycopg import sql

    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if exists and not (replace or resume):
            raise PgragError(f"database {name!r} exists; pass --replace to drop it, --resume to grow it, "
                             "or --database another name")
        if not (exists and resume):
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return database_dsn(admin_dsn, name)
