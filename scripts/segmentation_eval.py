"""Measure pgrag.segment against known boundaries: concatenations of 2Wiki
passages (the corpus has no paragraphs), where each passage boundary is a
reference cut. Prints precision/recall/F1 per threshold.

    PGRAG_DATA_DIR=... python scripts/segmentation_eval.py [corpus] [pairs]
"""

from __future__ import annotations

import random
import sys

import pgrag
from pgrag.segment import SegmentSettings, boundary_scores, cuts, segment

CORPUS = sys.argv[1] if len(sys.argv) > 1 else "eval-9d6e352952aafb18"
GROUPS = int(sys.argv[2]) if len(sys.argv) > 2 else 150

db = pgrag.connect()
kb = db.corpus(CORPUS, create=False)
with db.transaction() as conn:
    rows = conn.execute(
        "SELECT document_id, array_agg(text ORDER BY ordinal) FROM pgrag.sentence WHERE corpus_id = %s "
        "GROUP BY document_id HAVING count(*) >= 2 ORDER BY document_id", (kb.id,)).fetchall()
rng = random.Random(7)
rng.shuffle(rows)
groups = [rows[i * 3: i * 3 + 3] for i in range(GROUPS)]
texts = [s for g in groups for _, sents in g for s in sents]
vectors = kb.embedder.encode(texts)
docs, pos = [], 0
for g in groups:
    sents = [s for _, ss in g for s in ss]
    spans, offset = [], 0
    for s in sents:
        spans.append((offset, offset + len(s)))
        offset += len(s) + 1
    ref, n = set(), 0
    for _, ss in g[:-1]:
        n += len(ss)
        ref.add(n - 1)
    docs.append((spans, vectors[pos: pos + len(sents)], ref))
    pos += len(sents)
print(f"{len(docs)} documents of 3 concatenated passages, {sum(len(d[2]) for d in docs)} reference cuts")
for min_chars in (0, 100, 150):
    for threshold in (0.15, 0.2, 0.25, 0.3, 0.35):
        settings = SegmentSettings(threshold=threshold, min_chars=min_chars, max_chars=100_000)
        sc = boundary_scores([(cuts(segment(s, v, settings)), r) for s, v, r in docs])
        print(f"min_chars={min_chars:4d} threshold={threshold:.2f}  P={sc.precision:.3f} R={sc.recall:.3f} "
              f"F1={sc.f1:.3f}  (predicted {sc.predicted})")
