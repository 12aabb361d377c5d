"""CIRAG (../shared/papers/cirag.md): iterative construction-integration over
triples, then an answer cascaded from triples to sentences to passages.

Construction (§3.3): the current query retrieves the top K documents (best
chunk cosine, SQL ``pgrag_internal.cirag_documents``); their chunks that the extractor
has not processed yet get their triples extracted now (spaCy, or the LLM
extractor when the corpus was built with it); the documents' triples are ranked
by cosine to the query and the top N become the round's candidates, each with
its sentence, chunk and document (SQL ``pgrag_internal.cirag_triples``).

Integration (§3.3, Eq. 1-4): the LLM sees the original question, the history
of earlier rounds and the numbered candidates, and returns its reasoning, the
numbers of the core triples and the next-hop query. Core triples bring their
sentences and documents into the cumulative sets. The loop stops on an empty
next query, a repeated one, or after L rounds.

Adaptive cascaded generation (§3.4): answer from the cumulative triples; on a
refusal ("Unanswerable", matched robustly), from their sentences, then from their
passages (chunks); when every level refuses, the passage-level reply stands.
``trace.outcome["granularity"]`` says which level answered.

Departures: for token cost, the history repeats each earlier round's query,
thought, kept triples and next query, not its full candidate list (Eq. 2 has
the candidates too); passages are the chunks holding the core triples.

Without an LLM: one construction round with the question, no cascade; the hits
are the candidates' chunks.

Hits: the chunks of the core triples in the order they entered (round by round),
then the other candidates' chunks (round by round), then the best chunk of each
retrieved document; so Recall@k counts the cumulative documents first. The
other candidates are ordered by triple cosine + document_weight × their
document's cosine: on 2Wiki without an LLM, the triple cosine alone (weight 0)
gave Recall@2/@5 47.5/59.2, weight 1 gave 52.9/61.9 (dense retrieval: 52.2/64.2).
"""

from __future__ import annotations

import dataclasses
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from .. import prompts
from ..llm import LLMError, LLMReplyError, short_answer
from ..results import Hits, Trace
from .spec import AT_LEAST_0, AT_LEAST_1, Allowed, MethodSpec

if TYPE_CHECKING:
    from ..context import Context
    from ..llm import LLM

GRANULARITIES = ("triples", "sentences", "passages")


@dataclass(frozen=True, kw_only=True)
class CiragSettings:
    """Hyperparameters; defaults are the paper's (Appendix B.4: K = 10, N = 30, L = 4)."""

    documents: int = 10             # K, documents retrieved per round
    candidates: int = 30            # N, candidate triples per round
    rounds: int = 4                 # L, maximum construction-integration rounds
    fusion: bool = False            # documents by dense + BM25 fusion instead of dense only
    extractor: str | None = None    # None: "llm" when the corpus has LLM triples and an LLM is given, else "spacy"
    extract_missing: bool = True    # extract triples of retrieved chunks that have none yet
    document_weight: float = 1.0    # hits after the core ones: triple score + this x document score (paper: 0)
    max_tokens: int = 256           # per LLM reply (integration and answers)

    # What each option takes beyond its type (MethodSpec.configure).
    RANGES: ClassVar[dict[str, Allowed]] = {
        "documents": AT_LEAST_1, "candidates": AT_LEAST_1, "rounds": AT_LEAST_1, "max_tokens": AT_LEAST_1,
        "document_weight": AT_LEAST_0, "extractor": ("spacy", "llm"),
    }

    def __post_init__(self) -> None:
        if self.documents < 1 or self.candidates < 1 or self.rounds < 1:
            raise ValueError("documents, candidates and rounds must be at least 1")
        if self.extractor not in (None, "spacy", "llm"):
            raise ValueError("extractor must be 'spacy', 'llm' or None")


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """A candidate triple with its provenance (one row of ``pgrag_internal.cirag_triples``)."""

    number: int                 # 1-based within its round, as the integrator sees it
    triple_id: int
    score: float
    subject: str
    predicate: str
    object: str
    chunk_id: int
    document_id: int
    title: str
    sentence_ordinal: int | None
    char_start: int
    char_end: int
    sentence: str
    document_score: float = 0.0     # the cosine of its document's best chunk to the query

    @property
    def text(self) -> str:
        return f"({self.subject}; {self.predicate}; {self.object})"

    @property
    def sentence_key(self) -> tuple[int, int | None, int]:
        # The stored sentence when one holds the triple, else the triple's own span.
        return (self.document_id, self.sentence_ordinal,
                self.char_start if self.sentence_ordinal is None else -1)


@dataclass(frozen=True, kw_only=True)
class Decision:
    """One integration step's output (r_t, core triples, a_{t+1})."""

    thought: str
    core: tuple[int, ...]       # candidate numbers
    next_query: str | None

    def to_json(self) -> dict[str, Any]:
        return {"thought": self.thought, "core": list(self.core), "next_query": self.next_query}


@dataclass(kw_only=True)
class Round:
    number: int
    query: str
    candidates: list[Candidate]
    documents: list[tuple[int, int]]        # (document_id, best chunk_id), by rank
    decision: Decision | None = None

    @property
    def core(self) -> list[Candidate]:
        return _by_numbers(self.candidates, self.decision.core) if self.decision else []


def _by_numbers(candidates: list[Candidate], numbers: tuple[int, ...]) -> list[Candidate]:
    by_number = {c.number: c for c in candidates}
    return [by_number[n] for n in numbers if n in by_number]


@dataclass(kw_only=True)
class _State:
    rounds: list[Round] = field(default_factory=list)
    finish: str = "natural"


def run(ctx: "Context", question: str, k: int, settings: CiragSettings) -> Hits:
    """CIRAG with ``ctx.llm``; without one, a single construction round."""
    llm = ctx.llm
    trace = Trace(method="cirag", query=question)
    trace.step("settings", **dataclasses.asdict(settings), llm=llm.model if llm else None)
    answer: str | None = None
    with ctx.charged(trace):
        extractor = _extractor(ctx, settings, llm)
        state = _loop(ctx, question, settings, llm, extractor, trace)
        trace.outcome["finish"] = state.finish
        if llm is None:
            trace.step("fallback", note=ctx.llm_note,
                       done="one construction round with the question; no integration, no cascade")
            trace.outcome["granularity"] = "none"
        else:
            answer = _cascade(ctx, question, state, llm, settings, trace)
        hits = _hits(ctx, state, k, settings.document_weight, trace)
    return Hits(hits, trace, answer=answer)


# -- construction --------------------------------------------------------------

def _extractor(ctx: "Context", settings: CiragSettings, llm: "LLM | None") -> str:
    if settings.extractor is not None:
        return settings.extractor
    used = [name for name, _ in ctx.db.fetchall("corpus_extractors", {"corpus_id": ctx.id})]
    return "llm" if "llm" in used and llm is not None else "spacy"


def construct(ctx: "Context", query: str, settings: CiragSettings, llm: "LLM | None", extractor: str,
              trace: Trace, number: int = 1) -> Round:
    """One construction phase: K documents, missing triples extracted, N candidates."""
    t0 = time.perf_counter()
    vector = ctx.encode([query])[0]
    t1 = time.perf_counter()
    docs = (_documents_within(ctx, query, vector, settings) if ctx.scope is not None else
            ctx.db.fetchall("cirag_documents", {"corpus": ctx.name, "embedding": vector,
                                                "documents": settings.documents,
                                                "query": query if settings.fusion else None}))
    doc_ids = [d[1] for d in docs]
    t2 = time.perf_counter()
    extracted = _extract_missing(ctx, doc_ids, settings, llm, extractor, trace) if doc_ids else 0
    t3 = time.perf_counter()
    rows = ctx.db.fetchall("cirag_triples", {"corpus": ctx.name, "embedding": vector, "document_ids": doc_ids,
                                            "candidates": settings.candidates, "extractor": extractor})
    t4 = time.perf_counter()
    doc_scores = {d[1]: float(d[2]) for d in docs}
    candidates = [Candidate(number=r[0], triple_id=r[1], score=float(r[2]), subject=r[3], predicate=r[4],
                            object=r[5], chunk_id=r[8], document_id=r[9], title=r[12], sentence_ordinal=r[13],
                            char_start=r[14], char_end=r[15], sentence=r[16], document_score=doc_scores[r[9]])
                  for r in rows]
    for key, value in (("embed", t1 - t0), ("documents", t2 - t1), ("extract", t3 - t2), ("triples", t4 - t3)):
        trace.timings_ms[key] = trace.timings_ms.get(key, 0.0) + value * 1000
    trace.step("construct", round=number, query=query, documents=len(docs), extracted_chunks=extracted,
               candidates=len(candidates), top=[c.text for c in candidates[:5]])
    return Round(number=number, query=query, candidates=candidates, documents=[(d[1], d[3]) for d in docs])


def _documents_within(ctx: "Context", query: str, vector: Any,
                      settings: CiragSettings) -> list[tuple[int, int, float, int]]:
    """``pgrag_internal.cirag_documents`` inside a metadata filter: (rank,
    document, score, its best chunk) by the best chunk's cosine, or by the RRF
    of dense and BM25 with ``fusion``, from the filtered ranking index (the SQL
    function's HNSW scan has no filter)."""
    depth = max(settings.documents * 4, 40)
    postings = ctx.ranking_index().postings
    nearest = postings.nearest([vector], depth)
    if nearest is None:
        nearest = ctx.nearest_within([vector], depth)
    ids, scores = nearest[0]
    if settings.fusion:   # imported here: an unfiltered CIRAG needs neither module
        from .bm25 import ranking as bm25_ranking
        from .hybrid import fuse

        fused = fuse([bm25_ranking(ctx, query, depth)[0], ids])[:depth]
        ids, scores = [c for c, _ in fused], [s for _, s in fused]
    owner = postings.documents_of(ids)
    best: dict[int, tuple[float, int]] = {}
    for chunk_id, score in zip(ids, scores):   # best first: a document's first chunk is its best
        best.setdefault(owner[chunk_id], (score, chunk_id))
    ranked = sorted(best.items(), key=lambda item: (-item[1][0], item[0]))[: settings.documents]
    return [(rank, d, score, chunk_id) for rank, (d, (score, chunk_id)) in enumerate(ranked, start=1)]


def _extract_missing(ctx: "Context", doc_ids: list[int], settings: CiragSettings, llm: "LLM | None",
                     extractor: str, trace: Trace) -> int:
    """Extract triples from the documents' chunks no extractor run has processed."""
    if not settings.extract_missing or (extractor == "llm" and llm is None):
        return 0
    missing = [r[0] for r in ctx.db.fetchall("cirag_unextracted", {
        "corpus_id": ctx.id, "document_ids": doc_ids, "extractor": extractor})]
    if not missing:
        return 0
    try:
        return ctx.ensure_triples(extractor, missing, llm=llm if extractor == "llm" else None)
    except LLMError as exc:   # endpoint down: rank the triples already stored
        trace.step("extract_error", error=str(exc))
        return 0


# -- integration ---------------------------------------------------------------

def _loop(ctx: "Context", question: str, settings: CiragSettings, llm: "LLM | None", extractor: str,
          trace: Trace) -> _State:
    state = _State()
    query = question
    for number in range(1, settings.rounds + 1):
        current = construct(ctx, query, settings, llm, extractor, trace, number)
        state.rounds.append(current)
        if llm is None:
            state.finish = "no_llm"
            return state
        if not current.candidates:
            trace.step("stop", round=number, reason="no candidate triples")
            state.finish = "no_candidates"
            return state
        try:
            current.decision = integrate(llm, question, state.rounds, settings, trace)
        except LLMReplyError as exc:
            trace.step("stop", round=number, reason="malformed integrator reply", error=str(exc), reply=exc.reply)
            state.finish = "malformed"
            return state
        except LLMError as exc:
            trace.step("stop", round=number, reason="LLM error", error=str(exc))
            state.finish = "llm_error"
            return state
        nxt = current.decision.next_query
        if nxt is None:
            state.finish = "natural"
            return state
        if _normal(nxt) in {_normal(r.query) for r in state.rounds}:
            trace.step("stop", round=number, reason="next query repeats an earlier one", next_query=nxt)
            state.finish = "repeat"
            return state
        query = nxt
    trace.step("stop", round=settings.rounds, reason=f"L = {settings.rounds} rounds reached")
    state.finish = "cap"
    return state


def integration_messages(question: str, rounds: list[Round]) -> list[dict[str, str]]:
    """The integrator's request for the last of ``rounds`` (earlier ones are its history)."""
    *earlier, current = rounds
    history = "\n".join(
        f"Round {r.number} (query: {r.query}): kept {'; '.join(c.text for c in r.core) or 'nothing'}. "
        f"Thought: {r.decision.thought or '-'} Next query: {r.decision.next_query or 'none'}"
        for r in earlier if r.decision is not None) or prompts.CIRAG_NO_HISTORY
    candidates = "\n".join(f"{c.number}. {c.text} [{c.title}]" for c in current.candidates)
    return [{"role": "system", "content": prompts.CIRAG_INTEGRATE_SYSTEM},
            {"role": "user", "content": prompts.CIRAG_INTEGRATE_USER.format(
                question=question, history=history, round=current.number, query=current.query,
                candidates=candidates)}]


def integrate(llm: "LLM", question: str, rounds: list[Round], settings: CiragSettings, trace: Trace) -> Decision:
    """One integration phase for the last round (``LLMReplyError`` when its reply stays unusable)."""
    current = rounds[-1]
    messages = integration_messages(question, rounds)
    t0 = time.perf_counter()
    try:
        decision = llm.structured(messages, lambda v: parse_decision(v, current.candidates),
                                  schema=prompts.CIRAG_INTEGRATE_REPLY, max_tokens=settings.max_tokens)
    finally:
        trace.time("integrate", t0)
    trace.step("integrate", round=current.number, query=current.query, prompt=messages[1]["content"],
               decision=decision.to_json(), kept=[c.text for c in _by_numbers(current.candidates, decision.core)])
    return decision


_NO_QUERY = {"", "none", "null", "n/a", "na", "no", "no question", "no query", "nothing", "done", "finished"}


def parse_decision(value: Any, candidates: list[Candidate]) -> Decision:
    """Validate an integrator reply. Core triples may be given by number (as the
    prompt asks) or, as small models do, by their text; unknown ones are dropped.
    ``ValueError`` (which earns one repair request) on a wrong shape."""
    if not isinstance(value, dict):
        raise ValueError('expected a JSON object {"thought": ..., "core": [...], "next_query": ...}')
    core_raw = value.get("core", value.get("core_triples"))
    if core_raw is None:
        raise ValueError('missing "core" (a list of candidate numbers)')
    if not isinstance(core_raw, list):
        core_raw = [core_raw]
    by_text = {_normal(c.text): c.number for c in candidates}
    by_text.update({_normal(f"{c.subject} {c.predicate} {c.object}"): c.number for c in candidates})
    numbers = {c.number for c in candidates}
    core: list[int] = []
    for item in core_raw:
        n = _core_number(item, by_text)
        if n is not None and n in numbers and n not in core:
            core.append(n)
    nxt = value.get("next_query", value.get("next"))
    if nxt is not None and not isinstance(nxt, str):
        raise ValueError('"next_query" must be a string or null')
    nxt = " ".join(nxt.split()) if nxt else None
    if nxt is not None and _normal(nxt) in _NO_QUERY:
        nxt = None
    thought = value.get("thought", "")
    return Decision(thought=" ".join(str(thought).split()) if thought else "", core=tuple(core), next_query=nxt)


def _core_number(item: Any, by_text: dict[str, int]) -> int | None:
    if isinstance(item, bool):
        return None
    if isinstance(item, int):
        return item
    if isinstance(item, float) and item.is_integer():
        return int(item)
    if isinstance(item, str):
        digits = re.fullmatch(r"\s*\(?#?(\d+)[.)]?\s*", item)
        return int(digits.group(1)) if digits else by_text.get(_normal(item))
    if isinstance(item, list) and len(item) == 3:
        return by_text.get(_normal(" ".join(str(x) for x in item)))
    if isinstance(item, dict):
        if "number" in item or "id" in item:
            return _core_number(item.get("number", item.get("id")), by_text)
        parts = [item.get("subject"), item.get("predicate"), item.get("object")]
        if all(isinstance(x, str) for x in parts):
            return by_text.get(_normal(" ".join(parts)))  # type: ignore[arg-type]
    return None


def _normal(text: str) -> str:
    return " ".join(re.sub(r"[^\w]+", " ", text.casefold()).split())


# -- adaptive cascaded generation ----------------------------------------------

_REFUSALS = re.compile(
    r"\b(unanswerable|cannot be answered|can ?not answer|can t be answered|can t answer|not answerable"
    r"|not enough information|insufficient information|not enough evidence|insufficient evidence"
    r"|no information|does not (?:provide|mention|contain|say)|do not (?:provide|mention|contain|know)"
    r"|doesn t (?:provide|mention|contain|say)|don t know|not (?:mentioned|provided|stated|specified) in)\b")
_BARE_REFUSALS = {"unknown", "none", "no answer", "n a", "not known", "not sure", "unclear", "not available"}


def is_refusal(reply: str | None) -> bool:
    """Whether an answer is a refusal: empty, one of the refusal phrases anywhere
    (case and punctuation ignored), or a bare "unknown"/"none"-like reply. A
    title such as "Unknown Pleasures" is an answer, not a refusal."""
    if reply is None:
        return True
    text = _normal(reply.replace("'", " "))
    return not text or text in _BARE_REFUSALS or _REFUSALS.search(text) is not None


def evidence(ctx: "Context", state: _State, trace: Trace) -> dict[str, list[str]]:
    """The context of each granularity from the cumulative sets; when the
    integrator kept no triple at all, from the first round's candidates."""
    core = _unique([c for r in state.rounds for c in r.core], key=lambda c: c.triple_id)
    if not core and state.rounds:
        core = state.rounds[0].candidates
        trace.step("evidence", note="no core triples kept: the cascade uses the first round's candidates")
    sentences = _unique(core, key=lambda c: c.sentence_key)
    chunk_ids = list(dict.fromkeys(c.chunk_id for c in core))
    passages: dict[int, str] = {}
    if chunk_ids:
        for chunk_id, (title, text) in ctx.chunk_texts(chunk_ids).items():
            passages[chunk_id] = f"{title}: {' '.join(text.split())}"
    return {
        "triples": [c.text for c in core],
        "sentences": [f"{c.title}: {' '.join(c.sentence.split())}" for c in sentences],
        "passages": [passages[c] for c in chunk_ids if c in passages],
    }


def _cascade(ctx: "Context", question: str, state: _State, llm: "LLM", settings: CiragSettings,
             trace: Trace) -> str | None:
    t0 = time.perf_counter()
    contexts = evidence(ctx, state, trace)
    answer: str | None = None
    tried: list[dict[str, Any]] = []
    if not any(contexts.values()):   # nothing was constructed: no evidence to answer from
        trace.outcome["granularity"] = "none"
        trace.step("answer", answer=None, granularity="none", levels=[], note="no evidence")
        return None
    trace.outcome["granularity"] = "passages"
    try:
        for level in GRANULARITIES:
            lines = contexts[level]
            if not lines:
                tried.append({"granularity": level, "skipped": "no evidence"})
                continue
            reply = llm.chat([
                {"role": "system", "content": prompts.CIRAG_ANSWER_SYSTEM},
                {"role": "user", "content": prompts.CIRAG_ANSWER_USER.format(
                    granularity=level, evidence="\n".join(f"- {x}" for x in lines), question=question)}],
                max_tokens=settings.max_tokens).text
            answer = short_answer(reply)
            refused = is_refusal(answer)
            tried.append({"granularity": level, "evidence": len(lines), "reply": reply, "refusal": refused})
            if not refused:
                trace.outcome["granularity"] = level
                break
        else:
            trace.outcome["answered"] = "refused"   # every level refused: the passage-level reply stands
    except LLMError as exc:
        tried.append({"error": str(exc)})
        trace.outcome["granularity"] = "error"
    trace.timings_ms["answer"] = (time.perf_counter() - t0) * 1000
    trace.step("answer", answer=answer, granularity=trace.outcome["granularity"], levels=tried)
    return answer


# -- hits ----------------------------------------------------------------------

def _hits(ctx: "Context", state: _State, k: int, weight: float, trace: Trace) -> list[Any]:
    order: dict[int, dict[str, Any]] = {}
    score: dict[int, float] = {}

    def add(chunk_id: int, value: float, **details: Any) -> None:
        if chunk_id not in order:
            order[chunk_id], score[chunk_id] = details, value

    for r in state.rounds:
        for c in r.core:
            add(c.chunk_id, c.score, round=r.number, core=True, triple=c.text)
    for r in state.rounds:
        ranked = sorted(r.candidates, key=lambda c: -(c.score + weight * c.document_score))
        for c in ranked:
            add(c.chunk_id, c.score + weight * c.document_score, round=r.number, core=False, triple=c.text)
    for r in state.rounds:
        for rank, (_doc, chunk_id) in enumerate(r.documents, start=1):
            add(chunk_id, 0.0, round=r.number, core=False, document_rank=rank)
    chosen = list(order)[:k]
    return ctx.hits(chosen, [score[c] for c in chosen], [order[c] for c in chosen], trace)


def _unique(items: list[Any], key: Any) -> list[Any]:
    seen: set[Any] = set()
    out = []
    for item in items:
        if key(item) not in seen:
            seen.add(key(item))
            out.append(item)
    return out


SPEC = MethodSpec(name="cirag", run=run, settings=CiragSettings(), needs_triples=True, takes_llm=True,
                  answers=True, filters=True)
