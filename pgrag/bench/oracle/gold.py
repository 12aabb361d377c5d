"""The oracle's gold records: a question with its answer and its evidence
triples, read from a questions JSONL file.

2WikiMultiHopQA records carry the triples (``evidences``) and are read as
they are. MuSiQue records carry instead ``question_decomposition``, a list of
hops ``{question, answer, title}`` in which a later hop names an earlier hop's
answer as ``#k`` ("#1 >> spouse", "What is one railway line in #1 ?"); the
triples are then derived from the hops (``derive_evidences``), from the
record alone:

- a hop that references ``#k`` gives, for each referenced k (in order of first
  mention), the triple (answer of hop k, relation, this hop's answer); the
  relation is the hop question's words with the ``#k`` references, ``>>`` and
  the leading question words ("what is", "who", "when did") removed: the
  reader's vocabulary, never a value (a hop referencing #1 and #2 gives two
  triples with one object);
- a hop without a reference (the first hop, or a second root of a 3hop2/4hop3
  record) gives (subject, relation, this hop's answer) where the subject is
  chosen so that the question itself names it (it never leaks an answer):

  1. a Wikidata-style hop "Subject >> property": the subject text when the
     main question contains it (normalised whole words);
  2. else the longest run of the hop question's words (articles skipped;
     case and accents folded, so "Aschenbrodel" matches "Aschenbrödel") that
     the main question also contains, has a word other than a stop word, and
     is either contained in the hop's gold paragraph title or is a
     capitalised span of the main question (its first and last words start
     with a capital or a digit there, its first word is not a question word);
     the subject is the main question's own wording of that run. Its other
     surfaces (``Gold.forms``; the plan adds them to the entity, the question
     still names it in its own wording): the hop's wording of the run, the
     gold label of rule 1, and, when lowercase words join capitalised parts
     and the run is not within the title, those parts of 4 characters or
     more ("Jarvis in the Avengers Age of Ultron": "Jarvis", "Avengers Age of
     Ultron");
  3. else the subject text of rule 1, or the title of the hop's gold paragraph
     with its parenthesised part removed. The plan (``plan_for``) then marks it
     named only when the question contains it or words it similarly
     (``question_mention``); when not, the subject gets a placeholder, the
     chain cannot be grounded (``plan.grounded``) and the oracle refuses that
     question (no leak).

  On the shared MuSiQue set (102 questions) 96 chains are grounded. The six
  that are not name no entity of their first hop: the hop's only link to the
  question is a lowercase phrase ("a bill giving regulators discretion to
  prohibit proprietary trades", "the continent with the lowest average
  temperature"), and rule 3's title is not in the question. Other limits: the
  parts of rule 2 are looser surfaces than the whole span (a line naming
  "Jarvis" and the hop's answer supports the hop); the subject is a question
  span, so a hop whose paragraph names another of the hop's entities (the
  Bolsheviks and Lenin, not the "November Revolution" rule 2 picks) is not
  supported; and, as on 2Wiki, a hop is supported only by a line naming both
  its ends, which MuSiQue's paragraphs often do not (the "Tokyo" paragraph
  never says "Japan"): the gold paragraphs themselves (one line each)
  support every triple of 78 of the 102 questions, about the oracle's EM
  under perfect retrieval (other passages may support a hop too).

The entities of derived triples are identified exactly (``Gold.exact``): a
bridge is the earlier hop's answer copied, and an answer may extend an
earlier one ("Toronto" / "Toronto Coach Terminal"), which 2Wiki's prefix
merging would join.

``answer_aliases`` (MuSiQue) are accepted answers: the plan adds the longer
ones (4 characters or more, normalised: "IN" would match every "in") as
surfaces of the answer entity, except an alias that the question names or
that spells another entity of the chain (the bridge "Frankfurt" of the answer
"Frankfurt am Main": the last hop would support itself); the final reply is
the answer, or the longest such alias when only the alias is in the
evidence."""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...exceptions import InputError
from .matching import contains, normalise

Triple = tuple[str, str, str]


@dataclass(frozen=True, kw_only=True)
class Gold:
    id: str
    question: str
    answer: str
    type: str | None
    evidences: tuple[Triple, ...]
    supporting_titles: tuple[str, ...] = ()
    answer_aliases: tuple[str, ...] = ()
    forms: tuple[tuple[str, str], ...] = ()       # (an evidence subject, another surface of it)
    exact: bool = False                           # derived triples: one entity, one spelling (plan._same)

    @classmethod
    def from_json(cls, raw: dict[str, Any], where: str = "") -> "Gold":
        evidences = raw.get("evidences")
        forms: list[tuple[str, str]] = []
        exact = evidences is None and raw.get("question_decomposition") is not None
        if exact:
            derived, forms = derive_evidences(raw["question"], raw["question_decomposition"], where)
            evidences = [list(t) for t in derived]
        if not isinstance(evidences, list) or not evidences or not all(
                isinstance(t, list) and len(t) == 3 and all(isinstance(e, str) and e.strip() for e in t)
                for t in evidences):
            raise InputError(f"{where}: the oracle needs 'evidences', a list of [subject, relation, object], "
                             "or a MuSiQue 'question_decomposition'")
        aliases = raw.get("answer_aliases") or []
        if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
            raise InputError(f"{where}: 'answer_aliases' must be a list of strings")
        return cls(id=str(raw["id"]), question=raw["question"], answer=raw["answer"], type=raw.get("type"),
                   evidences=tuple((s, r, o) for s, r, o in evidences),
                   supporting_titles=tuple(raw.get("supporting_titles") or ()),
                   answer_aliases=tuple(a for a in aliases if a.strip()), forms=tuple(forms), exact=exact)


def load_gold(path: Path) -> list[Gold]:
    """The gold records of a questions JSONL file (with ``evidences`` or a
    MuSiQue ``question_decomposition``)."""
    out = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            out.append(Gold.from_json(json.loads(line), f"{path}:{n}"))
    return out


# -- MuSiQue: triples from the question decomposition -----------------------------

_REF = re.compile(r"#(\d+)")
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_ARTICLES = {"a", "an", "the"}
_QUESTION_WORDS = {"who", "whom", "whose", "what", "which", "when", "where", "why", "how", "did", "does", "do",
                   "is", "are", "was", "were", "many", "much"}
_STOP = _QUESTION_WORDS | _ARTICLES | {"of", "in", "on", "at", "to", "for", "by", "and", "or", "from", "with",
                                       "as", "s", "its", "it", "be", "been", "has", "had", "have", "that", "this"}
_CONNECTORS = {"of", "de", "la", "le", "von", "van", "der", "du", "des", "del", "y"}


def _fold(word: str) -> str:
    """A word for matching: case and accents folded ("Gröbner" = "grobner")."""
    return "".join(c for c in unicodedata.normalize("NFKD", word.casefold()) if not unicodedata.combining(c))


def _words(text: str) -> list[tuple[int, int, str]]:
    """(start, end, folded word) of ``text``'s words, articles skipped."""
    return [(m.start(), m.end(), _fold(m.group())) for m in _WORD.finditer(text)
            if m.group().casefold() not in _ARTICLES]


def _find(seq: list[str], run: list[str]) -> int | None:
    n = len(run)
    return next((i for i in range(len(seq) - n + 1) if seq[i:i + n] == run), None)


def _relation(text: str) -> str:
    """A hop question as a relation: ``#k`` (with a following "'s") and ``>>``
    removed, its words joined, leading question words and a stray "s" dropped."""
    text = re.sub(r"#\d+\s*['’]s\b", " ", text).replace(">>", " ")
    words = [w for w in re.findall(r"[^\W_]+(?:['’][^\W_]+)*", _REF.sub(" ", text)) if w.casefold() != "s"]
    while words and words[0].casefold() in _QUESTION_WORDS:
        words.pop(0)
    return " ".join(words) or "related to"


def _strip_title(title: str) -> str:
    return re.sub(r"\s*\([^)]*\)\s*$", "", title).strip() or title.strip()


@dataclass(frozen=True)
class Span:
    """A hop subject the question names: the question's wording, the hop's own
    wording of it, and the hop words it covers (start, end exclusive)."""

    surface: str
    hop_form: str
    start: int
    end: int
    parts: tuple[str, ...]      # its capitalised parts, when lowercase words join them


def question_span(question: str, hop: str, title: str) -> Span | None:
    """Rule 2 of the module doc: the main question's wording of the longest run
    of ``hop``'s words that it names as an entity (words compared with case and
    accents folded), or None."""
    question, hop = unicodedata.normalize("NFC", question), unicodedata.normalize("NFC", hop)
    q, h = _words(question), _words(hop)
    qw, hw = [w for _, _, w in q], [w for _, _, w in h]
    tw = [w for _, _, w in _words(unicodedata.normalize("NFC", title))]

    def capital(i: int) -> bool:
        c = question[q[i][0]]
        return c.isupper() or c.isdigit()

    best: tuple[int, int, int] | None = None      # (length, -start, at)
    for i in range(len(hw)):
        for j in range(i + 1, len(hw) + 1):
            run = hw[i:j]
            if all(w in _STOP for w in run):
                continue
            at = _find(qw, run)
            if at is None:
                break                                    # longer runs from i cannot occur either
            last = at + len(run) - 1
            entity = _find(tw, run) is not None or (
                capital(at) and capital(last) and qw[at] not in _QUESTION_WORDS)
            if entity and (best is None or (j - i, -i) > best[:2]):
                best = (j - i, -i, at)
    if best is None:
        return None
    length, start, at = best[0], -best[1], best[2]
    last = at + length - 1
    surface = question[q[at][0]:q[last][1]]
    if not contains(question, surface):
        return None
    parts: list[str] = []
    seg: list[int] = []
    in_title = _find(tw, qw[at:last + 1]) is not None     # a title is one name: not split
    for n in range(at, last + 2) if not in_title else ():
        if n <= last and (capital(n) or (seg and qw[n] in _CONNECTORS)):
            seg.append(n)
            continue
        while seg and not capital(seg[-1]):
            seg.pop()
        if seg and (seg[0], seg[-1]) != (at, last):
            part = question[q[seg[0]][0]:q[seg[-1]][1]]
            if len(normalise(part)) >= 4 and qw[seg[0]] not in _QUESTION_WORDS:
                parts.append(part)
        seg = []
    return Span(surface=surface, hop_form=hop[h[start][0]:h[start + length - 1][1]], start=start,
                end=start + length, parts=tuple(parts))


def _forms(span: Span, *others: str) -> list[str]:
    """The subject's other surfaces: the hop's (or gold label's) wording when it
    differs, and the capitalised parts of the question's wording."""
    out: list[str] = []
    for form in (span.hop_form, *others, *span.parts):
        if normalise(form) != normalise(span.surface) and normalise(form) not in map(normalise, out):
            out.append(form)
    return out


def root_triple(question: str, hop: dict[str, Any]) -> tuple[Triple, list[str]]:
    """The triple of a hop that references no earlier hop (module doc, rules
    1-3), and its subject's other surfaces."""
    text, answer, title = hop["question"], hop["answer"].strip(), str(hop.get("title") or "")
    if ">>" in text:
        subject, _, prop = (p.strip() for p in text.partition(">>"))
        if contains(question, subject):
            return (subject, _relation(prop), answer), []
        found = question_span(question, subject, title)
        if found:
            return (found.surface, _relation(prop), answer), _forms(found, subject)
        return (subject, _relation(prop), answer), []
    found = question_span(question, text, title)
    if found:
        text = unicodedata.normalize("NFC", text)
        rest = " ".join(text[a:b] for n, (a, b, _w) in enumerate(_words(text)) if not found.start <= n < found.end)
        return (found.surface, _relation(rest), answer), _forms(found)
    return (_strip_title(title) or text, _relation(text), answer), []


def derive_evidences(question: str, hops: Any, where: str = "") -> tuple[list[Triple], list[tuple[str, str]]]:
    """The evidence triples of a MuSiQue record (see the module doc), and the
    other surfaces of their root subjects as (subject, surface) pairs."""
    if not isinstance(hops, list) or not hops or not all(
            isinstance(h, dict) and isinstance(h.get("question"), str) and isinstance(h.get("answer"), str)
            and h["answer"].strip() for h in hops):
        raise InputError(f"{where}: 'question_decomposition' must be a list of hops with a question and an answer")
    triples: list[Triple] = []
    forms: list[tuple[str, str]] = []
    for n, hop in enumerate(hops):
        refs = list(dict.fromkeys(int(k) for k in _REF.findall(hop["question"])))
        refs = [k for k in refs if 1 <= k <= n]          # only earlier hops
        if not refs:
            triple, other = root_triple(question, hop)
            triples.append(triple)
            forms += [(triple[0], f) for f in other]
            continue
        relation = _relation(hop["question"])
        triples += [(hops[k - 1]["answer"].strip(), relation, hop["answer"].strip()) for k in refs]
    return triples, forms
