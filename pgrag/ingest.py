"""Ingest: documents -> sentences -> chunks -> embeddings -> tables -> postings/edges.

Python does what needs models (spaCy sentences and NER, embeddings); everything
derived from tokens (vocabulary, postings, document frequencies, co-occurrence
edges) is computed by SQL (``pgrag_internal.index_chunks``) from the one token pipeline.

All input is validated before anything is written. Documents are then written in
batches, each batch one transaction under the corpus's write lock: a document is
either fully indexed or as it was before, and re-running an interrupted ingest
finishes the job (unchanged documents are skipped by content hash).

ThreadRAG's semantic nodes are built only for a corpus that maintains the
``threadrag`` family (``pgrag.families``): they roughly double the embedding time.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from psycopg.types.json import Jsonb
from .progress import tqdm

from . import bulk, nlp
from .config import in_server
from .context import CorpusInfo
from .context import QueryRunner
from .embed import Embedder
from .families import locked_families
from .model_client import RemoteEmbedder
from .queries import query
from .semantic import DocumentText, NameRow, NodeRow, copy_names, copy_nodes, document_names, plan_names, plan_nodes
from .sources import DocumentIn
from .text import chunk_search_text, content_hash, sentence_windows


@dataclass(kw_only=True)
class IngestReport:
    """What an ingest did, and where its time went (seconds)."""

    corpus: str
    documents: int = 0
    added: int = 0
    replaced: int = 0
    unchanged: int = 0
    sentences: int = 0
    chunks: int = 0
    entities: int = 0
    nodes: int = 0                    # ThreadRAG semantic nodes (0 unless the corpus maintains them)
    names: int = 0                    # ThreadRAG name vectors (likewise)
    total_seconds: float = 0.0
    embedding_seconds: float = 0.0
    nlp_seconds: float = 0.0
    other_seconds: float = 0.0
    node_embedding_seconds: float = 0.0   # part of embedding_seconds: sentences, nodes and names
    name_embedding_seconds: float = 0.0   # part of node_embedding_seconds: the name vectors
    triples: Any = None  # an extract.ExtractionReport when triples were extracted
    backfill: Any = None  # a semantic.NodeReport when ``methods`` enabled a family for older documents

@dataclass(slots=True)
class _ChunkRow:
    ordinal: int
    first: int
    last: int
    start: int
    end: int
    text: str


@dataclass(slots=True)
class _Prepared:
    doc: DocumentIn
    sentences: list[tuple[int, int]]
    chunks: list[_ChunkRow]
    entities: list[nlp.Entity]
    embeddings: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32))
    nodes: list[NodeRow] | None = None        # None: not planned (the corpus did not maintain them)
    node_embeddings: list[np.ndarray] = field(default_factory=list)
    names: list[NameRow] = field(default_factory=list)         # planned with the nodes
    name_embeddings: list[np.ndarray] = field(default_factory=list)


def ingest(
    db: QueryRunner,
    corpus: CorpusInfo,
    documents: Sequence[DocumentIn],
    *,
    embedder: Embedder,
    spacy_model: str,
    batch_size: int = 64,
    progress: bool = True,
    prefetch: bool | None = None,
) -> IngestReport:
    """Index ``documents`` (already validated) into ``corpus``, ``batch_size``
    documents a transaction. With ``prefetch`` (by default ``prefetches(embedder)``)
    the next batch's sentences and vectors are computed in a thread while this
    batch is written, so the database's work and the models' overlap."""
    started = time.perf_counter()
    report = IngestReport(corpus=corpus.name, documents=len(documents))
    todo = _changed(db, corpus, documents)
    report.unchanged = len(documents) - len(todo)
    if report.unchanged:
        pending = {d.external_id for d in todo}
        _update_metadata(db, corpus, [d for d in documents if d.external_id not in pending])
    batches = [todo[i : i + batch_size] for i in range(0, len(todo), batch_size)]
    ahead = prefetches(embedder) if prefetch is None else prefetch

    def prepare_part(batch: Sequence[DocumentIn]) -> tuple[list[_Prepared], IngestReport]:
        part = IngestReport(corpus=corpus.name)
        return _prepare(batch, corpus, embedder, spacy_model, batch_size, part), part

    with tqdm(total=len(todo), unit="doc", desc=f"ingest {corpus.name}", disable=not progress or not todo) as bar, \
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="pgrag-prepare") as pool:
        following = pool.submit(prepare_part, batches[0]) if ahead and batches else None
        try:
            for i, batch in enumerate(batches):
                if following is None:
                    prepared = _prepare(batch, corpus, embedder, spacy_model, batch_size, report)
                else:
                    prepared, part = following.result()
                    following = pool.submit(prepare_part, batches[i + 1]) if i + 1 < len(batches) else None
                    _add_timings(report, part)
                _write(db, corpus, prepared, report, embedder)
                bar.update(len(batch))
        finally:
            if following is not None:
                following.cancel()
    if todo:
        with db.transaction() as conn:
            # Under the write lock: two ingests finishing together would otherwise
            # both CREATE INDEX IF NOT EXISTS, and one fails on the catalog's unique key.
            conn.execute(query("corpus_write_lock"), {"corpus_id": corpus.corpus_id})
            conn.execute(query("ensure_chunk_index"), {"corpus_id": corpus.corpus_id})
    report.total_seconds = time.perf_counter() - started
    # With prefetch the models' time overlaps the writes: "other" is the time they did not hide.
    report.other_seconds = report.total_seconds - report.embedding_seconds - report.nlp_seconds
    return report


def prefetches(embedder: Embedder) -> bool:
    """Whether an ingest prepares ahead by default: in a client whose models
    (embeddings and spaCy) run in the model runtime, where the thread only
    waits on its socket. Never in a backend, where only the main thread may
    touch the server; not with models in process, whose lazy loading in a
    second thread is not safe everywhere (CPython 3.11's ast module, which
    spaCy's and hypothesis's parsing share, failed a test run that way)."""
    return not in_server() and isinstance(embedder, RemoteEmbedder) and embedder.target.serves_nlp


_TIMINGS = ("embedding_seconds", "nlp_seconds", "node_embedding_seconds", "name_embedding_seconds")


def _add_timings(report: IngestReport, part: IngestReport) -> None:
    for name in _TIMINGS:
        setattr(report, name, getattr(report, name) + getattr(part, name))


def index_pending(db: Any, corpus: CorpusInfo, *, embedder: Embedder, spacy_model: str,
                  batch_size: int = 64, progress: bool = True) -> IngestReport:
    """Index the documents inserted or changed directly in ``pgrag.document`` (by an
    ORM session, or by an application's INSERT followed by SQL's ``pgrag.index``)."""
    from .sources import validate

    rows = db.fetchall("pending_documents", {"corpus_id": corpus.corpus_id})
    docs = validate(
        [{"id": ext, "title": title, "text": body, "metadata": meta} for ext, title, body, meta in rows],
        source=f"corpus {corpus.name!r}")
    return ingest(db, corpus, docs, embedder=embedder, spacy_model=spacy_model, batch_size=batch_size,
                  progress=progress)


def _changed(db: QueryRunner, corpus: CorpusInfo, documents: Sequence[DocumentIn]) -> list[DocumentIn]:
    """Documents whose content differs from what is indexed (or that are new)."""
    rows = db.fetchall("document_states", {
        "corpus_id": corpus.corpus_id, "ids": [d.external_id for d in documents]})
    current = {ext: (content, indexed) for ext, _, content, indexed in rows}
    return [d for d in documents
            if not _is_current(*current.get(d.external_id, (None, None)), content_hash(d.title, d.body))]


def _is_current(stored_hash: str | None, indexed_hash: str | None, new_hash: str) -> bool:
    """Unchanged: the stored content *and* its index are this content."""
    return stored_hash == new_hash and indexed_hash == new_hash


def _update_metadata(db: QueryRunner, corpus: CorpusInfo, documents: Sequence[DocumentIn]) -> None:
    with db.transaction() as conn:
        conn.execute(query("update_metadata"), {
            "corpus_id": corpus.corpus_id,
            "ids": [d.external_id for d in documents],
            "metadata": [Jsonb(d.metadata) for d in documents]})


def _prepare(batch: Sequence[DocumentIn], corpus: CorpusInfo, embedder: Embedder,
             spacy_model: str, batch_size: int, report: IngestReport) -> list[_Prepared]:
    t0 = time.perf_counter()
    parsed = nlp.parse([d.body for d in batch], spacy_model, batch_size=batch_size)
    t1 = time.perf_counter()
    prepared = []
    for doc, p in zip(batch, parsed):
        chunks = [
            _ChunkRow(ordinal=k, first=first, last=last,
                      start=p.sentences[first][0], end=p.sentences[last][1],
                      text=doc.body[p.sentences[first][0] : p.sentences[last][1]])
            for k, (first, last) in enumerate(
                sentence_windows(len(p.sentences), corpus.chunk_sentences, corpus.chunk_overlap))
        ]
        prepared.append(_Prepared(doc=doc, sentences=p.sentences, chunks=chunks, entities=p.entities))
    texts = [chunk_search_text(pr.doc.title, c.text) for pr in prepared for c in pr.chunks]
    t2 = time.perf_counter()
    vectors = embedder.encode(texts)
    t3 = time.perf_counter()
    offset = 0
    for pr in prepared:
        pr.embeddings = vectors[offset : offset + len(pr.chunks)]
        offset += len(pr.chunks)
    if corpus.maintains("threadrag"):
        _plan_nodes(prepared, embedder, report)
    report.nlp_seconds += t1 - t0
    report.embedding_seconds += t3 - t2
    return prepared


def _plan_nodes(prepared: list[_Prepared], embedder: Embedder, report: IngestReport) -> None:
    """ThreadRAG semantic nodes of each document (pgrag.semantic), from the
    sentences just found and the chunk vectors just computed."""
    if not prepared:
        return
    docs = [DocumentText(title=p.doc.title, body=p.doc.body, sentences=p.sentences,
                         chunks={(c.start, c.end): v for c, v in zip(p.chunks, p.embeddings)})
            for p in prepared]
    nodes, vectors, stats = plan_nodes(docs, embedder)
    offset = 0
    for p, doc_nodes in zip(prepared, nodes):
        p.nodes = doc_nodes
        p.node_embeddings = vectors[offset: offset + len(doc_nodes)]
        offset += len(doc_nodes)
        p.names = document_names(((e.text, e.start) for e in _chunked(p) if e.label in nlp.NAME_LABELS),
                                 p.sentences)
    name_vectors, name_seconds = plan_names([p.names for p in prepared], embedder)
    for p, doc_vectors in zip(prepared, name_vectors):
        p.name_embeddings = doc_vectors
    report.embedding_seconds += stats["seconds"] + name_seconds
    report.node_embedding_seconds += stats["seconds"] + name_seconds
    report.name_embedding_seconds += name_seconds


def prepare(batch: Sequence[DocumentIn], corpus: CorpusInfo, embedder: Embedder,
            spacy_model: str, batch_size: int, report: IngestReport) -> list[_Prepared]:
    """Sentences, chunks, entities, embeddings and (when the corpus maintains them)
    semantic nodes of validated documents (models only, no database): what
    ``write_prepared`` stores."""
    return _prepare(batch, corpus, embedder, spacy_model, batch_size, report)


def _write(db: QueryRunner, corpus: CorpusInfo, prepared: list[_Prepared], report: IngestReport,
           embedder: Embedder) -> None:
    with db.transaction() as conn:
        write_prepared(conn, corpus, prepared, report, embedder=embedder)


def write_prepared(conn: Any, corpus: CorpusInfo, prepared: list[_Prepared],
                   report: IngestReport, *, embedder: Embedder) -> None:
    """Store prepared documents in the caller's transaction, under the corpus
    write lock: new ones are added, changed ones replace their old version,
    ones already indexed at this content are skipped. Semantic nodes are written
    when the corpus maintains them as of the lock (``embedder`` plans the ones a
    preparation before an enable skipped)."""
    cid = corpus.corpus_id
    conn.execute(query("corpus_write_lock"), {"corpus_id": cid})
    with_nodes = "threadrag" in locked_families(conn, cid)
    states = {
        ext: (doc_id, content, indexed)
        for ext, doc_id, content, indexed in conn.execute(query("document_states_for_update"), {
            "corpus_id": cid, "ids": [p.doc.external_id for p in prepared]})
    }
    work, new, reindex, same_content = [], [], [], []
    for p in prepared:
        h = content_hash(p.doc.title, p.doc.body)
        state = states.get(p.doc.external_id)
        if state is None:
            new.append(p)
        elif _is_current(state[1], state[2], h):
            report.unchanged += 1  # indexed meanwhile by a concurrent writer: only metadata may differ
            same_content.append(p.doc)
            continue
        else:
            if state[1] != h:
                conn.execute(query("update_document"), {
                    "corpus_id": cid, "document_id": state[0], "title": p.doc.title,
                    "body": p.doc.body, "metadata": Jsonb(p.doc.metadata)})
            else:
                same_content.append(p.doc)
            reindex.append(state[0])
        work.append(p)
    if same_content:
        conn.execute(query("update_metadata"), {
            "corpus_id": cid, "ids": [d.external_id for d in same_content],
            "metadata": [Jsonb(d.metadata) for d in same_content]})
    if not work:
        return
    if reindex:
        conn.execute(query("unindex_documents"), {
            "corpus_id": cid, "document_ids": reindex, "keep": True})
    ids = {ext: states[ext][0] for ext in states}
    if new:
        ids.update(conn.execute(query("insert_documents"), {
            "corpus_id": cid,
            "ids": [p.doc.external_id for p in new],
            "titles": [p.doc.title for p in new],
            "bodies": [p.doc.body for p in new],
            "metadata": [Jsonb(p.doc.metadata) for p in new],
        }).fetchall())
    chunk_ids = _copy_rows(conn, cid, work, ids, report)
    if with_nodes:
        _write_nodes(conn, cid, work, ids, embedder, report)
    conn.execute(query("index_chunks"), {"corpus_id": cid, "chunk_ids": chunk_ids})
    conn.execute(query("mark_indexed"), {
        "corpus_id": cid, "document_ids": [ids[p.doc.external_id] for p in work]})
    report.added += len(new)
    report.replaced += len(work) - len(new)


def _write_nodes(conn: Any, cid: int, work: list[_Prepared], ids: dict[str, int],
                 embedder: Embedder, report: IngestReport) -> None:
    # Prepared from a CorpusInfo read before the family was enabled: plan now,
    # under the lock, so no document written after an enable lacks its nodes.
    _plan_nodes([p for p in work if p.nodes is None], embedder, report)
    doc_ids = [ids[p.doc.external_id] for p in work]
    report.nodes += copy_nodes(conn, cid, doc_ids, [p.nodes or [] for p in work],
                               [v for p in work for v in p.node_embeddings])
    report.names += copy_names(conn, cid, doc_ids, [p.names for p in work], [p.name_embeddings for p in work])


def _copy_rows(conn: Any, cid: int, work: list[_Prepared],
               ids: dict[str, int], report: IngestReport) -> list[int]:
    n_chunks = sum(len(p.chunks) for p in work)
    chunk_ids = [r[0] for r in conn.execute(query("allocate_chunk_ids"), {"n": n_chunks})]
    next_id = iter(chunk_ids)
    sentences: list[tuple] = []
    chunks: list[tuple] = []
    entity_rows: list[tuple] = []
    for p in work:
        doc_id = ids[p.doc.external_id]
        sentences.extend((cid, doc_id, k, p.doc.body[s:e], s, e) for k, (s, e) in enumerate(p.sentences))
        entities = _unique(p.entities)
        for c, vec in zip(p.chunks, p.embeddings):
            chunk_id = next(next_id)
            chunks.append((cid, chunk_id, doc_id, c.ordinal, c.first, c.last, c.start, c.end, c.text, vec))
            entity_rows.extend((cid, chunk_id, e.text, e.label, e.start, e.end)
                               for e in entities if c.start <= e.start and e.end <= c.end)
    report.sentences += bulk.write(conn, "sentence", sentences)
    report.chunks += bulk.write(conn, "chunk", chunks)
    report.entities += bulk.write(conn, "chunk_entity", entity_rows)
    return chunk_ids


def _chunked(p: _Prepared) -> list[nlp.Entity]:
    """The document's entities that some chunk holds whole: those stored in chunk_entity.
    Chunks are sentence windows, their starts and ends both increasing, so the
    last chunk starting at or before an entity ends furthest: it holds the entity or none does."""
    starts = [c.start for c in p.chunks]
    out = []
    for e in _unique(p.entities):
        i = bisect.bisect_right(starts, e.start) - 1
        if i >= 0 and e.end <= p.chunks[i].end:
            out.append(e)
    return out


def _unique(entities: list[nlp.Entity]) -> list[nlp.Entity]:
    seen: dict[tuple[int, int, str], nlp.Entity] = {}
    for e in entities:
        seen.setdefault((e.start, e.end, e.label), e)
    return list(seen.values())
