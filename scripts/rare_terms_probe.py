"""ThreadRAG's node query with its rare terms taken in SQL (a token-index probe
per term, as before 8c89fcb) against the query as it is now (the node's
terms, kept by the ranking index's document frequencies in Python): both
must give the same terms; the medians of both are printed.

    python scripts/rare_terms_probe.py --corpus-file ../shared/bench/2wiki/corpus.json

The corpus is the one `pgrag eval` / `pgrag bench queries` index for the file
(run one of them first, with threadrag among --methods).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

import pgrag
from pgrag.evaluate import corpus_name_for
from pgrag.methods import threadrag
from pgrag.postings import ranking_index
from pgrag.queries import query

# The terms column of threadrag_nodes before: the oracle and the "before" timing.
IN_SQL = """ARRAY(SELECT DISTINCT t.term FROM pgrag.token t
             WHERE t.corpus_id = %(corpus_id)s AND t.term = ANY (pgrag.tokenize(n.text))
               AND t.df <= %(max_df)s) AS terms"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus-file", type=Path, required=True)
    parser.add_argument("--calls", type=int, default=60, help="Random sets of documents asked.")
    parser.add_argument("--documents", type=int, default=12, help="Documents per call (ThreadRAG's first round).")
    parser.add_argument("--dsn", default=None)
    args = parser.parse_args()
    db = pgrag.connect(args.dsn)
    kb = db.corpus(corpus_name_for(args.corpus_file))
    now = query("threadrag_nodes")
    before = now.replace("pgrag.tokenize(n.text) AS terms", IN_SQL)
    assert before != now, "threadrag_nodes no longer returns pgrag.tokenize(n.text)"
    settings = threadrag.ThreadragSettings()
    index = ranking_index(db, kb.id)
    with db.transaction() as conn:
        documents = [r[0] for r in conn.execute(
            "SELECT DISTINCT document_id FROM pgrag.semantic_node WHERE corpus_id = %s ORDER BY 1", (kb.id,))]
    rng = random.Random(1)
    times: dict[str, list[float]] = {"before_ms": [], "now_ms": []}
    same = 0
    with db.transaction() as conn:
        for _ in range(args.calls):
            params = {"corpus_id": kb.id, "document_ids": rng.sample(documents, args.documents),
                      "labels": list(settings.entity_labels), "max_df": settings.rare_df}
            t0 = time.perf_counter()
            old = conn.execute(before, params).fetchall()
            t1 = time.perf_counter()
            rows = conn.execute(now, params).fetchall()
            new = threadrag.rare_terms(index, [r[9] for r in rows], settings.rare_df)
            t2 = time.perf_counter()
            times["before_ms"].append((t1 - t0) * 1000)
            times["now_ms"].append((t2 - t1) * 1000)
            same += len(old) == len(rows) and all(set(o[9]) == n for o, n in zip(old, new))
    print(json.dumps({"calls": args.calls, "documents_per_call": args.documents, "same_terms": same,
                      **{k: round(statistics.median(v), 2) for k, v in times.items()}}, indent=1))


if __name__ == "__main__":
    main()
