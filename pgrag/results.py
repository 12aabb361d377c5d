"""Result records returned by the public API (frozen dataclasses)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

# pgrag.hit's columns, in order (migrations/sql/0001_core_schema.sql), as
# pgrag.retrieve returns them (with details).
HIT_COLUMNS = ("rank", "chunk_id", "score", "document_id", "external_id", "title", "chunk_ordinal",
               "first_sentence", "last_sentence", "char_start", "char_end", "text")


@dataclass(frozen=True, kw_only=True)
class SentenceSpan:
    ordinal: int
    char_start: int
    char_end: int


@dataclass(frozen=True, kw_only=True)
class Provenance:
    """Where a hit comes from. Offsets are code-point offsets into the document
    body (end exclusive): ``body[char_start:char_end] == hit.text``."""

    document_id: int
    external_id: str
    title: str
    chunk_id: int
    chunk_ordinal: int
    char_start: int
    char_end: int
    sentences: tuple[SentenceSpan, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Hit:
    rank: int
    score: float
    text: str
    provenance: Provenance
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def title(self) -> str:
        return self.provenance.title

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> "Hit":
        """From a row of the named queries ``hits`` and ``dense_hits``: pgrag.hit's
        columns (HIT_COLUMNS), then the span's sentence ordinals, starts and ends."""
        rank, chunk_id, score, doc_id, ext, title, ordinal, _first, _last, start, end, text, *spans = row
        ordinals, starts, ends = spans
        sentences = tuple(SentenceSpan(ordinal=o, char_start=s, char_end=e)
                          for o, s, e in zip(ordinals or (), starts or (), ends or ()))
        return cls(rank=rank, score=float(score), text=text, provenance=Provenance(
            document_id=doc_id, external_id=ext, title=title, chunk_id=chunk_id, chunk_ordinal=ordinal,
            char_start=start, char_end=end, sentences=sentences))

    def row(self) -> dict[str, Any]:
        """The hit as a row of pgrag.retrieve: HIT_COLUMNS and ``details``."""
        p = self.provenance
        values = (self.rank, p.chunk_id, self.score, p.document_id, p.external_id, p.title, p.chunk_ordinal,
                  p.sentences[0].ordinal if p.sentences else None, p.sentences[-1].ordinal if p.sentences else None,
                  p.char_start, p.char_end, self.text)
        return {**dict(zip(HIT_COLUMNS, values)), "details": self.details}


@dataclass(kw_only=True)
class Trace:
    """How a retrieval ran: the method's steps, in order, their timings and the
    LLM tokens they spent (zero for methods that call no LLM)."""

    method: str
    query: str
    steps: list[dict[str, Any]] = field(default_factory=list)
    timings_ms: dict[str, float] = field(default_factory=dict)
    prompt_tokens: int = 0
    completion_tokens: int = 0

    llm_calls: int = 0
    # Structured replies checked, and how many of them did not parse into their
    # prompt's shape (pgrag.llm.Usage: replies, parse_failures); requests sent
    # with a reply schema (constrained decoding).
    llm_replies: int = 0
    parse_failures: int = 0
    constrained_calls: int = 0
    # How the run ended, as short labels that `pgrag eval` counts per method,
    # e.g. {"finish": "natural"} or {"granularity": "sentences"}.
    outcome: dict[str, str] = field(default_factory=dict)

    def step(self, name: str, **data: Any) -> None:
        self.steps.append({"step": name, **data})

    def time(self, stage: str, since: float) -> None:
        """Add the time since ``since`` (a ``time.perf_counter()`` reading) to a stage;
        a stage met several times (one per hop or round) accumulates."""
        self.timings_ms[stage] = self.timings_ms.get(stage, 0.0) + (time.perf_counter() - since) * 1000

    def charge(self, usage: Any) -> None:
        """Add the tokens of some LLM calls (a ``pgrag.llm.Usage``) to this trace,
        with their structured replies and parse failures. A request that fell back
        to no response_format (the endpoint refused it) is a step, and the outcome
        ``constraint: refused``."""
        self.llm_calls += usage.calls
        self.prompt_tokens += usage.prompt_tokens
        self.completion_tokens += usage.completion_tokens
        self.llm_replies += usage.replies
        self.parse_failures += usage.parse_failures
        self.constrained_calls += usage.constrained
        if usage.unconstrained:
            self.step("llm_unconstrained", requests=usage.unconstrained,
                      reason="the endpoint refused response_format (HTTP 400/422): the request was sent again "
                             "without it, and the client sends none from here on")
            self.outcome["constraint"] = "refused"


class Hits(list[Hit]):
    """A ranked list of hits that also carries the retrieval's trace and, for
    methods that generate one (with an LLM), the answer."""

    def __init__(self, hits: list[Hit], trace: Trace, answer: str | None = None) -> None:
        super().__init__(hits)
        self.trace = trace
        self.answer = answer


@dataclass(frozen=True, kw_only=True)
class Answer:
    """A generated answer with the evidence it rests on. ``text`` is None when
    the method produced no answer (no LLM configured, or a retrieval-only method)."""

    text: str | None
    method: str
    evidence: Hits

    @property
    def trace(self) -> Trace:
        return self.evidence.trace


@dataclass(frozen=True, kw_only=True)
class Proposition:
    """A triple as a retrievable statement, with its source: the chunk, the
    document and the sentence's offsets into the document body. ``query`` is the
    (1-based) query embedding it matched best."""

    rank: int
    triple_id: int
    score: float
    subject: str
    predicate: str
    object: str
    text: str
    extractor: str
    chunk_id: int
    document_id: int
    external_id: str
    title: str
    char_start: int
    char_end: int
    query: int = 1
