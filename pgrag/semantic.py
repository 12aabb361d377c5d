"""Semantic nodes at ingest and as a backfill (ThreadRAG's Semantic Topology Mapper).

A node is a run of consecutive sentences of one document (``pgrag.segment``
decides the cuts), stored in ``pgrag.semantic_node`` with exact offsets into the
body and an embedding of ``title + "\\n" + text`` (the same text a chunk embeds,
so a node that spans exactly one chunk reuses the chunk's vector). Consecutive
nodes of a document get a narrative edge in ``pgrag.semantic_edge``.

Both are functions of one document only, so the stored rows equal a rebuild
after any sequence of adds, replacements and deletes; semantic and lexical
edges, which depend on other documents, are built at query time
(``pgrag.methods.threadrag``). Sentences are reused from the ``sentence`` table
(no re-splitting); only documents long enough to be cut have their sentences
embedded.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from tqdm import tqdm

from . import bulk
from .embed import Embedder
from .queries import query
from .segment import DEFAULT, SegmentSettings, can_split, segment
from .text import chunk_search_text

if TYPE_CHECKING:
    from .context import Context


@dataclass(frozen=True, slots=True)
class NodeRow:
    ordinal: int
    first: int
    last: int
    start: int
    end: int
    text: str


@dataclass(frozen=True, kw_only=True)
class DocumentText:
    """What segmentation needs of one document; ``chunks`` maps a chunk's
    (start, end) to its embedding, for reuse."""

    title: str
    body: str
    sentences: list[tuple[int, int]]
    chunks: dict[tuple[int, int], np.ndarray]


@dataclass(kw_only=True)
class NodeReport:
    """What a backfill did (seconds)."""

    corpus: str
    documents: int = 0
    nodes: int = 0
    sentences_embedded: int = 0
    nodes_embedded: int = 0
    embedding_seconds: float = 0.0
    total_seconds: float = 0.0


def as_array(vector: object) -> np.ndarray:
    """A pgvector value (or a list) as a float32 array."""
    to_numpy = getattr(vector, "to_numpy", None)
    return np.asarray(to_numpy() if to_numpy else vector, dtype=np.float32)


def plan_nodes(docs: Sequence[DocumentText], embedder: Embedder,
               settings: SegmentSettings = DEFAULT) -> tuple[list[list[NodeRow]], list[np.ndarray], dict[str, float]]:
    """Nodes of each document and one embedding per node (documents in order),
    plus counts and the seconds spent embedding."""
    splittable = [i for i, d in enumerate(docs) if can_split(d.sentences, settings)]
    texts = [docs[i].body[s:e] for i in splittable for s, e in docs[i].sentences]
    t0 = time.perf_counter()
    sentence_vectors = embedder.encode(texts) if texts else None
    spent = time.perf_counter() - t0
    vectors_of: dict[int, np.ndarray] = {}
    offset = 0
    for i in splittable:
        n = len(docs[i].sentences)
        assert sentence_vectors is not None
        vectors_of[i] = sentence_vectors[offset: offset + n]
        offset += n
    nodes: list[list[NodeRow]] = []
    for i, d in enumerate(docs):
        spans = segment(d.sentences, vectors_of.get(i), settings)
        nodes.append([NodeRow(ordinal=k, first=f, last=l, start=d.sentences[f][0], end=d.sentences[l][1],
                              text=d.body[d.sentences[f][0]: d.sentences[l][1]])
                      for k, (f, l) in enumerate(spans)])
    embeddings: list[np.ndarray | None] = []
    missing: list[int] = []
    for d, doc_nodes in zip(docs, nodes):
        for node in doc_nodes:
            reused = d.chunks.get((node.start, node.end))
            embeddings.append(reused)
            if reused is None:
                missing.append(len(embeddings) - 1)
    if missing:
        flat = [(d, n) for d, doc_nodes in zip(docs, nodes) for n in doc_nodes]
        t1 = time.perf_counter()
        fresh = embedder.encode([chunk_search_text(flat[j][0].title, flat[j][1].text) for j in missing])
        spent += time.perf_counter() - t1
        for j, vec in zip(missing, fresh):
            embeddings[j] = vec
    stats = {"sentences_embedded": float(len(texts)), "nodes_embedded": float(len(missing)), "seconds": spent}
    return nodes, [e for e in embeddings if e is not None], stats


def copy_nodes(conn: Any, corpus_id: int, document_ids: Sequence[int],
               nodes: Sequence[Sequence[NodeRow]], embeddings: Sequence[np.ndarray]) -> int:
    """Write nodes (documents in the order of ``document_ids``) and their narrative edges."""
    vectors = iter(embeddings)
    rows = [(corpus_id, doc_id, n.ordinal, n.first, n.last, n.start, n.end, n.text, next(vectors))
            for doc_id, doc_nodes in zip(document_ids, nodes) for n in doc_nodes]
    count = bulk.write(conn, "semantic_node", rows)
    conn.execute(query("insert_narrative_edges"), {"corpus_id": corpus_id, "document_ids": list(document_ids)})
    return count


def build_semantic_nodes(corpus: "Context", *, batch_size: int = 256, progress: bool = True,
                         settings: SegmentSettings = DEFAULT) -> NodeReport:
    """Make the corpus maintain the ``threadrag`` family (later ingests build the
    nodes of what they write), then build the nodes of every indexed document that
    has none. Resumable: each batch commits on its own, and a re-run continues
    with the documents still missing."""
    from .families import enable

    started = time.perf_counter()
    report = NodeReport(corpus=corpus.name)
    # Enabled (and committed) before the documents are listed: a document written
    # after the list was read is an ingest that saw the family and built its nodes.
    enable(corpus.db, corpus.id, "threadrag")
    todo = [r[0] for r in corpus.db.fetchall("documents_without_nodes", {"corpus_id": corpus.id})]
    with tqdm(total=len(todo), unit="doc", desc=f"semantic nodes {corpus.name}",
              disable=not progress or not todo) as bar:
        for i in range(0, len(todo), batch_size):
            batch = todo[i: i + batch_size]
            if not _backfill_batch(corpus, batch, settings, report):
                break   # disabled meanwhile: stop adding nodes nobody maintains
            bar.update(len(batch))
    report.total_seconds = time.perf_counter() - started
    return report


def _backfill_batch(corpus: "Context", document_ids: list[int], settings: SegmentSettings,
                    report: NodeReport) -> bool:
    """Nodes of one batch of documents, committed; False (nothing written) when the
    corpus no longer maintains the family."""
    from .families import locked_families

    params = {"corpus_id": corpus.id, "document_ids": document_ids}
    rows = corpus.db.fetchall("segmentation_input", params)
    chunk_vectors: dict[int, dict[tuple[int, int], np.ndarray]] = {}
    for doc_id, start, end, vec in corpus.db.fetchall("document_chunk_vectors", params):
        chunk_vectors.setdefault(doc_id, {})[(start, end)] = as_array(vec)
    docs = [DocumentText(title=title, body=body, sentences=list(zip(starts, ends)),
                         chunks=chunk_vectors.get(doc_id, {}))
            for doc_id, title, body, _hash, starts, ends in rows]
    nodes, embeddings, stats = plan_nodes(docs, corpus.embedder, settings)
    report.embedding_seconds += stats["seconds"]
    report.sentences_embedded += int(stats["sentences_embedded"])
    report.nodes_embedded += int(stats["nodes_embedded"])
    with corpus.db.transaction() as conn:
        conn.execute(query("corpus_write_lock"), {"corpus_id": corpus.id})
        if "threadrag" not in locked_families(conn, corpus.id):
            return False
        # A document replaced or deleted (or backfilled) meanwhile is skipped:
        # its current version gets its nodes from ingest.
        ready = {r[0] for r in conn.execute(query("documents_ready_for_nodes"), {
            "corpus_id": corpus.id, "document_ids": [r[0] for r in rows], "hashes": [r[3] for r in rows]})}
        keep_ids, keep_nodes, keep_vectors = [], [], []
        vectors = iter(embeddings)
        for row, doc_nodes in zip(rows, nodes):
            vecs = [next(vectors) for _ in doc_nodes]
            if row[0] in ready:
                keep_ids.append(row[0])
                keep_nodes.append(doc_nodes)
                keep_vectors.extend(vecs)
        report.nodes += copy_nodes(conn, corpus.id, keep_ids, keep_nodes, keep_vectors)
        report.documents += len(keep_ids)
    return True
