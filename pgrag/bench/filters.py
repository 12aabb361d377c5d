"""``pgrag bench filters``: metadata filters measured on the eval corpus (issue 47).

The corpus is the one ``pgrag eval`` builds from the same file (``eval-<hash>``,
pgrag.bench.evaluate.prepare_corpus: reused, not re-indexed). Its documents get
metadata by one deterministic rule, merged over what they hold
(``label_corpus``)::

    bucket = int(sha256(external_id as UTF-8).hexdigest()[:8], 16) % 100
    kind   = the title's first word, lowercased, letters and digits only
             ("untitled" when the title has none)

The rows change by one ``UPDATE`` of ``pgrag.document.metadata`` (the named
statement ``update_metadata`` that ingest uses for documents whose content is
unchanged): a metadata-only change re-indexes nothing, since the change check
compares content hashes of title and body (pgrag.ingest.changes). The ingest of
``prepare_corpus`` resets metadata to the file's, so each run labels again.

The filter is ``{"bucket": {"$lt": B}}`` (B = 10 keeps about 10 % of the
documents). The documents it keeps are computed twice: from the rule in Python
(the reference every hit is checked against) and by the server's
``filter_documents`` (they must agree). Then for each method that takes a filter,
over the questions at ``k`` hits:

- violations: hits whose document is outside the filter (must be 0);
- short: questions with fewer than ``k`` hits although at least ``k`` chunks lie
  in the filter's documents (0 for dense and tigrag; bm25 and hybrid return only
  chunks that share a term with the question);
- Recall@k restricted to the filter: only questions with at least one gold title
  inside it, against those gold titles; the same questions unfiltered, against the
  same restricted gold. Recall counts the distinct documents of the ``k`` hits
  (pgrag.bench.metrics.recall_at_k).

Finally dense is timed filtered and unfiltered on each question, taking turns
(the order alternates) after ``warmup`` untimed questions; the report gives each
p50 and their ratio (the target: within 3x).
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from psycopg.types.json import Jsonb

from .. import methods as method_registry
from ..exceptions import InputError
from ..filters import compile_filter
from ..progress import tqdm
from ..queries import query
from .metrics import distinct_documents, percentile, recall_at_k

if TYPE_CHECKING:
    from ..corpus import Corpus
    from ..database import Database
    from .evaluate import Question

FILTER_METHODS = ("dense", "bm25", "hybrid", "tigrag")
BUCKETS = 100
LATENCY_TARGET = 3.0
RULE = ("bucket = int(sha256(external_id).hexdigest()[:8], 16) % 100; "
        "kind = the title's first word, lowercased, letters and digits only")
_WORD = re.compile(r"[^\W_]+")


def bucket_of(external_id: str) -> int:
    """The document's bucket, 0..99, from a stable hash of its external id."""
    return int(hashlib.sha256(external_id.encode("utf-8")).hexdigest()[:8], 16) % BUCKETS


def kind_of(title: str) -> str:
    """A word derived from the title: its first word, lowercased."""
    word = _WORD.search(title)
    return word.group(0).lower() if word else "untitled"


def labels(external_id: str, title: str) -> dict[str, Any]:
    """The metadata the benchmark gives a document."""
    return {"bucket": bucket_of(external_id), "kind": kind_of(title)}


def bucket_filter(buckets: int) -> dict[str, Any]:
    """The filter that keeps the documents of the first ``buckets`` buckets."""
    return {"bucket": {"$lt": buckets}}


@dataclass(frozen=True, kw_only=True)
class Document:
    """A document as the benchmark sees it, with its labelled metadata."""

    document_id: int
    external_id: str
    title: str
    chunks: int
    metadata: dict[str, Any]


def label_corpus(db: "Database", kb: "Corpus") -> tuple[list[Document], int]:
    """Merge ``labels`` into every document's metadata; the documents as labelled
    and how many rows changed."""
    rows = db.fetchall("document_chunk_counts", {"corpus_id": kb.id})
    docs = [Document(document_id=int(r[0]), external_id=r[1], title=r[2], chunks=int(r[4]),
                     metadata={**(r[3] or {}), **labels(r[1], r[2])}) for r in rows]
    changed = [d for d, r in zip(docs, rows) if d.metadata != (r[3] or {})]
    if changed:
        with db.transaction() as conn:
            conn.execute(query("update_metadata"), {"corpus_id": kb.id, "ids": [d.external_id for d in changed],
                                                    "metadata": [Jsonb(d.metadata) for d in changed]})
    return docs, len(changed)


def filter_benchmark(db: "Database", kb: "Corpus", questions: Sequence["Question"], *, buckets: int = 10,
                     k: int = 5, method_names: Sequence[str] = FILTER_METHODS, warmup: int = 5,
                     progress: bool = False) -> dict[str, Any]:
    """Label ``kb``'s documents, then measure the bucket filter with each method
    on ``questions`` (the module's docstring says what and how)."""
    if not 1 <= buckets <= BUCKETS:
        raise InputError(f"buckets is 1 to {BUCKETS}, not {buckets}")
    if k < 1 or not questions:
        raise InputError("a filter benchmark needs k >= 1 and at least one question")
    for name in method_names:
        if not method_registry.get(name).filters:
            raise InputError(f"method {name!r} does not take a filter")
    docs, updated = label_corpus(db, kb)
    spec = bucket_filter(buckets)
    kept = {d.document_id for d in docs if d.metadata["bucket"] < buckets}
    checked = compile_filter(spec)
    assert checked is not None
    server = {int(r[0]) for r in db.fetchall("filter_documents", {"corpus_id": kb.id, "path": checked.path})}
    chunks_total = sum(d.chunks for d in docs)
    chunks_kept = sum(d.chunks for d in docs if d.document_id in kept)
    titles_in = {d.title for d in docs if d.document_id in kept}
    golds = {q.id: [t for t in q.supporting_titles if t in titles_in] for q in questions}
    scored = [q for q in questions if golds[q.id]]
    results = {name: _method(kb, name, questions, golds, spec, kept, k, chunks_kept, progress)
               for name in method_names}
    return {
        "corpus": kb.name, "documents": len(docs), "chunks": chunks_total,
        "labels": {"rule": RULE, "documents_updated": updated},
        "filter": spec, "documents_kept": len(kept), "share_kept": round(len(kept) / max(len(docs), 1), 4),
        "chunks_kept": chunks_kept, "chunk_share_kept": round(chunks_kept / max(chunks_total, 1), 4),
        "server_agrees": server == kept,
        "k": k, "questions": len(questions), "scored_questions": len(scored),
        "gold_titles_inside": sum(len(g) for g in golds.values()),
        "methods": results,
        "dense_latency": time_dense(kb, [q.question for q in questions], spec, k=k, warmup=warmup,
                                    progress=progress),
        "machine": {"python": platform.python_version(), "processor": platform.machine(), "cpus": os.cpu_count()},
    }


def _method(kb: "Corpus", name: str, questions: Sequence["Question"], golds: dict[str, list[str]],
            spec: dict[str, Any], kept: set[int], k: int, chunks_kept: int, progress: bool) -> dict[str, Any]:
    """One method's violations, short results and restricted Recall@k, filtered and not."""
    violations = short = hits_total = 0
    filtered: list[float] = []
    unfiltered: list[float] = []
    for q in tqdm(questions, desc=f"filters {name}", unit="q", disable=not progress):
        hits = kb.retrieve(q.question, method=name, k=k, filter=spec)
        hits_total += len(hits)
        violations += sum(1 for h in hits if h.provenance.document_id not in kept)
        short += len(hits) < k <= chunks_kept
        gold = golds[q.id]
        if gold:
            filtered.append(recall_at_k(distinct_documents(h.title for h in hits), gold, k))
            plain = kb.retrieve(q.question, method=name, k=k)
            unfiltered.append(recall_at_k(distinct_documents(h.title for h in plain), gold, k))
    return {"violations": violations, "short": short, "hits": hits_total,
            f"recall@{k}_filtered": _mean_percent(filtered), f"recall@{k}_unfiltered": _mean_percent(unfiltered)}


def _mean_percent(values: list[float]) -> float | None:
    return round(100 * sum(values) / len(values), 2) if values else None


def time_dense(kb: "Corpus", questions: Sequence[str], spec: dict[str, Any], *, k: int = 5, warmup: int = 5,
               progress: bool = False) -> dict[str, Any]:
    """Dense with and without ``spec`` on each question, the two taking turns
    (which goes first alternates), after ``warmup`` untimed questions of each."""
    def once(question: str, filtered: bool) -> float:
        t0 = time.perf_counter()
        if filtered:
            kb.retrieve(question, method="dense", k=k, filter=spec)
        else:
            kb.retrieve(question, method="dense", k=k)
        return (time.perf_counter() - t0) * 1000

    for question in questions[:warmup]:
        once(question, True)
        once(question, False)
    times: dict[bool, list[float]] = {True: [], False: []}
    for i, question in enumerate(tqdm(questions, desc="filters dense timing", unit="q", disable=not progress)):
        for filtered in ((True, False) if i % 2 == 0 else (False, True)):
            times[filtered].append(once(question, filtered))
    p50 = {f: percentile(ts, 50) for f, ts in times.items()}
    ratio = p50[True] / p50[False] if p50[False] else None
    return {"warmup": warmup, "questions": len(questions), "filtered_ms_p50": round(p50[True], 3),
            "unfiltered_ms_p50": round(p50[False], 3), "ratio": None if ratio is None else round(ratio, 3),
            "target": LATENCY_TARGET, "within_target": ratio is not None and ratio <= LATENCY_TARGET}


def filters_benchmark(db: "Database", corpus_file: Path, questions_file: Path, *, buckets: int = 10, k: int = 5,
                      method_names: Sequence[str] = FILTER_METHODS, warmup: int = 5, limit: int | None = None,
                      progress: bool = True) -> dict[str, Any]:
    """``filter_benchmark`` on the eval corpus of ``corpus_file`` (built, or reused
    as ``pgrag eval`` left it) and the questions of ``questions_file``."""
    from .evaluate import load_questions, prepare_corpus

    kb, corpus = prepare_corpus(db, corpus_file, methods=list(method_names), progress=progress)
    questions = load_questions(questions_file)[:limit]
    result = filter_benchmark(db, kb, questions, buckets=buckets, k=k, method_names=method_names, warmup=warmup,
                              progress=progress)
    return {"corpus_file": str(corpus_file), "embedding_model": corpus.embedding_model, **result}


def table(result: dict[str, Any]) -> str:
    """The report as text: the filter's share, then one row a method, then dense's timing."""
    k = result["k"]
    lines = [f"corpus {result['corpus']}: filter {result['filter']} keeps {result['documents_kept']} of "
             f"{result['documents']} documents ({result['share_kept']:.1%}), {result['chunks_kept']} of "
             f"{result['chunks']} chunks; server agrees: {result['server_agrees']}",
             f"{result['questions']} questions, k={k}; Recall@{k} on the {result['scored_questions']} with a gold "
             f"title inside the filter, against those titles", "",
             f"| method | violations | short | R@{k} filtered | R@{k} unfiltered |", "|---|---|---|---|---|"]
    for name, m in result["methods"].items():
        lines.append(f"| {name} | {m['violations']} | {m['short']} | {_cell(m[f'recall@{k}_filtered'])} | "
                     f"{_cell(m[f'recall@{k}_unfiltered'])} |")
    t = result["dense_latency"]
    lines += ["", f"dense p50: filtered {t['filtered_ms_p50']} ms, unfiltered {t['unfiltered_ms_p50']} ms, "
              f"ratio {t['ratio']} (target <= {t['target']}x)"]
    return "\n".join(lines)


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"
