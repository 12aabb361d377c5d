"""Exact nearest chunks from the cached vectors (Postings.nearest) against
pgrag.dense's HNSW (the dense_many statement), for 8 query vectors at k = 50,
the shape of one ThreadRAG retrieval.

    python scripts/nearest_vs_hnsw.py --dsn postgresql://... --database pgrag_scale_c --corpus scale
    python scripts/nearest_vs_hnsw.py --dsn postgresql://... --database postgres --corpus eval-...

Each query vector is a corpus chunk's vector plus noise; the medians of
--repeats draws are printed.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import pgrag
from pgrag.bench import scale
from pgrag.postings import ranking_index


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", required=True, help="any database of the server (its name is replaced)")
    parser.add_argument("--database", required=True)
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--vectors", type=int, default=8)
    parser.add_argument("--k", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    db = pgrag.connect(scale.database_dsn(args.dsn, args.database), migrate=False)
    kb = db.corpus(args.corpus, create=False)
    index = ranking_index(db, kb.id).postings
    rng = np.random.default_rng(0)
    hnsw, exact = [], []
    for _ in range(args.repeats):
        picks = index.chunk_ids[rng.integers(0, len(index.chunk_ids), args.vectors)]
        vectors = list(index.vectors.rows(picks) + rng.normal(0, 0.05, (args.vectors, index.vectors.blocks[0][1].shape[1]))
                       .astype(np.float32))
        t0 = time.perf_counter()
        db.fetchall("dense_many", {"corpus": kb.name, "embeddings": vectors, "k": args.k})
        hnsw.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        index.nearest(vectors, args.k)
        exact.append((time.perf_counter() - t0) * 1000)
    print(f"{args.database}/{args.corpus}: {index.vectors.count} chunks, {args.vectors} vectors, k = {args.k}: "
          f"HNSW {statistics.median(hnsw):.1f} ms, exact {statistics.median(exact):.1f} ms (medians)")
    db.close()


if __name__ == "__main__":
    main()
