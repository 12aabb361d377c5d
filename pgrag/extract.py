"""Triple extraction: chunks -> (subject, predicate, object) triples ->
propositions with embeddings (T2RAG's and CIRAG's retrieval units).

Two extractors: ``spacy`` (offline, from the dependency parse; no LLM needed)
and ``llm`` (HippoRAG-style OpenIE: named entities, then triples, as JSON).
Extraction runs over the chunks that the extractor has not processed yet, in
batches, each batch one transaction: an interrupted run (endpoint down, process
killed) keeps what it finished and the next run continues from there.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import prompts
from .exceptions import InputError
from .llm import LLM, LLMReplyError
from .progress import tqdm
from .queries import query

if TYPE_CHECKING:
    from .context import Context

EXTRACTORS = ("spacy", "llm")
MAX_ELEMENT = 200  # characters per subject / predicate / object


@dataclass(frozen=True, slots=True)
class Extracted:
    subject: str
    predicate: str
    object: str
    char_start: int   # the source sentence, offsets into the chunk text
    char_end: int


@dataclass(kw_only=True)
class ExtractionReport:
    extractor: str
    chunks: int = 0
    triples: int = 0
    failed_chunks: int = 0
    ungrounded: int = 0   # LLM triples dropped: neither subject nor object occurs in the chunk
    seconds: float = 0.0
    llm_calls: int = 0
    llm_prompt_tokens: int = 0
    llm_completion_tokens: int = 0
    errors: list[str] = field(default_factory=list)


def extract_triples(kb: "Context", extractor: str = "spacy", *, llm: LLM | None = None,
                    batch_size: int | None = None, progress: bool = True,
                    chunk_ids: Sequence[int] | None = None) -> ExtractionReport:
    """Extract triples from every chunk of ``kb`` (or only of ``chunk_ids``) not yet
    processed by ``extractor`` (``batch_size`` chunks per transaction: 32 for
    spaCy, 8 for the slower LLM)."""
    batch_size = batch_size or (8 if extractor == "llm" else 32)
    if extractor not in EXTRACTORS:
        raise InputError(f"unknown triple extractor {extractor!r}; choose one of {', '.join(EXTRACTORS)}")
    if extractor == "llm" and llm is None:
        raise InputError("the llm extractor needs an LLM (configure PGRAG_LLM_BASE_URL and PGRAG_LLM_MODEL)")
    started = time.perf_counter()
    report = ExtractionReport(extractor=extractor)
    spent_before = dataclasses.replace(llm.usage) if llm is not None else None
    pending = (kb.db.fetchall("chunks_to_extract", {"corpus_id": kb.id, "extractor": extractor})
               if chunk_ids is None else
               kb.db.fetchall("chunks_to_extract_among", {"corpus_id": kb.id, "extractor": extractor,
                                                          "chunk_ids": list(chunk_ids)}))
    try:
        with tqdm(total=len(pending), unit="chunk", desc=f"triples ({extractor})",
                  disable=not progress or not pending) as bar:
            for i in range(0, len(pending), batch_size):
                batch = pending[i : i + batch_size]
                # The title goes first: it names what pronouns in the chunk refer to.
                texts = [f"{title}\n{text}" for _, _, title, text in batch]
                if extractor == "spacy":
                    found: list[list[Extracted] | None] = list(_spacy(texts, kb.spacy_model))
                else:
                    assert llm is not None
                    found = [_llm_chunk(llm, text, report) for text in texts]
                _write(kb, extractor, batch, found, report)
                bar.update(len(batch))
    finally:
        if report.triples:
            with kb.db.transaction() as conn:
                conn.execute(query("ensure_triple_index"), {"corpus_id": kb.id})
        if llm is not None and spent_before is not None:  # this run's share of the client's usage
            report.llm_calls = llm.usage.calls - spent_before.calls
            report.llm_prompt_tokens = llm.usage.prompt_tokens - spent_before.prompt_tokens
            report.llm_completion_tokens = llm.usage.completion_tokens - spent_before.completion_tokens
        report.seconds = time.perf_counter() - started
    return report


def _spacy(texts: list[str], model: str) -> list[list[Extracted]]:
    from . import extract_spacy

    return [[Extracted(t.subject, t.predicate, t.object, t.char_start, t.char_end) for t in triples]
            for triples in extract_spacy.extract(texts, model)]


def _llm_chunk(llm: LLM, text: str, report: ExtractionReport) -> list[Extracted] | None:
    """NER then OpenIE for one chunk; None when the replies were unusable."""
    try:
        entities = llm.structured(
            [{"role": "system", "content": prompts.NER_SYSTEM},
             {"role": "user", "content": prompts.NER_USER.format(passage=text)}], _entity_list,
            schema=prompts.NER_REPLY)
        triples = llm.structured(
            [{"role": "system", "content": prompts.TRIPLES_SYSTEM},
             {"role": "user", "content": prompts.TRIPLES_USER.format(
                 passage=text, entities=json.dumps(entities, ensure_ascii=False))}],
            _triple_list, schema=prompts.TRIPLES_REPLY)
    except LLMReplyError as exc:
        report.errors.append(str(exc))
        return None
    # Small models copy the prompt's example or invent facts: keep a triple only
    # when its subject or object actually occurs in the passage.
    lowered = text.lower()
    grounded = [(s, p, o) for s, p, o in triples if s.lower() in lowered or o.lower() in lowered]
    report.ungrounded += len(triples) - len(grounded)
    return [Extracted(s, p, o, *_sentence_of(text, s, o)) for s, p, o in grounded]


def _entity_list(value: Any) -> list[str]:
    items = value.get("entities") if isinstance(value, dict) else value
    if not isinstance(items, list):
        raise ValueError('expected {"entities": [...]}')
    names = []
    for e in items:
        if isinstance(e, dict):  # small models like {"name": ..., "type": ...}
            e = e.get("name") or e.get("text") or e.get("entity")
        if isinstance(e, (str, int, float)) and str(e).strip():
            names.append(" ".join(str(e).split()))
    return names


def _triple_list(value: Any) -> list[tuple[str, str, str]]:
    items = value.get("triples") if isinstance(value, dict) else value
    if not isinstance(items, list):
        raise ValueError('expected {"triples": [[subject, predicate, object], ...]}')
    out = []
    for item in items:
        if isinstance(item, dict):
            item = [item.get("subject"), item.get("predicate"), item.get("object")]
        if isinstance(item, list) and len(item) == 3 and all(isinstance(x, (str, int, float)) for x in item):
            s, p, o = (" ".join(str(x).split()) for x in item)
            if s and p and o and max(len(s), len(p), len(o)) <= MAX_ELEMENT:
                out.append((s, p, o))
    if items and not out:
        raise ValueError("no triple had three short, non-empty elements")
    return out


def _sentence_of(text: str, subject: str, obj: str) -> tuple[int, int]:
    """Offsets of the sentence of ``text`` where the object (or else the subject)
    occurs verbatim; the whole text when neither does."""
    lowered = text.lower()
    for needle in (obj.lower(), subject.lower()):
        at = lowered.find(needle)
        if at >= 0:
            start = lowered.rfind(". ", 0, at)
            end = lowered.find(". ", at + len(needle))
            return (start + 2 if start >= 0 else 0), (end + 1 if end >= 0 else len(text))
    return 0, len(text)


def _write(kb: "Context", extractor: str, batch: Sequence[tuple[int, int, str, str]],
           found: Sequence[list[Extracted] | None], report: ExtractionReport) -> None:
    rows = []
    for (chunk_id, chunk_start, title, text), triples in zip(batch, found):
        shift = len(title) + 1  # the title line that preceded the chunk text
        for ordinal, t in enumerate(triples or []):
            start = chunk_start + min(max(t.char_start - shift, 0), len(text))
            end = chunk_start + min(max(t.char_end - shift, 0), len(text))
            rows.append((chunk_id, ordinal, t.subject, t.predicate, t.object,
                         f"{t.subject} {t.predicate} {t.object}", start, max(start, end)))
    vectors: list[Any] = list(kb.embedder.encode([r[5] for r in rows])) if rows else []
    with kb.db.transaction() as conn:
        conn.execute(query("corpus_write_lock"), {"corpus_id": kb.id})
        # Chunks deleted meanwhile (a concurrent re-ingest) are skipped by the joins.
        conn.execute(query("insert_triples"), {
            "corpus_id": kb.id, "extractor": extractor,
            "chunk_ids": [r[0] for r in rows], "ordinals": [r[1] for r in rows],
            "subjects": [r[2] for r in rows], "predicates": [r[3] for r in rows],
            "objects": [r[4] for r in rows], "propositions": [r[5] for r in rows],
            "starts": [r[6] for r in rows], "ends": [r[7] for r in rows], "embeddings": list(vectors)})
        conn.execute(query("mark_extracted"), {
            "corpus_id": kb.id, "extractor": extractor, "chunk_ids": [c for c, _, _, _ in batch],
            "counts": [len(t or []) for t in found], "failed": [t is None for t in found]})

    report.chunks += len(batch)
    report.triples += len(rows)
    report.failed_chunks += sum(t is None for t in found)
