"""The oracle reader: the reply an ideal reader gives to each prompt of T2RAG,
CIRAG and ThreadRAG (see ``pgrag.bench.oracle``), and the leak guard every reply
passes."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ... import prompts
from ...exceptions import PgragError
from .gold import Gold
from .matching import contains, normalise
from .plan import Plan, answer_aliases, plan_for
from .reading import Reading, evidence_lines, read

REFUSAL = {"cirag_answer": "Unanswerable", "t2rag_answer": "unknown", "t2rag_answer_forced": "unknown",
           "threadrag_answer": "unknown"}
ANSWER_KINDS = tuple(REFUSAL)


class OracleLeak(PgragError):
    """A reply would carry a value that its prompt does not contain."""


class OracleCannotAnswer(PgragError):
    """The request is not one the oracle reads (an extraction prompt, an unknown question)."""



@dataclass
class Answered:
    kind: str
    reply: str
    values: list[str]           # the values the reply carries (checked by the guard)
    supported: list[int]        # gold triples the prompt's evidence supports
    titles: list[str]           # gold titles the prompt mentions


class Oracle:
    """Answers chat requests of the three methods from gold records (see the module doc)."""

    def __init__(self, golds: Sequence[Gold]) -> None:
        self.plans = {normalise(g.question): plan_for(g) for g in golds}
        self.log: dict[str, list[dict[str, Any]]] = {}
        self._lock = threading.Lock()

    def plan(self, question: str) -> Plan:
        plan = self.plans.get(normalise(question))
        if plan is None:
            raise OracleCannotAnswer(f"the oracle has no gold record for the question {question[:80]!r}")
        return plan

    def answer(self, messages: list[dict[str, str]]) -> str:
        """The reply to a chat request (``OracleCannotAnswer``, ``OracleLeak``)."""
        found = prompts.identify(messages)
        if found is None:
            raise OracleCannotAnswer("not a prompt of pgrag.prompts")
        kind, fields = found
        if "question" not in fields:
            raise OracleCannotAnswer(f"the oracle reads; it does not answer {kind!r} prompts")
        plan = self.plan(fields["question"])
        out = getattr(self, "_" + kind)(plan, fields)
        prompt = "\n".join(m.get("content", "") for m in messages)
        guard(prompt, out.values, yes_no_ok=plan.yes_no and kind in ANSWER_KINDS)
        out.titles = [t for t in plan.gold.supporting_titles if contains(prompt, t)]
        with self._lock:
            self.log.setdefault(plan.gold.id, []).append({
                "kind": kind, "supported": out.supported, "triples": len(plan.triples),
                "titles": out.titles, "reply": out.reply})
        return out.reply

    # -- T2RAG
    def _t2rag_decompose(self, plan: Plan, fields: dict[str, str]) -> Answered:
        def element(i: int) -> str:
            e = plan.entities[i]
            return e.placeholder or e.asked or e.name

        triples = [[element(s), r, element(o)] for s, r, o in plan.triples]
        values = [x for t in triples for x in (t[0], t[2]) if not x.startswith("?")]
        return Answered("t2rag_decompose", json.dumps({"triples": triples}, ensure_ascii=False), values, [], [])

    def _t2rag_resolve(self, plan: Plan, fields: dict[str, str]) -> Answered:
        open_names = set(re.findall(r"\?[\w\-]+", fields["triples"]))
        known_names = set(re.findall(r"(\?[\w\-]+) = ", fields["known"]))
        by_name = {e.placeholder: i for i, e in enumerate(plan.entities) if e.placeholder}
        known = {by_name[n] for n in known_names if n in by_name}
        reading = read(plan, evidence_lines(fields["evidence"]), known)
        values = {plan.entities[i].placeholder: reading.surface[i] for i in reading.known
                  if plan.entities[i].placeholder in open_names and i not in known}
        return Answered("t2rag_resolve", json.dumps({"values": values}, ensure_ascii=False),
                        list(values.values()), sorted(reading.supported), [])

    def _final(self, kind: str, plan: Plan, lines: list[str]) -> Answered:
        reading = read(plan, lines)
        if len(reading.supported) == len(plan.triples):
            answer = plan.gold.answer
            if plan.gold.answer_aliases and not any(contains(line, answer) for line in lines):
                answer = next((a for a in answer_aliases(plan) if any(contains(ln, a) for ln in lines)), answer)
            return Answered(kind, answer, [answer], sorted(reading.supported), [])
        return Answered(kind, REFUSAL[kind], [], sorted(reading.supported), [])

    def _t2rag_answer(self, plan: Plan, fields: dict[str, str]) -> Answered:
        return self._final("t2rag_answer", plan, evidence_lines(fields["facts"]))

    def _t2rag_answer_forced(self, plan: Plan, fields: dict[str, str]) -> Answered:
        return self._final("t2rag_answer_forced", plan,
                           evidence_lines(fields["facts"], fields["open"], fields["evidence"]))

    # -- CIRAG
    def _cirag_integrate(self, plan: Plan, fields: dict[str, str]) -> Answered:
        history = [] if fields["history"] == prompts.CIRAG_NO_HISTORY else evidence_lines(fields["history"])
        candidates = evidence_lines(fields["candidates"])
        reading = read(plan, history + candidates)
        core: list[int] = []
        values: list[str] = []
        for t in sorted(reading.supported):
            for n in reading.lines[t]:
                if n >= len(history):
                    m = re.match(r"\s*(\d+)\.", candidates[n - len(history)])
                    if m and int(m.group(1)) not in core:
                        core.append(int(m.group(1)))
        found = [plan.triples[t] for t in sorted(reading.supported)]
        facts = "; ".join(f"{reading.surface[s]} {r}: {reading.surface[o]}" for s, r, o in found)
        asked = {normalise(q) for q in re.findall(r"\(query: (.*?)\):", fields["history"])}
        asked.add(normalise(fields["query"]))
        hops = [_hop_query(plan, t, reading) for t in range(len(plan.triples)) if t not in reading.supported]
        queries = [h for h in hops if h is not None]
        nxt = next((q for q, _ in queries if normalise(q) not in asked), queries[0][0] if queries else None)
        values += [reading.surface[e] for s, _r, o in found for e in (s, o)]
        values += [v for q, v in queries if q == nxt]
        missing = "nothing" if not queries else nxt
        thought = f"Found: {facts or 'nothing yet'}. Missing: {missing}."
        reply = json.dumps({"thought": thought, "core": core, "next_query": nxt}, ensure_ascii=False)
        return Answered("cirag_integrate", reply, values, sorted(reading.supported), [])

    def _cirag_answer(self, plan: Plan, fields: dict[str, str]) -> Answered:
        return self._final("cirag_answer", plan, evidence_lines(fields["evidence"]))

    # -- ThreadRAG
    def _threadrag_entities(self, plan: Plan, fields: dict[str, str]) -> Answered:
        names = [e.asked for e in plan.entities if e.asked]
        return Answered("threadrag_entities", json.dumps({"entities": names}, ensure_ascii=False), names, [], [])

    def _threadrag_sufficient(self, plan: Plan, fields: dict[str, str], kind: str = "threadrag_sufficient") -> Answered:
        reading = read(plan, evidence_lines(fields["context"]))
        if len(reading.supported) == len(plan.triples):
            return Answered(kind, json.dumps({"sufficient": True}), [], sorted(reading.supported), [])
        missing: list[str] = []
        for t, (s, _r, o) in enumerate(plan.triples):
            if t in reading.supported:
                continue
            end = s if s in reading.known else o if o in reading.known else None
            if end is not None and reading.surface[end] not in missing:
                missing.append(reading.surface[end])
        reply = json.dumps({"sufficient": False, "missing": missing}, ensure_ascii=False)
        return Answered(kind, reply, missing, sorted(reading.supported), [])

    # -- TIGRAG's reader: the same judgement as ThreadRAG's sufficiency check
    def _tigrag_reader(self, plan: Plan, fields: dict[str, str]) -> Answered:
        return self._threadrag_sufficient(plan, fields, "tigrag_reader")

    def _threadrag_answer(self, plan: Plan, fields: dict[str, str]) -> Answered:
        return self._final("threadrag_answer", plan, evidence_lines(fields["context"]))


def _hop_query(plan: Plan, t: int, reading: Reading) -> tuple[str, str] | None:
    """The question for an unsupported triple with a known end, and the value it names."""
    s, r, o = plan.triples[t]
    if s in reading.known:
        return f"What is the {r} of {reading.surface[s]}?", reading.surface[s]
    if o in reading.known:
        return f"Whose {r} is {reading.surface[o]}?", reading.surface[o]
    return None


def guard(prompt: str, values: Iterable[str], *, yes_no_ok: bool = False) -> None:
    """``OracleLeak`` unless every value occurs in the prompt (normalised)."""
    for value in values:
        if yes_no_ok and normalise(value) in ("yes", "no"):
            continue
        if not contains(prompt, value):
            raise OracleLeak(f"the oracle's reply would carry {value!r}, which its prompt does not contain")
