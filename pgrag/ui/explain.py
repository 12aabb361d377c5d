"""What the page shows of one retrieval: the hits with their provenance placed
inside their documents, and the method's path as layers of a picture.

The picture is read from the method's trace (``Hits.trace.steps``):

- TIGRAG: question, seed tokens, top PPR tokens, hop-1 chunks, entities, then the
  same for hop 2;
- ThreadRAG: each round's anchors and the chosen paths over semantic nodes;
- T2RAG and CIRAG: their rounds, with the triples resolved (T2RAG) or kept (CIRAG)
  in each;
- any other method: question, query terms, hits.

Nothing here formats HTML: the templates do, with autoescaping on."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..corpus import Corpus
    from ..llm import LLM
    from ..results import Hit, Hits

CONTEXT_CHARS = 240   # document text shown either side of a hit
TOP_TOKENS = 8        # PPR tokens drawn per hop
MAX_ITEMS = 10        # items drawn per layer


@dataclass(frozen=True, kw_only=True)
class Layer:
    """One column of the picture: what a step of the method produced."""

    key: str             # stable name for tests and CSS, e.g. "hop-1-chunks"
    label: str           # shown above the column
    items: tuple[str, ...]
    hop: int | None = None


@dataclass(frozen=True, kw_only=True)
class Placed:
    """A hit with the document text around it: ``before`` + ``span`` + ``after``
    is a window of the document body, ``span`` the hit's own characters."""

    hit: "Hit"
    before: str
    span: str
    after: str
    cut_before: bool
    cut_after: bool


@dataclass(frozen=True, kw_only=True)
class MethodView:
    method: str
    question: str
    hits: list[Placed]
    layers: list[Layer]
    answer: str | None
    timings_ms: dict[str, float] = field(default_factory=dict)
    llm_calls: int = 0
    outcome: dict[str, str] = field(default_factory=dict)
    error: str | None = None   # the method failed (pgrag's message); nothing else is set


def failed(method: str, question: str, message: str) -> MethodView:
    return MethodView(method=method, question=question, hits=[], layers=[], answer=None, error=message)


def explain(kb: "Corpus", question: str, method: str, k: int = 5, options: dict[str, Any] | None = None,
            llm: "LLM | None" = None) -> MethodView:
    """Run ``method`` on ``kb`` and describe the result for the page."""
    from .. import methods

    opts = dict(options or {})
    if llm is not None and methods.takes_option(method, "llm"):
        opts["llm"] = llm
    hits = kb.retrieve(question, method=method, k=k, **opts)
    return view(kb, question, method, hits)


def view(kb: "Corpus", question: str, method: str, hits: "Hits") -> MethodView:
    bodies = {int(r[0]): r[2] for r in kb.db.fetchall("ui_documents", {
        "corpus_id": kb.id, "document_ids": sorted({h.provenance.document_id for h in hits})})}
    placed = [place(h, bodies.get(h.provenance.document_id, h.text)) for h in hits]
    trace = hits.trace
    return MethodView(method=method, question=question, hits=placed, layers=layers(kb, question, method, hits),
                      answer=hits.answer, timings_ms=dict(trace.timings_ms), llm_calls=trace.llm_calls,
                      outcome=dict(trace.outcome))


def place(hit: "Hit", body: str) -> Placed:
    p = hit.provenance
    start, end = p.char_start, p.char_end
    if not (0 <= start <= end <= len(body)) or body[start:end] != hit.text:
        body, start, end = hit.text, 0, len(hit.text)  # offsets that do not fit: the hit alone
    lo, hi = max(0, start - CONTEXT_CHARS), min(len(body), end + CONTEXT_CHARS)
    return Placed(hit=hit, before=body[lo:start], span=body[start:end], after=body[end:hi],
                  cut_before=lo > 0, cut_after=hi < len(body))


def _short(items: Any, limit: int = MAX_ITEMS) -> tuple[str, ...]:
    out = [str(x) for x in items]
    return tuple(out[:limit] + ([f"... {len(out) - limit} more"] if len(out) > limit else []))


def _chunk_labels(kb: "Corpus", hits: "Hits", chunk_ids: list[int]) -> dict[int, str]:
    titles = {h.provenance.chunk_id: h.title for h in hits}
    missing = [c for c in chunk_ids if c not in titles]
    if missing:
        titles.update({int(r[0]): r[1] for r in kb.db.fetchall("ui_chunk_titles", {
            "corpus_id": kb.id, "chunk_ids": missing})})
    return titles


def _triple(t: Any) -> str:
    if isinstance(t, dict):
        text = t.get("triple") or t.get("text") or ""
        return f"{text} [{t['state']}]" if t.get("state") else str(text)
    return str(t)


def layers(kb: "Corpus", question: str, method: str, hits: "Hits") -> list[Layer]:
    steps = hits.trace.steps
    out = [Layer(key="question", label="question", items=(question,))]
    hops = [s for s in steps if s.get("step") == "hop"]
    if hops:  # TIGRAG and its presets
        chunk_ids = [int(c) for s in hops for c in s.get("top", [])]
        labels = _chunk_labels(kb, hits, chunk_ids)
        entities = {s.get("hop"): s for s in steps if s.get("step") == "entities"}
        for s in hops:
            n = s.get("hop")
            out.append(Layer(key=f"hop-{n}-seeds", label=f"hop {n}: seed tokens", items=_short(s.get("seeds", [])),
                             hop=n))
            out.append(Layer(key=f"hop-{n}-tokens", label=f"hop {n}: top PPR tokens", hop=n,
                             items=_short([f"{t} {w:.3f}" for t, w in s.get("expanded", [])[:TOP_TOKENS]])))
            out.append(Layer(key=f"hop-{n}-chunks", label=f"hop {n}: chunks", hop=n,
                             items=_short([labels.get(int(c), f"chunk {c}") for c in s.get("top", [])])))
            if n in entities:
                out.append(Layer(key=f"hop-{n}-entities", label=f"hop {n}: entities", hop=n,
                                 items=_short(entities[n].get("new", []) or ["(none new)"])))
    elif any(s.get("step") == "pathfinding" for s in steps):  # ThreadRAG
        for s in steps:
            if s.get("step") != "pathfinding":
                continue
            n = s.get("round")
            out.append(Layer(key=f"round-{n}-anchors", label=f"round {n}: anchors", hop=n, items=_short(
                [f"{a.get('title')} #{a.get('ordinal')} ({a.get('energy', 0):.2f})" for a in s.get("anchors", [])])))
            out.append(Layer(key=f"round-{n}-paths", label=f"round {n}: paths over semantic nodes", hop=n, items=_short(
                [f"{p.get('title')} nodes {','.join(str(o) for o in p.get('ordinals', []))} ({p.get('energy', 0):.2f})"
                 for p in s.get("paths", [])])))
    elif method.startswith("t2rag"):  # T2RAG
        for s in steps:
            if s.get("step") == "decompose":
                out.append(Layer(key="decompose", label="question as triples",
                                 items=_short([_triple(t) for t in s.get("triples", [])])))
            elif s.get("step") in ("round", "retrieve", "fallback"):
                n = s.get("round", 1)
                out.append(Layer(key=f"round-{n}-queries", label=f"round {n}: queries", hop=n,
                                 items=_short(s.get("queries", []))))
                out.append(Layer(key=f"round-{n}-evidence", label=f"round {n}: propositions", hop=n,
                                 items=_short([e.get("proposition", "") for e in s.get("evidence", [])])))
                if "triples" in s:
                    out.append(Layer(key=f"round-{n}-triples", label=f"round {n}: triples", hop=n,
                                     items=_short([_triple(t) for t in s.get("triples", [])])))
    elif any(s.get("step") == "construct" for s in steps):  # CIRAG
        kept = {s.get("round"): s for s in steps if s.get("step") == "integrate"}
        for s in steps:
            if s.get("step") != "construct":
                continue
            n = s.get("round")
            out.append(Layer(key=f"round-{n}-query", label=f"round {n}: query", hop=n, items=(str(s.get("query")),)))
            out.append(Layer(key=f"round-{n}-candidates", label=f"round {n}: top triples", hop=n,
                             items=_short(s.get("top", []))))
            if n in kept:
                out.append(Layer(key=f"round-{n}-kept", label=f"round {n}: kept", hop=n,
                                 items=_short(kept[n].get("kept", []) or ["(none)"])))
    else:  # dense, bm25, hybrid: one step
        terms = next((s.get("query_terms") for s in steps if s.get("query_terms")), None)
        if terms:
            out.append(Layer(key="terms", label="query terms", items=_short(terms)))
    out.append(Layer(key="hits", label="hits", items=_short([f"{h.rank}. {h.title}" for h in hits])))
    return out
