"""ThreadRAG's node query three ways: its rare terms taken in SQL (a token-index
probe per term, as before 8c89fcb); each node's terms tokenized at query time
(pgrag.tokenize, as before migration 0011); and as it is now (the terms stored
with the node). The last two keep the rare ones by the ranking index's document
frequencies in Python. All three must give the same terms; their medians are
printed.

    python scripts/rare_terms_probe.py --corpus-file ../shared/bench/2wiki/corpus.json

The corpus is the one `pgrag eval` / `pgrag bench queries` index for the file
(run one of them first, with threadrag among --methods), its node terms stored
(`pgrag threadrag-index` fills those of nodes written before migration 0011).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

import pgrag
from pgrag.bench.evaluate import corpus_name_for
from pgrag.methods import threadrag
from pgrag.postings import ranking_index
from pgrag.queries import query

# The terms column of threadrag_nodes before 8c89fcb: the oracle and the first timing.
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
    stored = "coalesce(n.terms, pgrag.tokenize(n.text)) AS terms"
    assert stored in now, "threadrag_nodes no longer returns the stored terms"
    before = now.replace(stored, IN_SQL)
    tokenized = now.replace(stored, "pgrag.tokenize(n.text) AS terms")
    settings = threadrag.ThreadragSettings()
    index = ranking_index(db, kb.id)
    with db.transaction() as conn:
        documents = [r[0] for r in conn.execute(
            "SELECT DISTINCT document_id FROM pgrag.semantic_node WHERE corpus_id = %s ORDER BY 1", (kb.id,))]
    rng = random.Random(1)
    with db.transaction() as conn:
        missing = conn.execute("SELECT count(*) FROM pgrag.semantic_node WHERE corpus_id = %s AND terms IS NULL",
                               (kb.id,)).fetchone()[0]
    if missing:
        raise SystemExit(f"{missing} nodes have no stored terms: run `pgrag threadrag-index --corpus {kb.name}`")
    times: dict[str, list[float]] = {"probe_per_term_ms": [], "tokenized_ms": [], "stored_ms": []}
    same = 0
    with db.transaction() as conn:
        for _ in range(args.calls):
            params = {"corpus_id": kb.id, "document_ids": rng.sample(documents, args.documents),
                      "labels": list(settings.entity_labels), "max_df": settings.rare_df}
            terms = []
            for name, text in (("probe_per_term_ms", before), ("tokenized_ms", tokenized), ("stored_ms", now)):
                t0 = time.perf_counter()
                rows = conn.execute(text, params).fetchall()
                kept = ([set(r[9]) for r in rows] if text is before
                        else threadrag.rare_terms(index, [r[9] for r in rows], settings.rare_df))
                times[name].append((time.perf_counter() - t0) * 1000)
                terms.append(kept)
            same += terms[0] == terms[1] == terms[2]
    print(json.dumps({"calls": args.calls, "documents_per_call": args.documents, "same_terms": same,
                      **{k: round(statistics.median(v), 2) for k, v in times.items()}}, indent=1))


if __name__ == "__main__":
    main()
