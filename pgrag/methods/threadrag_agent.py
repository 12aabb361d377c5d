"""What ThreadRAG's agent asks the LLM (../shared/papers/threadrag.md §3.3): the
question's entities (spaCy's and capitalised names without an LLM), whether the
linearised paths suffice and what is missing, and the answer from the paths."""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Any

from .. import nlp, prompts
from ..llm import LLMError, short_answer
from ..results import Trace
from .threadrag_graph import Path
from .threadrag_settings import ThreadragSettings

if TYPE_CHECKING:
    from ..context import Context
    from ..llm import LLM


def question_entities(ctx: "Context", question: str, llm: "LLM | None", settings: ThreadragSettings,
                      trace: Trace) -> list[str]:
    if llm is not None:
        t0 = time.perf_counter()
        try:
            found = llm.structured([{"role": "user", "content": prompts.THREADRAG_ENTITIES.format(
                question=question)}], parse_entities, schema=prompts.THREADRAG_ENTITIES_REPLY)
            trace.time("llm", t0)
            trace.step("entities", source="llm", entities=found)
            if found:
                return found
        except LLMError as exc:
            trace.time("llm", t0)
            trace.step("entities", source="llm", error=str(exc)[:200], fallback="spaCy")
    t0 = time.perf_counter()
    mentions = nlp.entities([question], ctx.spacy_model)[0]
    found = list(dict.fromkeys(" ".join(e.text.split()) for e in mentions
                               if e.label in settings.entity_labels))
    if settings.capitalised:
        found = merge_names(found, capitalised_names(question))
    trace.time("entities", t0)
    trace.step("entities", source="spacy", entities=found)
    return found


_QUESTION_WORDS = {"who", "whom", "whose", "what", "which", "when", "where", "why", "how", "is", "are", "was",
                   "were", "did", "do", "does", "in", "the", "a", "an"}
_WORD = re.compile(r"[\w'’.-]+|[^\w\s]")


def capitalised_names(question: str) -> list[str]:
    """Runs of capitalised words (the question's first word excepted), e.g.
    "Lothair II" or "Engal Aasan": the small spaCy model misses many names in
    questions (lower-case context, no sentence around them)."""
    words = _WORD.findall(question)
    names: list[str] = []
    run: list[str] = []
    for i, w in enumerate(words + ["."]):
        capital = w[:1].isupper() or (run and w[:1].isdigit())
        if capital and not (i == 0 and w.lower() in _QUESTION_WORDS):
            run.append(w)
            continue
        if run:
            while run and run[0].lower() in _QUESTION_WORDS:
                run = run[1:]
            if run:
                names.append(" ".join(run))
            run = []
    return names


def merge_names(first: list[str], more: list[str]) -> list[str]:
    """``first``, then the names of ``more`` that neither contain nor are contained in one already kept."""
    out = list(first)
    for name in more:
        if not any(name.casefold() in o.casefold() or o.casefold() in name.casefold() for o in out):
            out.append(name)
    return out


def parse_entities(value: Any) -> list[str]:
    if isinstance(value, dict):
        value = value.get("entities")
    if not isinstance(value, list):
        raise ValueError('expected {"entities": ["...", ...]}')
    return list(dict.fromkeys(str(v).strip() for v in value if str(v).strip()))[:8]


def parse_verdict(value: Any) -> tuple[bool, list[str]]:
    if not isinstance(value, dict) or not isinstance(value.get("sufficient"), bool):
        raise ValueError('expected {"sufficient": true} or {"sufficient": false, "missing": [...]}')
    missing = value.get("missing") or []
    if not isinstance(missing, list):
        raise ValueError('"missing" must be a list of names')
    return value["sufficient"], list(dict.fromkeys(str(m).strip() for m in missing if str(m).strip()))[:5]


def context_text(paths: list[Path], limit: int) -> str:
    """The linearised paths as the LLM sees them, cut at ``limit`` characters."""
    text = "\n\n".join(f"[{p.title}] {p.text}" for p in paths)
    return text[:limit]


def check_sufficiency(llm: "LLM", question: str, paths: list[Path], settings: ThreadragSettings,
                      trace: Trace, round_: int) -> tuple[bool, list[str]] | None:
    t0 = time.perf_counter()
    try:
        sufficient, missing = llm.structured([{"role": "user", "content": prompts.THREADRAG_SUFFICIENT.format(
            context=context_text(paths, settings.max_context_chars), question=question)}], parse_verdict,
            schema=prompts.THREADRAG_SUFFICIENT_REPLY)
    except LLMError as exc:
        trace.time("llm", t0)
        trace.step("sufficiency", round=round_, error=str(exc)[:200])
        return None
    trace.time("llm", t0)
    trace.step("sufficiency", round=round_, sufficient=sufficient, missing=missing)
    return sufficient, missing


def final_answer(llm: "LLM", question: str, paths: list[Path], settings: ThreadragSettings,
                 trace: Trace) -> str | None:
    t0 = time.perf_counter()
    try:
        reply = llm.chat([{"role": "user", "content": prompts.THREADRAG_ANSWER.format(
            context=context_text(paths, settings.max_context_chars), question=question)}])
    except LLMError as exc:
        trace.time("llm", t0)
        trace.step("answer", error=str(exc)[:200])
        trace.outcome["answer"] = "llm_error"
        return None
    trace.time("llm", t0)
    text = short_answer(reply.text)
    trace.step("answer", text=text)
    return text
