"""The reading plan of one question, from its gold record alone: its entities
(named by the question, or given a placeholder) and its triples."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .gold import Gold
from .matching import contains, normalise


def _key(surface: str) -> str:
    return normalise(re.sub(r"\([^)]*\)", " ", surface))


def _same(a: str, b: str, exact: bool = False) -> bool:
    """Two gold surfaces of one entity: equal keys, or (unless ``exact``) one a
    prefix of the other at a word boundary ("Christian August" / "Christian
    August, Prince of ..."). MuSiQue's triples are ``exact``: its decomposition
    copies a bridge's surface, and an answer may extend an earlier one
    ("Toronto" / "Toronto Coach Terminal")."""
    ka, kb = _key(a), _key(b)
    return bool(ka and kb) and (ka == kb or not exact and (ka.startswith(kb + " ") or kb.startswith(ka + " ")))


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


def answer_aliases(plan: Plan) -> list[str]:
    """The aliases that stand for the answer in this plan's evidence (the
    answer entity's surfaces that are aliases), longest first."""
    entity = next((e for e in plan.entities if any(_same(plan.gold.answer, s, plan.gold.exact) for s in e.surfaces)),
                  None)
    return [a for a in accepted_aliases(plan.gold) if entity is not None and a in entity.surfaces]


def accepted_aliases(gold: Gold) -> list[str]:
    """The answer's aliases that may stand for it in evidence: 4 characters or
    more (normalised), longest first ("IN" for India would match every "in")."""
    return sorted((a for a in gold.answer_aliases if len(normalise(a)) >= 4), key=lambda a: -len(normalise(a)))


def _clean(surface: str) -> str:
    return " ".join(surface.split()).strip("\"'“”‘’ ")


def plan_for(gold: Gold) -> Plan:
    """Entities and triples of a gold record, each entity marked named (the
    question names it) or given a placeholder, from the record alone."""
    entities: list[Entity] = []
    exact = gold.exact

    def entity(surface: str) -> int:
        for i, e in enumerate(entities):
            if any(_same(surface, s, exact) for s in e.surfaces):
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
        match = next((i for i in range(n_subjects) if any(_same(o, x, exact) for x in entities[i].surfaces)), None)
        if match is None:
            entities.append(Entity(surfaces=[o]))
            match = len(entities) - 1
        elif o not in entities[match].surfaces:
            entities[match].surfaces.append(o)
        triples.append((s, r, match))
    for subject, form in gold.forms:        # MuSiQue: the other surfaces of a root subject
        e = next((e for e in entities if subject in e.surfaces), None)
        if e is not None and form not in e.surfaces:
            e.surfaces.append(form)
    objects = {o for _, _, o in triples}
    for i, e in enumerate(entities):
        e.asked = next((s for s in e.surfaces if contains(gold.question, s)), None)
        if e.asked is None and i not in objects:       # a question entity worded otherwise
            mention = question_mention(gold.question, e.name)
            if mention:
                e.surfaces.append(mention)
                e.asked = mention
    answer = next((e for e in entities if any(_same(gold.answer, s, exact) for s in e.surfaces)), None)
    if answer is not None:          # MuSiQue's accepted answers, after naming: never a question entity
        others = [s for e in entities if e is not answer for s in e.surfaces]
        answer.surfaces += [a for a in accepted_aliases(gold) if a not in answer.surfaces
                            and not contains(gold.question, a) and not any(_same(a, s, exact) for s in others)]
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


def grounded(plan: Plan) -> bool:
    """Whether the plan's chain is clean: every triple is reachable from the
    entities the question names (were every triple supported) and the answer
    is not one of them."""
    known = {i for i, e in enumerate(plan.entities) if e.named}
    answer = {i for i, e in enumerate(plan.entities)
              if any(_same(plan.gold.answer, s, plan.gold.exact) for s in e.surfaces)}
    reached: set[int] = set()
    while True:
        new = {t for t, (s, _r, o) in enumerate(plan.triples) if t not in reached and (s in known or o in known)}
        if not new:
            break
        reached |= new
        known |= {e for t in new for e in (plan.triples[t][0], plan.triples[t][2])}
    return len(reached) == len(plan.triples) and not any(plan.entities[i].named for i in answer)

