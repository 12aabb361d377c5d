"""The prepare stage: validated documents -> sentences, chunks, entities,
embeddings and the families' plans. Models only, no database: the pipeline may
run it ahead in a thread while the previous batch is written."""

from __future__ import annotations

import bisect
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import nlp
from ..context import CorpusInfo
from ..embed import Embedder
from ..sources import DocumentIn
from ..text import chunk_search_text, sentence_windows
from .hooks import hooks_for
from .report import IngestReport


@dataclass(slots=True)
class ChunkRow:
    ordinal: int
    first: int
    last: int
    start: int
    end: int
    text: str


@dataclass(slots=True)
class Prepared:
    """One document ready to write."""

    doc: DocumentIn
    sentences: list[tuple[int, int]]
    chunks: list[ChunkRow]
    entities: list[nlp.Entity]
    embeddings: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32))
    # A family's plan (FamilyHook.prepare), by family; absent: not planned.
    derived: dict[str, Any] = field(default_factory=dict)

    def unique_entities(self) -> list[nlp.Entity]:
        """The entities, one per (start, end, label)."""
        seen: dict[tuple[int, int, str], nlp.Entity] = {}
        for e in self.entities:
            seen.setdefault((e.start, e.end, e.label), e)
        return list(seen.values())

    def chunked_entities(self) -> list[nlp.Entity]:
        """The entities that some chunk holds whole: those stored in chunk_entity.
        Chunks are sentence windows, their starts and ends both increasing, so the
        last chunk starting at or before an entity ends furthest: it holds the entity or none does."""
        starts = [c.start for c in self.chunks]
        out = []
        for e in self.unique_entities():
            i = bisect.bisect_right(starts, e.start) - 1
            if i >= 0 and e.end <= self.chunks[i].end:
                out.append(e)
        return out


def prepare(batch: Sequence[DocumentIn], corpus: CorpusInfo, embedder: Embedder,
            spacy_model: str, batch_size: int, report: IngestReport) -> list[Prepared]:
    """Sentences, chunks, entities, embeddings and the plans of the families the
    corpus maintains (models only, no database): what ``write_prepared`` stores."""
    t0 = time.perf_counter()
    parsed = nlp.parse([d.body for d in batch], spacy_model, batch_size=batch_size)
    t1 = time.perf_counter()
    prepared = []
    for doc, p in zip(batch, parsed):
        chunks = [
            ChunkRow(ordinal=k, first=first, last=last,
                     start=p.sentences[first][0], end=p.sentences[last][1],
                     text=doc.body[p.sentences[first][0] : p.sentences[last][1]])
            for k, (first, last) in enumerate(
                sentence_windows(len(p.sentences), corpus.chunk_sentences, corpus.chunk_overlap))
        ]
        prepared.append(Prepared(doc=doc, sentences=p.sentences, chunks=chunks, entities=p.entities))
    texts = [chunk_search_text(pr.doc.title, c.text) for pr in prepared for c in pr.chunks]
    t2 = time.perf_counter()
    vectors = embedder.encode(texts)
    t3 = time.perf_counter()
    offset = 0
    for pr in prepared:
        pr.embeddings = vectors[offset : offset + len(pr.chunks)]
        offset += len(pr.chunks)
    for _, hook in hooks_for(corpus.families):
        hook.prepare(prepared, embedder, report)
    report.nlp_seconds += t1 - t0
    report.embedding_seconds += t3 - t2
    return prepared


def prepare_each(docs: list[DocumentIn], corpus: CorpusInfo, embedder: Embedder, spacy_model: str,
                 report: IngestReport) -> tuple[list[Prepared], dict[str, str]]:
    """Prepare all at once; if that fails, one by one, so that one bad document
    (or a model error on it) fails alone: the prepared documents, and the
    errors by external id."""
    if not docs:
        return [], {}
    try:
        return prepare(docs, corpus, embedder, spacy_model, len(docs), report), {}
    except Exception as exc:  # noqa: BLE001 - model errors come in many types; isolated below
        if len(docs) == 1:
            return [], {docs[0].external_id: describe(exc)}
    out, failures = [], {}
    for d in docs:
        try:
            out.extend(prepare([d], corpus, embedder, spacy_model, 1, report))
        except Exception as exc:  # noqa: BLE001
            failures[d.external_id] = describe(exc)
    return out, failures


def describe(exc: BaseException) -> str:
    """An error as a failure record keeps it."""
    return f"{type(exc).__name__}: {exc}"[:2000]
