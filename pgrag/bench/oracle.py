"""An oracle reader: an OpenAI-compatible chat server that answers the prompts
of T2RAG, CIRAG and ThreadRAG as an ideal reader of each prompt would, from the
gold record of the question (2WikiMultiHopQA's ``evidences`` triples and
``answer``). ``pgrag eval --oracle`` starts one on 127.0.0.1 and points the
answering methods at it, so their loops (parsers, state machines, stop rules)
run as with a real model and the figures measure the loop's retrieval under
ideal reasoning: an upper bound that separates retrieval design from model
quality.

What the oracle may use:

- the gold record of the question, found by the question text of the prompt
  (every prompt of the three methods carries it);
- the prompt, and nothing else: it never reads the corpus.

How it reads. Each gold triple (subject, relation, object) is *supported* by
a prompt when one line of the prompt's evidence names both its subject and its
object (normalised match, SQuAD normalisation; an entity may have several
surface forms: the gold ones, the question's own wording of a question entity).
An entity is *known* when the question names it, or it ends a supported triple
whose other end is known (a fixed point, so a two-hop chain needs both hops in
the evidence). Then:

- decomposition (T2RAG): the gold triples, the entities the question does not
  name replaced by shared named placeholders (``?mother``);
- resolution (T2RAG): the placeholders whose entity became known from the
  evidence lines; the others are left out (not known yet);
- integration (CIRAG): the candidates that support a triple with a known end are
  core; the next query asks for the first unsupported triple with a known end
  ("What is the <relation> of <entity>?"), or none when every triple is
  supported;
- sufficiency (ThreadRAG): sufficient when every triple is supported, else the
  known ends of the unsupported triples are "missing";
- entities (ThreadRAG): the question's entities;
- final answers: the gold answer when every triple is supported by the
  evidence of the prompt, else the method's refusal ("Unanswerable" for CIRAG,
  "unknown" otherwise).

The leak guard: every value a reply carries (an entity, an answer) must occur
in the prompt (normalised), yes/no excepted; a reply that would break this
raises ``OracleLeak`` instead of being sent. Relations and placeholder names
are the reader's vocabulary, not values.

The oracle keeps a log of what each prompt contained (which gold triples it
supported, which gold titles it mentioned) so that a failure can be traced to
where the loop lost the second hop.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import string
import threading
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import prompts
from ..exceptions import InputError, PgragError
from .chat_server import ChatServer, Status

REFUSAL = {"cirag_answer": "Unanswerable", "t2rag_answer": "unknown", "t2rag_answer_forced": "unknown",
           "threadrag_answer": "unknown"}
ANSWER_KINDS = tuple(REFUSAL)


class OracleLeak(PgragError):
    """A reply would carry a value that its prompt does not contain."""


class OracleCannotAnswer(PgragError):
    """The request is not one the oracle reads (an extraction prompt, an unknown question)."""


# -- gold records -------------------------------------------------------------

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


# -- normalised matching --------------------------------------------------------

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans({c: " " for c in string.punctuation + "‘’“”–—"})


def normalise(text: str) -> str:
    """SQuAD answer normalisation (lower case, no punctuation or articles), accents
    kept, words joined by single spaces."""
    text = unicodedata.normalize("NFC", text).casefold().translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def contains(haystack: str, needle: str) -> bool:
    """Whether ``needle`` occurs in ``haystack`` as whole words, both normalised."""
    n = normalise(needle)
    return bool(n) and f" {n} " in f" {normalise(haystack)} "


def _key(surface: str) -> str:
    return normalise(re.sub(r"\([^)]*\)", " ", surface))


def _same(a: str, b: str) -> bool:
    """Two gold surfaces of one entity: equal keys, or one a prefix of the other
    at a word boundary ("Christian August" / "Christian August, Prince of ...")."""
    ka, kb = _key(a), _key(b)
    return bool(ka and kb) and (ka == kb or ka.startswith(kb + " ") or kb.startswith(ka + " "))


# -- the reading plan of one question -------------------------------------------

@dataclass(kw_only=True)
class Entity:
    surfaces: list[str]                 # gold forms first; the question's wording when it names it
    asked: str | None = None            # the question's wording, when the question names it
    placeholder: str | None = None      # T2RAG's name for it when the question does not

    @property
    def name(self) -> str:
        return self.surfaces[0]

    @property
    def named(self) -> bool:
        return self.asked is not None


@dataclass(kw_only=True)
class Plan:
    gold: Gold
    entities: list[Entity]
    triples: list[tuple[int, str, int]]        # (subject entity, relation, object entity)

    @property
    def yes_no(self) -> bool:
        return normalise(self.gold.answer) in ("yes", "no")


def _slug(relation: str) -> str:
    return "?" + ("_".join(re.sub(r"[^\w]+", " ", relation.casefold()).split()) or "x")


_QUESTION_WORDS = {"who", "whom", "whose", "what", "which", "when", "where", "why", "how", "did", "does", "do",
                   "is", "are", "was", "were"}
_WORDS = re.compile(r"[^\W_]+(?:['’][^\W_]+)*", re.UNICODE)


def question_mention(question: str, surface: str) -> str | None:
    """The question's own wording of an entity it names in another form ("Maurice,
    Prince Of Orange" for "Maurice of Nassau"): the window of question words
    with the best word overlap (F1 at least 0.5), extended over following
    capitalised words; a final possessive is dropped."""
    words = [(m.start(), m.end(), normalise(re.sub(r"['’]s$", "", m.group()))) for m in _WORDS.finditer(question)]
    target = normalise(surface).split()
    if not words or not target:
        return None
    best: tuple[float, int, int, int] | None = None
    for i in range(len(words)):
        for j in range(i, min(len(words), i + len(target) + 3)):
            window = [w for _, _, w in words[i:j + 1]]
            common = sum(min(window.count(t), target.count(t)) for t in set(target))
            if not common:
                continue
            p, r = common / len(window), common / len(target)
            f1 = 2 * p * r / (p + r)
            if best is None or (f1, j - i) > (best[0], best[2] - best[1]):
                best = (f1, i, j, common)
    if best is None or best[0] < 0.5:
        return None
    _, i, j = best[:3]

    def capital(n: int) -> bool:
        return question[words[n][0]].isupper() or question[words[n][0]].isdigit()

    while i < j and not capital(i):                 # "of Maurice" -> "Maurice"
        i += 1
    while i > 1 and capital(i - 1) and words[i - 1][2] not in _QUESTION_WORDS:
        i -= 1                                      # "Ferdinand" -> "Prince Ferdinand"
    while j + 1 < len(words) and (capital(j + 1) or (
            words[j + 1][2] == "of" and j + 2 < len(words) and capital(j + 2))):
        j += 1                                      # "Maurice, Prince Of" -> "... Of Orange"
    text = question[words[i][0]:words[j][1]]
    return re.sub(r"['’]s$", "", text).strip() or None


def _clean(surface: str) -> str:
    return " ".join(surface.split()).strip("\"'“”‘’ ")


def plan_for(gold: Gold) -> Plan:
    """Entities and triples of a gold record, each entity marked named (the
    question names it) or given a placeholder, from the record alone."""
    entities: list[Entity] = []

    def entity(surface: str) -> int:
        for i, e in enumerate(entities):
            if any(_same(surface, s) for s in e.surfaces):
                if surface not in e.surfaces:
                    e.surfaces.append(surface)
                return i
        entities.append(Entity(surfaces=[surface]))
        return len(entities) - 1

    # Subjects first; an object is the entity of a subject when it is one (the
    # bridge of a chain, which the question's structure implies), else an entity
    # of its own: two values that happen to be equal (the same country) must not
    # share a placeholder, or the decomposition would tell the answer.
    subjects = [entity(_clean(s)) for s, _r, _o in gold.evidences]
    n_subjects = len(entities)
    triples = []
    for s, (_s, r, o) in zip(subjects, gold.evidences):
        o = _clean(o)
        match = next((i for i in range(n_subjects) if any(_same(o, x) for x in entities[i].surfaces)), None)
        if match is None:
            entities.append(Entity(surfaces=[o]))
            match = len(entities) - 1
        elif o not in entities[match].surfaces:
            entities[match].surfaces.append(o)
        triples.append((s, r, match))
    objects = {o for _, _, o in triples}
    for i, e in enumerate(entities):
        e.asked = next((s for s in e.surfaces if contains(gold.question, s)), None)
        if e.asked is None and i not in objects:       # a question entity worded otherwise
            mention = question_mention(gold.question, e.name)
            if mention:
                e.surfaces.append(mention)
                e.asked = mention
    taken: set[str] = set()
    for i, e in enumerate(entities):
        if e.named:
            continue
        relation = next((r for _, r, o in triples if o == i), "entity")
        name, n = _slug(relation), 1
        while name in taken:
            n += 1
            name = f"{_slug(relation)}_{n}"
        taken.add(name)
        e.placeholder = name
    return Plan(gold=gold, entities=entities, triples=triples)


# -- reading a prompt -----------------------------------------------------------

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


def _lines(*texts: str) -> list[str]:
    return [ln for text in texts for ln in text.splitlines() if ln.strip()]


# -- the reader -------------------------------------------------------------------

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
        reading = read(plan, _lines(fields["evidence"]), known)
        values = {plan.entities[i].placeholder: reading.surface[i] for i in reading.known
                  if plan.entities[i].placeholder in open_names and i not in known}
        return Answered("t2rag_resolve", json.dumps({"values": values}, ensure_ascii=False),
                        list(values.values()), sorted(reading.supported), [])

    def _final(self, kind: str, plan: Plan, lines: list[str]) -> Answered:
        reading = read(plan, lines)
        if len(reading.supported) == len(plan.triples):
            return Answered(kind, plan.gold.answer, [plan.gold.answer], sorted(reading.supported), [])
        return Answered(kind, REFUSAL[kind], [], sorted(reading.supported), [])

    def _t2rag_answer(self, plan: Plan, fields: dict[str, str]) -> Answered:
        return self._final("t2rag_answer", plan, _lines(fields["facts"]))

    def _t2rag_answer_forced(self, plan: Plan, fields: dict[str, str]) -> Answered:
        return self._final("t2rag_answer_forced", plan, _lines(fields["facts"], fields["open"], fields["evidence"]))

    # -- CIRAG
    def _cirag_integrate(self, plan: Plan, fields: dict[str, str]) -> Answered:
        history = [] if fields["history"] == prompts.CIRAG_NO_HISTORY else _lines(fields["history"])
        candidates = _lines(fields["candidates"])
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
        return self._final("cirag_answer", plan, _lines(fields["evidence"]))

    # -- ThreadRAG
    def _threadrag_entities(self, plan: Plan, fields: dict[str, str]) -> Answered:
        names = [e.asked for e in plan.entities if e.asked]
        return Answered("threadrag_entities", json.dumps({"entities": names}, ensure_ascii=False), names, [], [])

    def _threadrag_sufficient(self, plan: Plan, fields: dict[str, str]) -> Answered:
        reading = read(plan, _lines(fields["context"]))
        if len(reading.supported) == len(plan.triples):
            return Answered("threadrag_sufficient", json.dumps({"sufficient": True}), [], sorted(reading.supported), [])
        missing: list[str] = []
        for t, (s, _r, o) in enumerate(plan.triples):
            if t in reading.supported:
                continue
            end = s if s in reading.known else o if o in reading.known else None
            if end is not None and reading.surface[end] not in missing:
                missing.append(reading.surface[end])
        reply = json.dumps({"sufficient": False, "missing": missing}, ensure_ascii=False)
        return Answered("threadrag_sufficient", reply, missing, sorted(reading.supported), [])

    def _threadrag_answer(self, plan: Plan, fields: dict[str, str]) -> Answered:
        return self._final("threadrag_answer", plan, _lines(fields["context"]))


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


# -- the server ---------------------------------------------------------------------

def model_name() -> str:
    """The oracle's model name: it changes with this file, so cached replies of an
    older oracle are never reused."""
    return "pgrag-oracle-" + hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]


class OracleServer(ChatServer):
    """The oracle over HTTP on 127.0.0.1, speaking the OpenAI chat-completions
    protocol (``pgrag.bench.chat_server``); use as a context manager."""

    def __init__(self, golds: Sequence[Gold], *, model: str | None = None) -> None:
        self.oracle = Oracle(golds)
        self.errors: list[str] = []
        # One model name per server: replies are never served from an earlier
        # run's cache, so the oracle's log sees every prompt (``forget`` drops them).
        super().__init__(self._reply, model=model or f"{model_name()}-{secrets.token_hex(4)}")

    def _reply(self, body: dict[str, Any]) -> str | Status:
        try:
            return self.oracle.answer(body.get("messages") or [])
        except PgragError as exc:
            self.errors.append(f"{type(exc).__name__}: {exc}")
            return Status(400, str(exc), "invalid_request_error")

    def settings(self) -> Any:
        from ..llm import LLMSettings

        return LLMSettings(base_url=self.base_url, model=self.model, api_key="oracle", max_retries=0)

    def forget(self, db: Any, corpus_id: int) -> None:
        """Delete this server's replies from a corpus's LLM cache."""
        from ..queries import query

        with db.transaction() as conn:
            conn.execute(query("llm_cache_forget_model"), {"corpus_id": corpus_id, "model": self.model})

    def __enter__(self) -> "OracleServer":
        super().__enter__()
        return self


# -- where a loop lost the hop ---------------------------------------------------------

LOOP_METHODS = ("t2rag", "cirag", "threadrag")


def diagnose(calls: list[dict[str, Any]], triples: int, *, correct: bool) -> str:
    """Where a failed question lost its evidence, from the oracle's log of the
    method's prompts: ``no_llm_call`` (the loop never asked), ``never_retrieved``
    (some gold triple was supported by no prompt: the evidence never came),
    ``dropped`` (every triple was in some prompt but no answer prompt held them
    all: retrieved, then not carried forward), ``ranked_out`` (answered, but a
    gold document is not among the top-k hits), ``answered`` (the answer prompt
    held everything; the answer still missed, e.g. a normalisation mismatch)."""
    if not calls:
        return "no_llm_call"
    if correct:
        return "ranked_out"
    seen = {t for c in calls for t in c["supported"]}
    if len(seen) < triples:
        return "never_retrieved"
    if not any(c["kind"] in ANSWER_KINDS and len(c["supported"]) == triples for c in calls):
        return "dropped"
    return "answered"


def failures(report: dict[str, Any], log: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The per-question records of the loop methods' failures (EM below 100, or
    a gold document missing from the top max-k documents), each with the
    method's trace (taken out of ``report["per_question"]``), the oracle's
    calls for it and a ``diagnose`` label; also sets ``report["failures"]``
    (label counts per method)."""
    top = f"recall@{max(report['ks'])}"
    out: list[dict[str, Any]] = []
    counts: dict[str, dict[str, int]] = {}
    for row in report["per_question"]:
        trace = row.pop("trace", None)
        if row["method"] not in LOOP_METHODS:
            continue
        correct = (row.get("em") or 0) >= 100
        if correct and row[top] >= 100:
            continue
        calls = [c for c in log.get(row["id"], []) if c["kind"].startswith(row["method"] + "_")]
        triples = calls[0]["triples"] if calls else 0
        label = diagnose(calls, triples, correct=correct)
        counts.setdefault(row["method"], {}).setdefault(label, 0)
        counts[row["method"]][label] += 1
        out.append({**row, "diagnosis": label, "oracle_calls": calls, "trace": trace})
    report["failures"] = {m: dict(sorted(c.items())) for m, c in counts.items()}
    return out
