"""Side-by-side evaluation (``pgrag eval``): every method on one corpus, one
embedding model and one question set, with Recall@k, EM/F1, latency and tokens.

The corpus is stored under a name derived from its file's content hash, so a
second run over the same file reuses the index instead of re-embedding it.
``untitled`` stores it without its documents' titles (another corpus): the
methods see only the text, and recall still counts documents by title, looked up
by their ids. Most application corpora have no titles that name what a document
is about, as Wikipedia's do.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import methods as method_registry
from ..exceptions import InputError
from ..progress import tqdm
from ..queries import query
from ..sources import load_path
from .metrics import (
    bootstrap_interval,
    distinct_documents,
    exact_match,
    f1_score,
    grouped_intervals,
    percentile,
    recall_at_k,
    recall_by_type,
)

if TYPE_CHECKING:
    from ..corpus import Corpus
    from ..database import Database
    from ..llm import LLM
    from ..results import Hit

DEFAULT_KS = (2, 5)
INTERVAL_KS = (2, 5)        # the k whose Recall@k gets a 95 % bootstrap interval over questions


@dataclass(frozen=True, kw_only=True)
class Question:
    """One evaluation question (the format of ../shared/bench/2wiki/questions.jsonl)."""

    id: str
    question: str
    answer: str
    supporting_titles: tuple[str, ...]
    answer_aliases: tuple[str, ...] = ()
    type: str | None = None

    @property
    def answers(self) -> tuple[str, ...]:
        return (self.answer, *self.answer_aliases)


@dataclass(frozen=True, kw_only=True)
class EvalCorpus:
    """The corpus an evaluation ran on and what indexing it cost."""

    file: str
    name: str
    documents: int
    chunks: int
    index_seconds: float
    reused: bool
    embedding_model: str
    extract_seconds: dict[str, float] = field(default_factory=dict)   # per triple extractor
    untitled: bool = False      # stored without the documents' titles


@dataclass(kw_only=True)
class MethodResult:
    """Per-method aggregates; recall/EM/F1 in percent."""

    recall: dict[int, float]
    em: float | None
    f1: float | None
    latency_ms_p50: float
    latency_ms_p95: float
    llm_prompt_tokens: int
    llm_completion_tokens: int
    llm_calls: int = 0
    llm_replies: int = 0                # structured replies checked (pgrag.results.Trace)
    parse_failures: int = 0             # of those, the ones that did not parse into the prompt's shape
    constrained_calls: int = 0          # requests sent with their reply's schema (constrained decoding)
    outcomes: dict[str, dict[str, int]] = field(default_factory=dict)   # trace.outcome label counts
    rounds: float | None = None         # mean retrieval rounds per question (the LLM loops)
    resolved: float | None = None       # T2RAG: percent of questions whose placeholders were all resolved
    intervals: dict[int, tuple[float, float]] = field(default_factory=dict)   # k -> 95 % bootstrap interval
    # Where questions share gold passages: how many groups they form, and k -> the interval resampling groups.
    groups: int | None = None
    group_intervals: dict[int, tuple[float, float]] = field(default_factory=dict)
    by_type: dict[str, dict[str, Any]] = field(default_factory=dict)   # type -> questions, recall@k, interval@k


@dataclass(kw_only=True)
class Report:
    corpus: EvalCorpus
    questions: int
    ks: tuple[int, ...]
    depth: int
    methods: dict[str, MethodResult] = field(default_factory=dict)
    per_question: list[dict[str, Any]] = field(default_factory=list)
    reader: str | None = None           # "oracle" when the LLM was the oracle reader (pgrag.bench.oracle)

    def to_json(self) -> dict[str, Any]:
        """The report as JSON-ready data; the documented keys stay stable."""
        return {
            "corpus": asdict(self.corpus),
            "questions": self.questions,
            "ks": list(self.ks),
            "depth": self.depth,
            "methods": {name: _method_json(r) for name, r in self.methods.items()},
            "per_question": self.per_question,
            "reader": self.reader,
        }


def _method_json(r: MethodResult) -> dict[str, Any]:
    out: dict[str, Any] = {f"recall@{k}": round(v, 2) for k, v in r.recall.items()}
    out.update(
        em=None if r.em is None else round(r.em, 2),
        f1=None if r.f1 is None else round(r.f1, 2),
        latency_ms_p50=round(r.latency_ms_p50, 2),
        latency_ms_p95=round(r.latency_ms_p95, 2),
        llm_prompt_tokens=r.llm_prompt_tokens,
        llm_completion_tokens=r.llm_completion_tokens,
        llm_calls=r.llm_calls,
        llm_replies=r.llm_replies,
        parse_failures=r.parse_failures,
        constrained_calls=r.constrained_calls,
        outcomes=r.outcomes,
        rounds=None if r.rounds is None else round(r.rounds, 2),
        resolved=None if r.resolved is None else round(r.resolved, 2),
    )
    out.update({f"interval@{k}": [round(lo, 2), round(hi, 2)] for k, (lo, hi) in r.intervals.items()})
    if r.groups is not None:
        out["groups"] = r.groups
        out.update({f"group_interval@{k}": [round(lo, 2), round(hi, 2)] for k, (lo, hi) in r.group_intervals.items()})
    out["recall_by_type"] = {t: {key: _rounded(v) for key, v in values.items()} for t, values in r.by_type.items()}
    return out


def _rounded(value: Any) -> Any:
    """A count as it is, a recall to 2 places, an interval as a list of two."""
    if isinstance(value, tuple):
        return [round(v, 2) for v in value]
    return value if isinstance(value, int) else round(value, 2)


def questions_path(out: Path) -> Path:
    """Where ``write_report`` puts the per-question rows of a report written to ``out``."""
    return out.with_name(out.stem + ".questions.jsonl")


def write_report(data: dict[str, Any], out: Path) -> Path:
    """Write a report's aggregates to ``out`` (JSON) and its per-question rows, one
    JSON line each, to ``questions_path(out)`` beside it; returns that path.

    The aggregates are what the docs render; the rows (retrieved documents per
    question and method) are large and stay out of the repository."""
    rows = data.get("per_question", [])
    aggregates = {key: value for key, value in data.items() if key != "per_question"}
    out.write_text(json.dumps(aggregates, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    path = questions_path(out)
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
    return path


# -- inputs ------------------------------------------------------------------

def load_questions(path: Path) -> list[Question]:
    """Read a JSONL question file; ``InputError`` names the bad line."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InputError(f"{path}: cannot read questions ({exc.strerror or exc})") from exc
    out: list[Question] = []
    seen: set[str] = set()
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{where}: not valid JSON ({exc.msg})") from exc
        q = _question(raw, where)
        if q.id in seen:
            raise InputError(f"{where}: duplicate question id {q.id!r}")
        seen.add(q.id)
        out.append(q)
    if not out:
        raise InputError(f"{path}: no questions")
    return out


def _question(raw: Any, where: str) -> Question:
    if not isinstance(raw, dict):
        raise InputError(f"{where}: expected a JSON object")
    for key in ("id", "question", "answer"):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise InputError(f"{where}: '{key}' must be a non-empty string")
    gold = raw.get("supporting_titles")
    if not isinstance(gold, list) or not gold or not all(isinstance(t, str) for t in gold):
        raise InputError(f"{where}: 'supporting_titles' must be a non-empty list of titles")
    aliases = raw.get("answer_aliases") or []
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise InputError(f"{where}: 'answer_aliases' must be a list of strings")
    return Question(id=raw["id"], question=raw["question"], answer=raw["answer"],
                    supporting_titles=tuple(gold), answer_aliases=tuple(aliases), type=raw.get("type"))


def corpus_name_for(corpus_file: Path, untitled: bool = False) -> str:
    """``eval-<first 16 hex digits of the file's SHA-256>``: same content, same corpus
    (``-untitled`` after it for the corpus stored without titles)."""
    name = "eval-" + hashlib.sha256(Path(corpus_file).read_bytes()).hexdigest()[:16]
    return name + "-untitled" if untitled else name


def document_titles(corpus_file: Path) -> dict[str, str]:
    """Each document's title by its id: what recall counts on an untitled corpus."""
    return {d.external_id: d.title for d in load_path(corpus_file)}


def hit_documents(hits: Iterable["Hit"], titles: dict[str, str] | None = None) -> list[str]:
    """The distinct documents of ``hits``, best first, each as its title (with
    ``titles``, document_titles: the title of its id, for an untitled corpus)."""
    return distinct_documents(titles.get(h.provenance.external_id, h.title) if titles else h.title for h in hits)


def prepare_corpus(db: "Database", corpus_file: Path, *, extract: str | None = None, llm: "LLM | None" = None,
                   progress: bool = True, methods: Sequence[str] = (),
                   untitled: bool = False) -> tuple["Corpus", EvalCorpus]:
    """Ingest ``corpus_file`` into its content-named corpus, or reuse it; with
    ``extract`` ("spacy" or "llm"), also extract triples and propositions; the
    method families ``methods`` need (ThreadRAG's nodes) are enabled and built.
    ``untitled``: the documents without their titles, into a corpus of their own.

    Re-ingesting is cheap when nothing changed (documents are skipped by content
    hash before any model runs); an interrupted first run is completed, and so is
    an interrupted extraction."""
    docs = load_path(corpus_file)
    if untitled:
        docs = [replace(d, title="") for d in docs]
    kb = db.corpus(corpus_name_for(corpus_file, untitled))
    report = kb.ingest(docs, progress=progress, methods=methods)
    built = report.added + report.replaced
    if built:
        _add_seconds(db, kb.id, "index_seconds", report.total_seconds)
    if extract:
        extraction = kb.extract_triples(extract, llm=llm, progress=progress)
        if extraction.chunks:
            _add_seconds(db, kb.id, f"extract_seconds_{extract}", extraction.seconds)
    settings = db.fetch_row("corpus_settings", {"corpus_id": kb.id})[0] or {}
    stats = next(c for c in db.corpora() if c["name"] == kb.name)
    return kb, EvalCorpus(file=str(corpus_file), name=kb.name, documents=stats["documents"],
                          chunks=stats["chunks"], index_seconds=round(float(settings.get("index_seconds", 0.0)), 3),
                          reused=built == 0, embedding_model=kb.info.embedding_model,
                          extract_seconds={k.removeprefix("extract_seconds_"): round(v, 3)
                                           for k, v in settings.items() if k.startswith("extract_seconds_")},
                          untitled=untitled)


def _add_seconds(db: "Database", corpus_id: int, key: str, seconds: float) -> None:
    """Add to a build cost kept in the corpus's settings: an interrupted build and
    the run that completes it add up to the whole cost."""
    with db.transaction() as conn:
        conn.execute(query("add_corpus_seconds"), {"corpus_id": corpus_id, "key": key, "seconds": seconds})


# -- the run -----------------------------------------------------------------

def evaluate(kb: "Corpus", corpus: EvalCorpus, questions: Sequence[Question], method_names: Sequence[str],
             *, ks: Sequence[int] = DEFAULT_KS, depth: int | None = None, llm: "LLM | None" = None,
             progress: bool = True, traces: bool = False, reader: str | None = None,
             titles: dict[str, str] | None = None) -> Report:
    """Run every method on every question and aggregate.

    Each method returns ``depth`` chunks (default 4 × the largest k); Recall@k
    counts the first k distinct documents among them. Latency is the wall time of
    ``kb.retrieve`` after one untimed warm-up query per method. ``llm`` goes to
    the methods that take one (the answering methods); the others ignore it.
    With ``traces`` each per-question row keeps its trace (``row["trace"]``).
    ``titles`` (document id -> title, document_titles): count a hit's document by
    the title of its id, for a corpus stored without titles."""
    ks = tuple(sorted(set(ks)))
    if not ks or ks[0] < 1:
        raise InputError("k values must be positive integers")
    for name in method_names:
        method_registry.get(name)
    depth = depth or 4 * ks[-1]
    report = Report(corpus=corpus, questions=len(questions), ks=ks, depth=depth, reader=reader)
    for name in method_names:
        options = {"llm": llm} if llm is not None and method_registry.takes_option(name, "llm") else {}
        rows = _run_method(kb, name, questions, ks, depth, options, progress, traces, titles)
        report.per_question.extend(rows)
        report.methods[name] = _aggregate(rows, ks)
    return report


def _run_method(kb: "Corpus", name: str, questions: Sequence[Question], ks: tuple[int, ...],
                depth: int, options: dict[str, Any], progress: bool, traces: bool = False,
                titles: dict[str, str] | None = None) -> list[dict[str, Any]]:
    kb.retrieve(questions[0].question, method=name, k=depth, **options)  # warm-up: models, caches
    rows = []
    for q in tqdm(questions, desc=f"eval {name}", unit="q", disable=not progress):
        t0 = time.perf_counter()
        hits = kb.retrieve(q.question, method=name, k=depth, **options)
        latency_ms = (time.perf_counter() - t0) * 1000
        docs = hit_documents(hits, titles)
        row: dict[str, Any] = {
            "method": name, "id": q.id, "type": q.type, "question": q.question,
            "gold": list(q.supporting_titles), "retrieved": docs[: ks[-1]],
        }
        row.update({f"recall@{k}": recall_at_k(docs, q.supporting_titles, k) * 100 for k in ks})
        row.update(
            answer=hits.answer,
            em=None if hits.answer is None else exact_match(hits.answer, q.answers) * 100,
            f1=None if hits.answer is None else f1_score(hits.answer, q.answers) * 100,
            latency_ms=round(latency_ms, 2),
            prompt_tokens=hits.trace.prompt_tokens, completion_tokens=hits.trace.completion_tokens,
            llm_calls=hits.trace.llm_calls, llm_replies=hits.trace.llm_replies,
            parse_failures=hits.trace.parse_failures, constrained_calls=hits.trace.constrained_calls,
            outcome=dict(hits.trace.outcome),
            rounds=rounds(hits.trace), resolved=all_resolved(hits.trace))
        if traces:
            row["trace"] = {"steps": hits.trace.steps, "timings_ms": hits.trace.timings_ms}
        rows.append(row)
    return rows


def _aggregate(rows: Sequence[dict[str, Any]], ks: tuple[int, ...]) -> MethodResult:
    def mean(key: str) -> float | None:
        values = [r[key] for r in rows if r.get(key) is not None]
        return sum(values) / len(values) if values else None

    latencies = [r["latency_ms"] for r in rows]
    resolved = mean("resolved")
    interval_ks = [k for k in ks if k in INTERVAL_KS]
    grouped = grouped_intervals(rows, interval_ks)
    return MethodResult(
        recall={k: mean(f"recall@{k}") or 0.0 for k in ks},
        em=mean("em"), f1=mean("f1"),
        latency_ms_p50=percentile(latencies, 50), latency_ms_p95=percentile(latencies, 95),
        llm_prompt_tokens=sum(r["prompt_tokens"] for r in rows),
        llm_completion_tokens=sum(r["completion_tokens"] for r in rows),
        llm_calls=sum(r["llm_calls"] for r in rows),
        llm_replies=sum(r.get("llm_replies", 0) for r in rows),
        parse_failures=sum(r.get("parse_failures", 0) for r in rows),
        constrained_calls=sum(r.get("constrained_calls", 0) for r in rows),
        outcomes=_count_outcomes(rows),
        rounds=mean("rounds"),
        resolved=None if resolved is None else resolved * 100,
        intervals={k: bootstrap_interval([r[f"recall@{k}"] for r in rows]) for k in interval_ks},
        groups=grouped.get("groups"),
        group_intervals={k: grouped[f"group_interval@{k}"] for k in interval_ks} if grouped else {},
        by_type=recall_by_type(rows, ks, interval_ks),
    )


# The trace step each LLM loop writes once per retrieval round.
ROUND_STEPS = {"t2rag": "round", "cirag": "construct", "threadrag": "pathfinding"}


def rounds(trace: Any) -> int | None:
    """Retrieval rounds of a loop method's run (None for the other methods)."""
    step = ROUND_STEPS.get(trace.method)
    return None if step is None else sum(1 for s in trace.steps if s["step"] == step)


def all_resolved(trace: Any) -> bool | None:
    """T2RAG with an LLM: whether every triple of the decomposition ended resolved
    (a failed decomposition counts as not); None for other runs."""
    if trace.method != "t2rag" or trace.outcome.get("finish") == "no_llm":
        return None
    finish = next((s for s in trace.steps if s["step"] == "finish"), None)
    if finish is None:
        return None
    return bool(finish["triples"]) and all(t["state"] == "resolved" for t in finish["triples"])


def _count_outcomes(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, int]]:
    counts: dict[str, dict[str, int]] = {}
    for row in rows:
        for key, value in row["outcome"].items():
            counts.setdefault(key, {}).setdefault(str(value), 0)
            counts[key][str(value)] += 1
    return {key: dict(sorted(values.items())) for key, values in sorted(counts.items())}
