"""ThreadRAG with its names' stored vectors (pgrag.entity_vector) against the
same questions with every name encoded, as before migration 0010: the hits
must be the same.

    python scripts/name_vectors_check.py --corpus-file ../shared/bench/2wiki/corpus.json \\
        --questions ../shared/bench/2wiki/questions.jsonl

The corpus is the one `pgrag eval` / `pgrag bench queries` index for the file
(run one of them first, with threadrag among --methods). Encoding is forced by
telling the code the model is cased, which is when it never looks names up.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pgrag
from pgrag.bench.evaluate import corpus_name_for


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus-file", type=Path, required=True)
    parser.add_argument("--questions", type=Path, required=True)
    parser.add_argument("-k", type=int, default=10)
    parser.add_argument("--dsn", default=None)
    args = parser.parse_args()
    db = pgrag.connect(args.dsn)
    kb = db.corpus(corpus_name_for(args.corpus_file), create=False)
    questions = [json.loads(line)["question"] for line in args.questions.read_text().splitlines() if line.strip()]
    embedder = kb.embedder
    if not embedder.uncased:
        raise SystemExit(f"model {embedder.name!r} is cased: ThreadRAG stores no name vectors for it")
    same = stored = encoded = 0
    try:
        for question in questions:
            embedder.uncased = True
            looked_up = kb.retrieve(question, method="threadrag", k=args.k, llm=False)
            for step in looked_up.trace.steps:
                if step["step"] == "name_vectors":
                    stored, encoded = stored + step["stored"], encoded + step["encoded"]
            embedder.uncased = False
            plain = kb.retrieve(question, method="threadrag", k=args.k, llm=False)
            same += [h.provenance.chunk_id for h in looked_up] == [h.provenance.chunk_id for h in plain]
    finally:
        embedder.uncased = True
    print(json.dumps({"questions": len(questions), "same_hits": same, "names_stored": stored,
                      "names_encoded": encoded}))


if __name__ == "__main__":
    main()
