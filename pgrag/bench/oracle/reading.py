"""Reading a prompt against a plan: which entities its evidence makes known and
which gold triples it supports, to a fixed point."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from .matching import contains
from .plan import Entity, Plan


@dataclass(kw_only=True)
class Reading:
    """What a prompt's evidence establishes for a plan."""

    known: set[int]                     # entities
    supported: set[int]                 # triples
    surface: dict[int, str] = field(default_factory=dict)     # the form a known entity has in the evidence
    lines: dict[int, list[int]] = field(default_factory=dict)  # triple -> evidence lines supporting it


def _mention(entity: Entity, line: str) -> str | None:
    return next((s for s in entity.surfaces if contains(line, s)), None)


def read(plan: Plan, lines: Sequence[str], known: Iterable[int] = ()) -> Reading:
    """Known entities (from the question, ``known`` and the evidence ``lines``)
    and supported triples, to a fixed point."""
    reading = Reading(known={i for i, e in enumerate(plan.entities) if e.named} | set(known), supported=set())
    for i in reading.known:
        reading.surface.setdefault(i, plan.entities[i].asked or plan.entities[i].name)
    for t, (s, _r, o) in enumerate(plan.triples):
        for n, line in enumerate(lines):
            ms, mo = _mention(plan.entities[s], line), _mention(plan.entities[o], line)
            if ms and mo:
                reading.lines.setdefault(t, []).append(n)
                reading.surface.setdefault(-1 - t * 2, ms)     # scratch: per-triple surfaces
                reading.surface.setdefault(-2 - t * 2, mo)
    changed = True
    while changed:
        changed = False
        for t, (s, _r, o) in enumerate(plan.triples):
            if t in reading.supported or t not in reading.lines:
                continue
            if s in reading.known or o in reading.known:
                reading.supported.add(t)
                for end, scratch in ((s, -1 - t * 2), (o, -2 - t * 2)):
                    if end not in reading.known:
                        reading.known.add(end)
                        reading.surface[end] = reading.surface[scratch]
                changed = True
    reading.surface = {k: v for k, v in reading.surface.items() if k >= 0}
    return reading


def evidence_lines(*texts: str) -> list[str]:
    """The non-blank lines of ``texts``: the evidence lines a prompt field holds."""
    return [ln for text in texts for ln in text.splitlines() if ln.strip()]
