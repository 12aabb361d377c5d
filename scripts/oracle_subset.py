"""Write a subset of the 2Wiki corpus for a quicker oracle run: the gold passages
of every question (or of the first --questions) plus others drawn at random
(seeded), up to --docs passages.

    python scripts/oracle_subset.py --docs 1000 --out /tmp/oracle-corpus.json
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from common import BENCH


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=1000, help="passages in the subset (gold ones included)")
    parser.add_argument("--questions", type=int, default=None, help="only the first N questions' gold passages")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    questions = [json.loads(line) for line in (BENCH / "questions.jsonl").read_text().splitlines() if line.strip()]
    questions = questions[:args.questions] if args.questions else questions
    corpus = json.loads((BENCH / "corpus.json").read_text(encoding="utf-8"))
    gold = {t for q in questions for t in q["supporting_titles"]}
    rest = [d for d in corpus if d["title"] not in gold]
    subset = [d for d in corpus if d["title"] in gold] + random.Random(args.seed).sample(rest, args.docs - len(gold))
    args.out.write_text(json.dumps(subset), encoding="utf-8")
    print(f"{len(subset)} passages ({len(gold)} gold) written to {args.out}")


if __name__ == "__main__":
    main()
