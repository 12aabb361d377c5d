"""The oracle's gold records: a question with its answer and its evidence
triples (2WikiMultiHopQA's ``evidences``), read from a questions JSONL file."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...exceptions import InputError


@dataclass(frozen=True, kw_only=True)
class Gold:
    id: str
    question: str
    answer: str
    type: str | None
    evidences: tuple[tuple[str, str, str], ...]
    supporting_titles: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, raw: dict[str, Any], where: str = "") -> "Gold":
        evidences = raw.get("evidences")
        if not isinstance(evidences, list) or not evidences or not all(
                isinstance(t, list) and len(t) == 3 and all(isinstance(e, str) and e.strip() for e in t)
                for t in evidences):
            raise InputError(f"{where}: the oracle needs 'evidences', a list of [subject, relation, object]")
        return cls(id=str(raw["id"]), question=raw["question"], answer=raw["answer"], type=raw.get("type"),
                   evidences=tuple((s, r, o) for s, r, o in evidences),
                   supporting_titles=tuple(raw.get("supporting_titles") or ()))


def load_gold(path: Path) -> list[Gold]:
    """The gold records of a questions JSONL file (with ``evidences``)."""
    out = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            out.append(Gold.from_json(json.loads(line), f"{path}:{n}"))
    return out

