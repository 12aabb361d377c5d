"""Index size and query latency at fractions of a corpus, and a fit that
extrapolates them to 100x more documents (docs/SCALING.md).

    PGRAG_DATA_DIR=/path/to/pgdata python scripts/scale.py \\
        --corpus-file ../shared/bench/2wiki/corpus.json \\
        --questions ../shared/bench/2wiki/questions.jsonl \\
        --fractions 0.25,0.5,1 --out docs/benchmarks/scale.json

Each fraction (the first N% of the documents, in file order) is indexed into its
own database on the embedded server (``pgrag_scale_<percent>``), so that every
table and index size there belongs to that one corpus. The first size is built
from scratch; each next one starts from a copy of the previous database and
ingests only the added documents, as a live corpus grows (so its HNSW index
grew by inserts after the first bulk build). Databases are reused: a re-run
skips the ingest and only re-measures. Sizes are taken after VACUUM ANALYZE (not
FULL: space left by updates of df and edge weights is counted, as in a live
database). Latency is ``pgrag bench queries`` (pgrag.bench.query_benchmark) on
the same questions at every size.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402
from psycopg import sql  # noqa: E402

SIZES = """
SELECT c.relname, c.relkind::text, pg_total_relation_size(c.oid), pg_table_size(c.oid),
       pg_indexes_size(c.oid)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'pgrag' AND c.relkind = 'r' AND c.relname <> 'alembic_version'
ORDER BY c.relname
"""
HNSW = """
SELECT i.relname, pg_relation_size(i.oid)
FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_am a ON a.oid = i.relam
JOIN pg_namespace n ON n.oid = i.relnamespace
WHERE n.nspname = 'pgrag' AND a.amname = 'hnsw'
"""
ROWS = ("document", "chunk", "token", "chunk_token", "token_edge", "chunk_entity")


def database_uri(admin_uri: str, name: str) -> str:
    base, _, params = admin_uri.partition("?")
    return base.rsplit("/", 1)[0] + "/" + name + ("?" + params if params else "")


def ensure_database(admin_uri: str, name: str) -> str:
    with psycopg.connect(admin_uri, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return database_uri(admin_uri, name)


def database_exists(admin_uri: str, name: str) -> bool:
    with psycopg.connect(admin_uri, autocommit=True) as conn:
        return conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is not None


def grow_from(admin_uri: str, previous: tuple[str, Path], name: str, subset: Path) -> None:
    """Start the next size from a copy of the previous one, renamed to the corpus
    name of the larger subset: only the added documents are then ingested (the
    rest are skipped by content hash), as when a live corpus grows. Costs half
    the ingest time of building every size from scratch on a shared 2-core box."""
    from pgrag.bench.evaluate import corpus_name_for

    old_db, old_file = previous
    with psycopg.connect(admin_uri, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(old_db)))
    with psycopg.connect(database_uri(admin_uri, name), autocommit=True) as conn:
        conn.execute("UPDATE pgrag.corpus SET name = %s WHERE name = %s",
                     (corpus_name_for(subset), corpus_name_for(old_file)))


def sizes(uri: str) -> dict:
    """Bytes per table (heap + TOAST, and its indexes), HNSW separately, and row counts."""
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")  # settle the visibility map and statistics first
        tables = {name: {"total": total, "table": table, "indexes": indexes}
                  for name, _kind, total, table, indexes in conn.execute(SIZES)}
        hnsw = dict(conn.execute(HNSW).fetchall())
        rows = {t: conn.execute(sql.SQL("SELECT count(*) FROM pgrag.{}").format(sql.Identifier(t))).fetchone()[0]
                for t in ROWS}
    total = sum(t["total"] for t in tables.values())
    return {"total_bytes": total, "hnsw_bytes": sum(hnsw.values()),
            "btree_and_table_bytes": total - sum(hnsw.values()), "tables": tables, "hnsw": hnsw, "rows": rows}


def fit(xs: list[float], ys: list[float]) -> dict:
    """Least-squares power law y = a * x^b on log-log axes."""
    lx, ly = [math.log(x) for x in xs], [math.log(max(y, 1e-9)) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    b = sum((u - mx) * (v - my) for u, v in zip(lx, ly)) / sum((u - mx) ** 2 for u in lx)
    a = math.exp(my - b * mx)
    return {"a": a, "exponent": round(b, 3)}


def non_embed_ms(point: dict, method: str) -> float:
    """Mean time of every stage except the (corpus-independent) query embedding."""
    stages = point["latency"]["methods"][method]["stage_ms_mean"]
    return round(sum(ms for stage, ms in stages.items() if stage != "embed"), 2)


def extrapolate(points: list[dict], factor: float) -> dict:
    """Fit each measured quantity against document count; predict at ``factor`` x the largest."""
    docs = [p["documents"] for p in points]
    target = docs[-1] * factor
    series = {"total_bytes": [p["sizes"]["total_bytes"] for p in points],
              "hnsw_bytes": [p["sizes"]["hnsw_bytes"] for p in points],
              "btree_and_table_bytes": [p["sizes"]["btree_and_table_bytes"] for p in points],
              "token_edge_rows": [p["sizes"]["rows"]["token_edge"] for p in points],
              "token_rows": [p["sizes"]["rows"]["token"] for p in points]}
    for method in points[0]["latency"]["methods"]:
        series[f"{method}_p50_ms"] = [p["latency"]["methods"][method]["latency_ms_p50"] for p in points]
        series[f"{method}_p95_ms"] = [p["latency"]["methods"][method]["latency_ms_p95"] for p in points]
        # Query embedding does not depend on corpus size; what grows is the rest.
        series[f"{method}_non_embed_ms_mean"] = [non_embed_ms(p, method) for p in points]
    out = {"documents": int(target), "factor": factor}
    for key, ys in series.items():
        f = fit(docs, ys)
        out[key] = {"exponent": f["exponent"], "predicted": round(f["a"] * target ** f["exponent"], 2),
                    "measured_at_largest": ys[-1]}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus-file", type=Path, required=True)
    parser.add_argument("--questions", type=Path, required=True)
    parser.add_argument("--fractions", default="0.25,0.5,1")
    parser.add_argument("--methods", default="dense,bm25,hybrid,tigrag")
    parser.add_argument("--limit", type=int, default=None, help="only the first N questions")
    parser.add_argument("--drop", default="", help="comma-separated databases to drop first")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks" / "scale.json")
    args = parser.parse_args()

    import pgrag
    from pgrag import server
    from pgrag.bench.timing import query_benchmark
    from pgrag.database import open_database
    from pgrag.sources import load_path

    admin = server.start(pgrag.Settings.from_env().data_dir)
    if args.drop:
        for name in args.drop.split(","):
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
    docs = json.loads(args.corpus_file.read_text(encoding="utf-8"))
    methods = args.methods.split(",")
    workdir = Path(tempfile.mkdtemp(prefix="pgrag-scale-"))
    points = []
    previous: tuple[str, Path] | None = None
    for fraction in (float(f) for f in args.fractions.split(",")):
        pct = round(fraction * 100)
        subset = workdir / f"corpus-{pct}.json"
        subset.write_text(json.dumps(docs[: round(len(docs) * fraction)], ensure_ascii=False), encoding="utf-8")
        load_path(subset)  # validate before creating anything
        name = f"pgrag_scale_{pct}"
        if previous and not database_exists(admin, name):
            grow_from(admin, previous, name, subset)
        db = open_database(ensure_database(admin, name))
        print(f"== {pct}%: ingest + latency", flush=True)
        latency = query_benchmark(db, subset, args.questions, methods, limit=args.limit)
        db.close()
        point = {"percent": pct, "documents": latency["documents"], "chunks": latency["chunks"],
                 "sizes": sizes(database_uri(admin, f"pgrag_scale_{pct}")), "latency": latency}
        points.append(point)
        previous = (name, subset)
        print(json.dumps({k: point[k] for k in ("percent", "documents", "chunks")}
                         | {"total_mb": round(point["sizes"]["total_bytes"] / 2**20, 1)}), flush=True)
    result = {"corpus_file": str(args.corpus_file), "questions": str(args.questions), "points": points,
              "extrapolation_100x": extrapolate(points, 100.0) if len(points) >= 2 else None}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result["extrapolation_100x"], indent=2))


if __name__ == "__main__":
    main()
