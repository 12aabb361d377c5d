"""T2RAG (../shared/papers/t2rag.md): triplet-driven thinking over the proposition index.

Offline, OpenIE triples are verbalised as propositions "subject predicate
object" and embedded (``pgrag.triple``, built by ``kb.extract_triples``). Online:

1. **Decomposition.** The LLM writes the question as triples with named
   placeholders (``?performer``); a placeholder shared by several triples is one
   unknown, so one resolved value fills all of them. A triple is *resolved* (no
   placeholder), *searchable* (exactly one) or *fuzzy* (two or more).
2. **Retrieval.** Each new searchable triple minus its placeholder is a query
   proposition; all of a round's queries share one pool ranked by similarity and
   taken until it covers ``unique_chunks`` (k = 5) distinct source chunks, in SQL
   (``pgrag.propositions``). The propositions and their chunks are the evidence.
3. **Resolution.** The LLM fills placeholders from the evidence. Values only
   accumulate (a bound placeholder keeps its value); substituting them resolves
   searchable triples and promotes fuzzy ones. Triples searched once are not
   searched again, except one searched in a shared pool that stays open: the
   other queries' propositions may have taken the k chunks, so it joins the next
   round's pool (never the same pool of queries twice).
   A round with no new searchable triple while fuzzy ones remain falls back to
   the question's own embedding.
4. **Termination.** Natural when every triple is resolved; early when no new
   searchable triple appears and no fuzzy one is left; forced after N = 3 rounds.
5. **Synthesis.** From the resolved triples alone (natural finish), or from the
   resolved and the remaining open triples with their evidence (otherwise).

Rounds exchange only triples, never a chain of thought: that is the method's
token saving. Without an LLM the method is a retrieval baseline: the question's
embedding against the proposition index with the unique-chunk budget (k).

Hits are the source chunks of the evidence, each round's and each query's in
turn (the best chunk of every query of every round first, then the second...),
topped up to k from the question's own proposition retrieval.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from .. import prompts
from ..exceptions import PgragError
from ..llm import LLMError, short_answer
from ..results import Hit, Hits, Proposition, Trace
from .spec import AT_LEAST_1, Allowed, MethodSpec

if TYPE_CHECKING:
    from ..context import Context
    from ..llm import LLM


@dataclass(frozen=True, kw_only=True)
class T2ragSettings:
    """The paper's defaults (§4: N = 3 rounds, k = 5 chunks per round)."""

    unique_chunks: int = 5       # k: distinct source chunks each round's evidence covers
    max_rounds: int = 3          # N
    passages: bool = True        # give the resolver the source chunks too (the paper's "w/o chunk" ablation: False)
    passage_chars: int = 600     # cap on each passage in a prompt (token cost)
    max_triples: int = 8         # decomposition beyond this is cut (a runaway reply)

    # What each option takes beyond its type (MethodSpec.configure).
    RANGES: ClassVar[dict[str, Allowed]] = dict.fromkeys(
        ("unique_chunks", "max_rounds", "passage_chars", "max_triples"), AT_LEAST_1)

    def __post_init__(self) -> None:
        if self.unique_chunks < 1 or self.max_rounds < 1 or self.max_triples < 1 or self.passage_chars < 1:
            raise ValueError("unique_chunks, max_rounds, max_triples and passage_chars must be at least 1")


# -- query triples -------------------------------------------------------------

_PLACEHOLDER = re.compile(r"^\?[\w\- ]*$")


def is_placeholder(element: str) -> bool:
    return bool(_PLACEHOLDER.match(element.strip()))


@dataclass(frozen=True)
class QueryTriple:
    subject: str
    predicate: str
    object: str

    @property
    def elements(self) -> tuple[str, str, str]:
        return (self.subject, self.predicate, self.object)

    @property
    def placeholders(self) -> list[str]:
        return list(dict.fromkeys(e for e in self.elements if is_placeholder(e)))

    @property
    def state(self) -> str:
        n = len(self.placeholders)
        return "resolved" if n == 0 else "searchable" if n == 1 else "fuzzy"

    def filled(self, values: dict[str, str]) -> "QueryTriple":
        return QueryTriple(*(values.get(e, e) for e in self.elements))

    def query(self) -> str:
        """The query proposition: the triple minus its placeholder."""
        return " ".join(e for e in self.elements if not is_placeholder(e))

    def __str__(self) -> str:
        return f"({self.subject}, {self.predicate}, {self.object})"


def parse_decomposition(value: Any, limit: int) -> list[QueryTriple]:
    """``{"triples": [[s, p, o], ...]}`` → query triples with named placeholders.
    A bare ``?`` becomes a name of its own (``?x1``...), since nothing says two
    bare marks are the same unknown. ``ValueError`` on any other shape."""
    items = value.get("triples") if isinstance(value, dict) else value
    if not isinstance(items, list) or not items:
        raise ValueError('expected {"triples": [["subject", "predicate", "object"], ...]} with at least one triple')
    out: list[QueryTriple] = []
    anonymous = 0
    for item in items[:limit]:
        if not (isinstance(item, list) and len(item) == 3 and all(isinstance(e, str) and e.strip() for e in item)):
            raise ValueError(f"each triple must be three non-empty strings, got {json.dumps(item)[:80]}")
        elements = []
        for e in item:
            e = " ".join(e.split())
            if is_placeholder(e):
                name = e.lower().replace(" ", "_")
                if name == "?":
                    anonymous += 1
                    name = f"?x{anonymous}"
                e = name
            elements.append(e)
        out.append(QueryTriple(*elements))
    return out


_EMPTY_VALUES = {"", "?", "unknown", "none", "null", "n/a", "not found", "not given", "unanswerable"}


def parse_values(value: Any, open_names: set[str]) -> dict[str, str]:
    """``{"values": {"?name": "value", ...}}`` → the values of open placeholders;
    empty or "unknown" values and names that are not open are dropped."""
    values = value.get("values", value) if isinstance(value, dict) else None
    if not isinstance(values, dict):
        raise ValueError('expected {"values": {"?placeholder": "value", ...}}')
    out: dict[str, str] = {}
    for name, v in values.items():
        key = str(name).strip().lower().replace(" ", "_")
        key = key if key.startswith("?") else "?" + key
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            v = str(v)
        if key in open_names and isinstance(v, str) and v.strip().strip(".").lower() not in _EMPTY_VALUES:
            out[key] = " ".join(v.split())
    return out


# -- the loop ----------------------------------------------------------------------

@dataclass
class _State:
    triples: list[QueryTriple]
    values: dict[str, str] = dataclasses.field(default_factory=dict)
    searched: set[QueryTriple] = dataclasses.field(default_factory=set)
    evidence: list[Proposition] = dataclasses.field(default_factory=list)   # every round's, in order
    last_evidence: list[Proposition] = dataclasses.field(default_factory=list)
    fell_back: bool = False      # the question's own embedding was searched already
    pools: set[frozenset[str]] = dataclasses.field(default_factory=set)   # query sets searched

    def current(self) -> list[QueryTriple]:
        return [t.filled(self.values) for t in self.triples]

    def by_state(self, state: str) -> list[QueryTriple]:
        return [t for t in self.current() if t.state == state]

    def new_searchable(self) -> list[QueryTriple]:
        return list(dict.fromkeys(t for t in self.by_state("searchable") if t not in self.searched))

    def open_names(self) -> set[str]:
        return {p for t in self.current() for p in t.placeholders}

    def snapshot(self) -> list[dict[str, str]]:
        return [{"triple": str(t), "state": t.state} for t in self.current()]


def run(ctx: "Context", question: str, k: int, settings: T2ragSettings) -> Hits:
    """T2RAG with ``ctx.llm``; without one, the question against the proposition index."""
    if not ctx.db.fetch_row("has_triples", {"corpus_id": ctx.id})[0]:
        raise PgragError(f"corpus {ctx.name!r} has no triples: T2RAG retrieves propositions. Build them with "
                         f"kb.extract_triples() or `pgrag extract --corpus {ctx.name}`")
    trace = Trace(method="t2rag", query=question)
    trace.step("settings", **dataclasses.asdict(settings))
    if ctx.llm is None:
        trace.step("no_llm", note=ctx.llm_note)
        trace.outcome["finish"] = "no_llm"
        evidence = _search(ctx, [question], k, trace)
        trace.step("retrieve", queries=[question], evidence=[_provenance(p) for p in evidence])
        return Hits(_hits(ctx, [(0, p) for p in evidence], k, trace), trace)
    return _run(ctx, question, k, settings, ctx.llm, trace)


def _run(ctx: "Context", question: str, k: int, settings: T2ragSettings, llm: "LLM", trace: Trace) -> Hits:
    found: list[tuple[int, Proposition]] = []     # (round, proposition), for the hits
    try:
        state = _State(triples=_decompose(llm, question, settings, trace))
    except LLMError as exc:
        # No triples to think with: one round of plain proposition retrieval, then
        # an answer from that evidence, so the question still gets one.
        trace.step("decompose_failed", error=str(exc), reply=getattr(exc, "reply", None))
        state = _State(triples=[])
        state.last_evidence = state.evidence = _search(ctx, [question], settings.unique_chunks, trace)
        trace.step("fallback", queries=[question], evidence=[_provenance(p) for p in state.evidence])
        found += [(1, p) for p in state.evidence]
        finish = "llm_error"
    else:
        finish = _loop(ctx, question, settings, llm, state, trace, found)
    trace.outcome["finish"] = finish
    trace.step("finish", reason=finish, triples=state.snapshot(), values=dict(state.values))
    answer = _synthesise(ctx, question, settings, llm, state, natural=finish == "natural", trace=trace)
    return Hits(_hits(ctx, found, k, trace, fill_query=question), trace, answer=answer)


def _loop(ctx: "Context", question: str, settings: T2ragSettings, llm: "LLM", state: _State,
          trace: Trace, found: list[tuple[int, Proposition]]) -> str:
    """Rounds of retrieval and resolution; returns why they stopped."""
    for round_no in range(1, settings.max_rounds + 1):
        before = dataclasses.replace(llm.usage)
        searchable, fuzzy = state.new_searchable(), state.by_state("fuzzy")
        if searchable and frozenset(t.query() for t in searchable) in state.pools:
            state.searched.update(searchable)   # the same search again would find the same
            searchable = state.new_searchable()
        if not searchable and not state.open_names():
            return "natural"
        if not searchable and (not fuzzy or state.fell_back):
            # The open triples were searched (or the question itself was, for the
            # fuzzy ones) and stayed open: the same search would find the same.
            return "early"
        queries = [t.query() for t in searchable] or [question]
        kind = "searchable" if searchable else "fallback"
        state.fell_back |= not searchable
        state.pools.add(frozenset(queries))
        evidence = _search(ctx, queries, settings.unique_chunks, trace)
        state.last_evidence = evidence
        state.evidence += [p for p in evidence if p.triple_id not in {e.triple_id for e in state.evidence}]
        found += [(round_no, p) for p in evidence]
        new, error = _resolve(ctx, llm, question, settings, state, evidence, trace)
        promoted = [str(t) for t in fuzzy if t.filled(new).state != "fuzzy"]
        state.values.update({name: v for name, v in new.items() if name not in state.values})
        # A triple searched in a shared pool that stays open is searched again in
        # the next round's pool (the other queries' propositions may have taken
        # all k chunks); never twice in the same pool of queries.
        retry = [t for t in searchable if len(searchable) > 1 and t.filled(state.values).state == "searchable"]
        state.searched.update(t for t in searchable if t not in retry)
        spent = llm.usage.since(before)
        trace.charge(spent)
        trace.step("round", round=round_no, kind=kind, queries=queries,
                   evidence=[_provenance(p) for p in evidence], new_values=new, promoted=promoted,
                   retry=[str(t) for t in retry],
                   triples=state.snapshot(), error=error,
                   prompt_tokens=spent.prompt_tokens, completion_tokens=spent.completion_tokens)
    if not state.open_names():
        return "natural"
    return "max_rounds"


def _decompose(llm: "LLM", question: str, settings: T2ragSettings, trace: Trace) -> list[QueryTriple]:
    before = dataclasses.replace(llm.usage)
    t0 = time.perf_counter()
    messages = [{"role": "system", "content": prompts.T2RAG_DECOMPOSE_SYSTEM},
                {"role": "user", "content": prompts.T2RAG_DECOMPOSE_USER.format(question=question)}]
    try:
        triples = llm.structured(messages, lambda v: parse_decomposition(v, settings.max_triples),
                                 schema=prompts.T2RAG_DECOMPOSE_REPLY)
    finally:
        spent = llm.usage.since(before)
        trace.charge(spent)
        trace.timings_ms["decompose"] = (time.perf_counter() - t0) * 1000
    trace.step("decompose", triples=[{"triple": str(t), "state": t.state} for t in triples],
               prompt_tokens=spent.prompt_tokens, completion_tokens=spent.completion_tokens)
    return triples


def _search(ctx: "Context", queries: list[str], unique_chunks: int, trace: Trace) -> list[Proposition]:
    """One pool of propositions for all the queries, until it covers ``unique_chunks`` chunks (SQL)."""
    t0 = time.perf_counter()
    evidence = ctx.propositions(queries, unique_chunks=unique_chunks)
    trace.time("retrieve", t0)
    return evidence


def _resolve(ctx: "Context", llm: "LLM", question: str, settings: T2ragSettings, state: _State,
             evidence: list[Proposition], trace: Trace) -> tuple[dict[str, str], str | None]:
    """New placeholder values from one round's evidence, and the error if the
    resolver's reply was unusable (then no values: the loop will stop early)."""
    open_names = state.open_names()
    user = prompts.T2RAG_RESOLVE_USER.format(
        question=question,
        triples="\n".join(f"- {t}" for t in state.current() if t.state != "resolved"),
        known=_known(state) or "(none yet)",
        evidence=_evidence_text(ctx, evidence, settings, passages=settings.passages))
    messages = [{"role": "system", "content": prompts.T2RAG_RESOLVE_SYSTEM}, {"role": "user", "content": user}]
    t0 = time.perf_counter()
    try:
        return llm.structured(messages, lambda v: parse_values(v, open_names),
                              schema=prompts.T2RAG_RESOLVE_REPLY), None
    except LLMError as exc:
        return {}, f"{type(exc).__name__}: {exc}"
    finally:
        trace.time("resolve", t0)


def _synthesise(ctx: "Context", question: str, settings: T2ragSettings, llm: "LLM", state: _State,
                *, natural: bool, trace: Trace) -> str | None:
    before = dataclasses.replace(llm.usage)
    facts = "\n".join(f"- {t}" for t in state.by_state("resolved")) or "(none)"
    if natural:
        user = prompts.T2RAG_ANSWER_USER.format(question=question, facts=facts)
    else:
        open_triples = "\n".join(f"- {t}" for t in state.current() if t.state != "resolved") or "(none)"
        user = prompts.T2RAG_ANSWER_FORCED_USER.format(
            question=question, facts=facts, open=open_triples,
            evidence=_evidence_text(ctx, state.evidence, settings, passages=settings.passages,
                                    passage_source=state.last_evidence))
    messages = [{"role": "system", "content": prompts.T2RAG_ANSWER_SYSTEM}, {"role": "user", "content": user}]
    t0 = time.perf_counter()
    try:
        answer = short_answer(llm.chat(messages).text)
        error = None if answer else "empty reply"
    except LLMError as exc:
        answer, error = None, f"{type(exc).__name__}: {exc}"
    trace.timings_ms["answer"] = (time.perf_counter() - t0) * 1000
    spent = llm.usage.since(before)
    trace.charge(spent)
    trace.step("answer", context="resolved triples" if natural else "triples + evidence", answer=answer,
               error=error, prompt_tokens=spent.prompt_tokens, completion_tokens=spent.completion_tokens)
    return answer


def _known(state: _State) -> str:
    return ", ".join(f"{name} = {value}" for name, value in state.values.items())


def _evidence_text(ctx: "Context", evidence: list[Proposition], settings: T2ragSettings, *,
                   passages: bool, passage_source: list[Proposition] | None = None) -> str:
    """Numbered propositions, then (optionally) the chunks they come from, each cut
    to ``passage_chars``: the paper keeps chunks because triples lose detail."""
    lines = [f"- {p.text} [{p.title}]" for p in evidence] or ["(no evidence found)"]
    if passages and evidence:
        chunk_ids = list(dict.fromkeys(p.chunk_id for p in (passage_source or evidence)))
        texts = ctx.chunk_texts(chunk_ids)
        lines.append("Passages:")
        for cid in chunk_ids:
            title, text = texts[cid]
            text = " ".join(text.split())
            cut = text if len(text) <= settings.passage_chars else text[: settings.passage_chars] + "..."
            lines.append(f"[{title}] {cut}")
    return "\n".join(lines)


def _provenance(p: Proposition) -> dict[str, Any]:
    return {"proposition": p.text, "score": round(p.score, 4), "chunk_id": p.chunk_id,
            "document": p.external_id, "title": p.title}


def _in_turn(found: list[tuple[int, Proposition]]) -> list[tuple[int, Proposition]]:
    """The evidence with each (round, query)'s distinct chunks taken in turn: every
    query's best chunk, then every query's second, ... Each round's pool covers k
    chunks, so in plain found order the chunks of round 2 (the second hop) always
    ranked after round 1's k."""
    groups: dict[tuple[int, int], list[tuple[int, Proposition]]] = {}
    seen: set[tuple[int, int, int]] = set()
    for round_no, p in found:   # in pool order: a chunk's first proposition is its best for the query
        if (round_no, p.query, p.chunk_id) not in seen:
            seen.add((round_no, p.query, p.chunk_id))
            groups.setdefault((round_no, p.query), []).append((round_no, p))
    lists = [groups[key] for key in sorted(groups)]
    return [g[rank] for rank in range(max((len(g) for g in lists), default=0)) for g in lists if rank < len(g)]


def _hits(ctx: "Context", found: list[tuple[int, Proposition]], k: int, trace: Trace,
          fill_query: str | None = None) -> list[Hit]:
    """The source chunks of the evidence, each (round, query)'s taken in turn (a
    chunk keeps its first round and best similarity), topped up to k from the
    question's propositions."""
    best: dict[int, tuple[int, Proposition]] = {}
    for round_no, p in _in_turn(found):
        if p.chunk_id not in best:
            best[p.chunk_id] = (round_no, p)
        elif p.score > best[p.chunk_id][1].score:
            best[p.chunk_id] = (best[p.chunk_id][0], p)
    chosen = list(best.items())[:k]
    if fill_query is not None and len(chosen) < k:
        filled = 0
        for p in ctx.propositions(fill_query, unique_chunks=k):
            if len(chosen) >= k:
                break
            if p.chunk_id not in best:
                best[p.chunk_id] = (0, p)
                chosen.append((p.chunk_id, (0, p)))
                filled += 1
        trace.step("fill", added=filled, note="chunks from the question's own propositions, after the rounds' evidence")
    return ctx.hits([c for c, _ in chosen], [p.score for _, (_, p) in chosen],
                    [{"round": r, "via": p.text, "cosine": p.score} for _, (r, p) in chosen], trace)


SPEC = MethodSpec(name="t2rag", run=run, settings=T2ragSettings(), needs_triples=True, takes_llm=True,
                  answers=True, filters=True)
