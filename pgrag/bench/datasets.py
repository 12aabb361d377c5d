"""Question sets in their published formats, turned into what `pgrag eval` reads:
a corpus (a JSON list of {"id", "title", "text"}) and questions (JSONL: id, type,
question, answer, answer_aliases, supporting_titles, question_decomposition).

A set that gives each question its own passages (MuSiQue's "paragraphs",
HotpotQA's and 2WikiMultihopQA's "context") gets one corpus: every question's
passages, each distinct (title, text) once, in the order they first appear; so
each question's distractors are every other question's passages too, as in
HippoRAG's setting. Questions whose supporting passages are missing from their
own passages are refused with their id, never silently dropped.

This is how tigrag was checked on questions it was never tuned on
(docs/BENCHMARKS.md, "Questions outside the tuning sets").
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..exceptions import InputError

FORMATS = ("musique", "hotpotqa", "2wiki")


@dataclass(frozen=True)
class QuestionSet:
    """A converted set: the corpus's passages and the questions, as eval reads them."""

    corpus: list[dict[str, str]]
    questions: list[dict[str, Any]]


def convert(records: Sequence[Any], format: str) -> QuestionSet:
    """The corpus and questions of ``records`` (a published file's list of
    questions) in ``format``, one of FORMATS."""
    if format not in FORMATS:
        raise InputError(f"unknown question-set format {format!r}: use one of {', '.join(FORMATS)}")
    corpus = _Corpus()
    questions = []
    for n, raw in enumerate(records):
        if not isinstance(raw, dict):
            raise InputError(f"question {n}: expected a JSON object")
        if format == "musique":
            questions.append(_musique(raw, corpus))
        else:
            questions.append(_with_context(raw, corpus))
    return QuestionSet(corpus=corpus.passages, questions=questions)


def without(question_set: QuestionSet, ids: set[str]) -> tuple[QuestionSet, int]:
    """``question_set`` less the questions whose id is in ``ids`` (a tuning
    set's), and how many were left out; the corpus is kept whole."""
    kept = [q for q in question_set.questions if q["id"] not in ids]
    if not kept:
        raise InputError("every question of the set is among those to leave out")
    return QuestionSet(corpus=question_set.corpus, questions=kept), len(question_set.questions) - len(kept)


def write(question_set: QuestionSet, folder: Path) -> tuple[Path, Path]:
    """Write ``corpus.json`` and ``questions.jsonl`` into ``folder`` (made if
    missing); their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    corpus, questions = folder / "corpus.json", folder / "questions.jsonl"
    corpus.write_text(json.dumps(question_set.corpus, ensure_ascii=False) + "\n", encoding="utf-8")
    questions.write_text("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in question_set.questions),
                         encoding="utf-8")
    return corpus, questions


def read_records(path: Path) -> list[Any]:
    """A published file: a JSON list, or JSON lines."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        try:
            data = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}: neither a JSON list nor JSON lines ({exc.msg})") from exc
    if not isinstance(data, list) or not data:
        raise InputError(f"{path}: expected a non-empty list of questions")
    return data


class _Corpus:
    """Distinct passages by (title, text), in first-seen order."""

    def __init__(self) -> None:
        self.passages: list[dict[str, str]] = []
        self._index: dict[tuple[str, str], int] = {}
        self._titles: dict[str, int] = {}

    def add(self, title: str, text: str) -> int:
        key = (title.strip(), " ".join(text.split()))
        if key not in self._index:
            self._index[key] = len(self.passages)
            # Two passages of one article share a title (MuSiQue has 126 such in
            # HippoRAG's 1,890): the id tells them apart, the title stays what
            # recall is counted by.
            same = self._titles[key[0]] = self._titles.get(key[0], 0) + 1
            ident = key[0] if same == 1 else f"{key[0]} #{same}"
            self.passages.append({"id": ident, "title": key[0], "text": key[1]})
        return self._index[key]


def _text(raw: dict[str, Any], key: str, qid: str) -> str:
    value = raw.get(key)
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"question {qid}: {key!r} must be a non-empty string")
    return value


def _musique(raw: dict[str, Any], corpus: _Corpus) -> dict[str, Any]:
    """MuSiQue: paragraphs with is_supporting; the decomposition's
    paragraph_support_idx points into them. The type is the id's prefix
    ("2hop", "3hop1" -> "3hop")."""
    qid = _text(raw, "id", "?")
    paragraphs = raw.get("paragraphs")
    if not isinstance(paragraphs, list) or not paragraphs:
        raise InputError(f"question {qid}: no 'paragraphs'")
    by_idx: dict[Any, tuple[str, int]] = {}
    gold: list[str] = []
    for p in paragraphs:
        if not isinstance(p, dict):
            raise InputError(f"question {qid}: a paragraph is not a JSON object")
        title, text = _text(p, "title", qid), _text(p, "paragraph_text", qid)
        by_idx[p.get("idx")] = (title.strip(), corpus.add(title, text))
        if p.get("is_supporting") and title.strip() not in gold:
            gold.append(title.strip())
    if not gold:
        raise InputError(f"question {qid}: no supporting paragraph")
    steps = []
    for step in raw.get("question_decomposition") or []:
        title, index = by_idx.get(step.get("paragraph_support_idx"), ("", -1))
        steps.append({"question": step.get("question", ""), "answer": step.get("answer", ""),
                      "title": title, "corpus_index": index})
    prefix = qid.split("__", 1)[0]
    return {"id": qid, "type": prefix.rstrip("0123456789") or prefix,
            "question": _text(raw, "question", qid), "answer": _text(raw, "answer", qid),
            "answer_aliases": [a for a in raw.get("answer_aliases") or [] if isinstance(a, str)],
            "supporting_titles": gold, "question_decomposition": steps}


def _with_context(raw: dict[str, Any], corpus: _Corpus) -> dict[str, Any]:
    """HotpotQA and 2WikiMultihopQA: context [[title, [sentence, ...]], ...]
    and supporting_facts [[title, sentence index], ...]; a passage is its
    sentences joined (HotpotQA's keep their leading spaces)."""
    qid = str(raw.get("_id") or raw.get("id") or "").strip()
    if not qid:
        raise InputError("a question has no '_id' or 'id'")
    context = raw.get("context")
    if isinstance(context, dict):      # 2Wiki's HuggingFace layout: {"title": [...], "sentences": [...]}
        context = list(zip(context.get("title", []), context.get("sentences", [])))
    if not isinstance(context, list) or not context:
        raise InputError(f"question {qid}: no 'context'")
    titles = set()
    for entry in context:
        if not (isinstance(entry, (list, tuple)) and len(entry) == 2 and isinstance(entry[0], str)
                and isinstance(entry[1], list)):
            raise InputError(f"question {qid}: a context entry is not [title, [sentence, ...]]")
        title, sentences = entry
        corpus.add(title, "".join(_sentences(sentences)))
        titles.add(title.strip())
    facts = raw.get("supporting_facts")
    if isinstance(facts, dict):
        facts = list(zip(facts.get("title", []), facts.get("sent_id", [])))
    gold: list[str] = []
    for fact in facts or []:
        title = fact[0] if isinstance(fact, (list, tuple)) and fact and isinstance(fact[0], str) else None
        if title is None:
            raise InputError(f"question {qid}: a supporting fact is not [title, sentence index]")
        if title.strip() not in gold:
            gold.append(title.strip())
    if not gold:
        raise InputError(f"question {qid}: no supporting facts")
    missing = [t for t in gold if t not in titles]
    if missing:
        raise InputError(f"question {qid}: supporting passages not in its context: {', '.join(missing)}")
    answer = raw.get("answer")
    return {"id": qid, "type": str(raw.get("type") or ""), "question": _text(raw, "question", qid),
            "answer": answer if isinstance(answer, str) and answer.strip() else str(answer),
            "answer_aliases": [], "supporting_titles": gold}


def _sentences(sentences: Iterable[Any]) -> list[str]:
    out = [s for s in sentences if isinstance(s, str)]
    # 2Wiki's sentences carry no leading space; HotpotQA's (after the first) do.
    if out and not any(s.startswith(" ") for s in out[1:]):
        return [out[0]] + [" " + s for s in out[1:]]
    return out
