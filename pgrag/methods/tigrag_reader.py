"""TIGRAG's reader (``tigrag-reader``): after a hop, an LLM reads the passages
found so far and names what the next hop should look up, or says they suffice.

The LLM-free ``tigrag`` takes a hop's bridges from the named entities of its best
passage. That loses the bridges that another well-ranked passage names, or that
spaCy does not tag ("alma mater"): with MuSiQue's gold bridges in their place the
same ranking reaches 4-hop R@5 76.7 against 64.2 (docs/methods.md, TIGRAG item
12). A reader supplies them where an LLM is at hand; on any failure the hop keeps
the NER's names, and the trace says why."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .. import prompts
from ..llm import LLMError
from ..results import Trace
from .threadrag_agent import parse_verdict
from .tigrag_chain import canonical, named_in
from .tigrag_settings import TigragSettings

if TYPE_CHECKING:
    from ..context import Context
    from ..llm import LLM


@dataclass
class Reader:
    """The LLM and what it has been shown so far (chunk ids, first shown first)."""

    llm: "LLM"
    settings: TigragSettings        # reader_passages, reader_chars, reader_tokens
    shown: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Verdict:
    sufficient: bool
    names: list[str]                # what the next hop should look up (none when sufficient)


def read(ctx: "Context", reader: Reader, question: str, ranked: list[int], hop: int,
         trace: Trace) -> Verdict | None:
    """The reader's verdict after hop ``hop`` (``ranked``: its chunk ids, best
    first), shown every earlier hop's passages too; None when the LLM failed."""
    reader.shown += [c for c in ranked[: reader.settings.reader_passages] if c not in reader.shown]
    texts = ctx.chunk_texts(reader.shown)
    context = "\n".join(f"[{title}] {' '.join(text.split())}" for title, text in
                        (texts[c] for c in reader.shown if c in texts))[: reader.settings.reader_chars]
    t0 = time.perf_counter()
    try:
        sufficient, names = reader.llm.structured(
            [{"role": "user", "content": prompts.TIGRAG_READER.format(context=context, question=question)}],
            parse_verdict, schema=prompts.TIGRAG_READER_REPLY, max_tokens=reader.settings.reader_tokens)
    except LLMError as exc:
        trace.time("llm", t0)
        trace.step("reader", hop=hop, error=str(exc)[:200], fallback="the NER's names")
        return None
    trace.time("llm", t0)
    # A name in neither the passages nor the question is the model's guess, not a reading.
    said = named_in(f"{context} {question}")
    kept = [n for n in names if said(n) or said(canonical(n))]
    trace.step("reader", hop=hop, shown=list(reader.shown), sufficient=sufficient, names=kept,
               **({"dropped": [n for n in names if n not in kept]} if len(kept) < len(names) else {}))
    return Verdict(sufficient, [] if sufficient else kept)
