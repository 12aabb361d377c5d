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

The family also stores name vectors (``pgrag.entity_vector``): the vector of
each distinct name-like entity a document mentions, keyed by
``pgrag.nlp.name_key``, so that ThreadRAG looks up the names it retrieves for
instead of encoding them per question. Only an uncased model's key has the
name's own vector, so a cased model stores none (and ThreadRAG encodes).
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from . import bulk
from .embed import Embedder
from .nlp import NAME_LABELS, name_key
from .progress import tqdm
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


@dataclass(frozen=True, slots=True)
class NameRow:
    key: str          # pgrag.nlp.name_key of the name
    sentence: int     # the sentence of its first mention


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
    names: int = 0                 # name vectors stored
    terms_filled: int = 0          # older nodes given their stored terms (migration 0011)
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
        nodes.append([NodeRow(ordinal=k, first=first, last=last, start=d.sentences[first][0],
                              end=d.sentences[last][1], text=d.body[d.sentences[first][0]: d.sentences[last][1]])
                      for k, (first, last) in enumerate(spans)])
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


def document_names(mentions: Iterable[tuple[str, int]], sentences: Sequence[tuple[int, int]]) -> list[NameRow]:
    """The distinct name keys of a document's name-like mentions (text, start
    offset), in text order, each with the sentence of its first mention."""
    starts = [s for s, _ in sentences]
    out: dict[str, NameRow] = {}
    for text, start in sorted(mentions, key=lambda m: m[1]):
        key = name_key(text)
        if key and key not in out:
            out[key] = NameRow(key=key, sentence=max(0, bisect.bisect_right(starts, start) - 1))
    return list(out.values())


def plan_names(names: Sequence[Sequence[NameRow]], embedder: Embedder) -> tuple[list[list[np.ndarray]], float]:
    """One vector per name of each document, every distinct key encoded once,
    and the seconds spent. A cased model gets none: its key's vector is not the name's."""
    if not getattr(embedder, "uncased", False):
        return [[] for _ in names], 0.0
    keys = list(dict.fromkeys(n.key for doc in names for n in doc))
    t0 = time.perf_counter()
    vectors = dict(zip(keys, embedder.encode(keys))) if keys else {}
    return [[vectors[n.key] for n in doc] for doc in names], time.perf_counter() - t0


def copy_names(conn: Any, corpus_id: int, document_ids: Sequence[int], names: Sequence[Sequence[NameRow]],
               vectors: Sequence[Sequence[np.ndarray]]) -> int:
    """Write name vectors (documents in the order of ``document_ids``)."""
    rows = [(corpus_id, doc_id, n.key, n.sentence, v)
            for doc_id, doc_names, doc_vectors in zip(document_ids, names, vectors)
            for n, v in zip(doc_names, doc_vectors)]
    return bulk.write(conn, "entity_vector", rows)


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
    has none, and store the terms of nodes written without them (before migration
    0011). Resumable: each batch commits on its own, and a re-run continues
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
    # Documents given nodes before name vectors existed (migration 0010) get them now.
    todo = [r[0] for r in corpus.db.fetchall("documents_without_entity_vectors", {
        "corpus_id": corpus.id, "labels": list(NAME_LABELS)})] if getattr(corpus.embedder, "uncased", False) else []
    with tqdm(total=len(todo), unit="doc", desc=f"name vectors {corpus.name}",
              disable=not progress or not todo) as bar:
        for i in range(0, len(todo), batch_size):
            batch = todo[i: i + batch_size]
            if not _backfill_names(corpus, batch, report):
                break
            bar.update(len(batch))
    # Nodes written before their terms were stored (migration 0011) get them now.
    with _maintaining(corpus) as conn:
        if conn is not None:
            report.terms_filled = int(conn.execute(query("fill_node_terms"), {"corpus_id": corpus.id}).fetchone()[0])
    report.total_seconds = time.perf_counter() - started
    return report


def _names_of(corpus: "Context", rows: Sequence[Sequence[Any]]) -> list[list[NameRow]]:
    """The names of the documents of ``segmentation_input`` rows, from their stored entities."""
    mentions: dict[int, list[tuple[str, int]]] = {}
    for doc_id, entity, start in corpus.db.fetchall("document_names", {
            "corpus_id": corpus.id, "document_ids": [r[0] for r in rows], "labels": list(NAME_LABELS)}):
        mentions.setdefault(doc_id, []).append((entity, start))
    return [document_names(mentions.get(r[0], []), list(zip(r[4], r[5]))) for r in rows]


@contextmanager
def _maintaining(corpus: "Context") -> Iterator[Any]:
    """A transaction under the corpus write lock, or None when the corpus no longer
    maintains the family: a backfill batch that was planned before a ``--disable``
    must not write what nobody maintains."""
    from .families import locked_families

    with corpus.db.transaction() as conn:
        conn.execute(query("corpus_write_lock"), {"corpus_id": corpus.id})
        yield conn if "threadrag" in locked_families(conn, corpus.id) else None


def _backfill_names(corpus: "Context", document_ids: list[int], report: NodeReport) -> bool:
    """Name vectors of one batch of documents that have nodes, committed; False
    (nothing written) when the corpus no longer maintains the family."""
    rows = corpus.db.fetchall("segmentation_input", {"corpus_id": corpus.id, "document_ids": document_ids})
    names = _names_of(corpus, rows)
    vectors, seconds = plan_names(names, corpus.embedder)
    report.embedding_seconds += seconds
    with _maintaining(corpus) as conn:
        if conn is None:
            return False
        ready = {r[0] for r in conn.execute(query("documents_ready_for_entity_vectors"), {
            "corpus_id": corpus.id, "document_ids": [r[0] for r in rows], "hashes": [r[3] for r in rows]})}
        keep = [i for i, r in enumerate(rows) if r[0] in ready]
        report.names += copy_names(conn, corpus.id, [rows[i][0] for i in keep], [names[i] for i in keep],
                                   [vectors[i] for i in keep])
    return True


def _backfill_batch(corpus: "Context", document_ids: list[int], settings: SegmentSettings,
                    report: NodeReport) -> bool:
    """Nodes of one batch of documents, committed; False (nothing written) when the
    corpus no longer maintains the family."""
    params = {"corpus_id": corpus.id, "document_ids": document_ids}
    rows = corpus.db.fetchall("segmentation_input", params)
    chunk_vectors: dict[int, dict[tuple[int, int], np.ndarray]] = {}
    for doc_id, start, end, vec in corpus.db.fetchall("document_chunk_vectors", params):
        chunk_vectors.setdefault(doc_id, {})[(start, end)] = as_array(vec)
    docs = [DocumentText(title=title, body=body, sentences=list(zip(starts, ends)),
                         chunks=chunk_vectors.get(doc_id, {}))
            for doc_id, title, body, _hash, starts, ends in rows]
    nodes, embeddings, stats = plan_nodes(docs, corpus.embedder, settings)
    names = _names_of(corpus, rows)
    name_vectors, name_seconds = plan_names(names, corpus.embedder)
    report.embedding_seconds += stats["seconds"] + name_seconds
    report.sentences_embedded += int(stats["sentences_embedded"])
    report.nodes_embedded += int(stats["nodes_embedded"])
    with _maintaining(corpus) as conn:
        if conn is None:
            return False
        # A document replaced or deleted (or backfilled) meanwhile is skipped:
        # its current version gets its nodes from ingest.
        ready = {r[0] for r in conn.execute(query("documents_ready_for_nodes"), {
            "corpus_id": corpus.id, "document_ids": [r[0] for r in rows], "hashes": [r[3] for r in rows]})}
        keep_ids, keep_nodes, keep_vectors, keep_names, keep_name_vectors = [], [], [], [], []
        vectors = iter(embeddings)
        for row, doc_nodes, doc_names, doc_name_vectors in zip(rows, nodes, names, name_vectors):
            vecs = [next(vectors) for _ in doc_nodes]
            if row[0] in ready:
                keep_ids.append(row[0])
                keep_nodes.append(doc_nodes)
                keep_vectors.extend(vecs)
                keep_names.append(doc_names)
                keep_name_vectors.append(doc_name_vectors)
        report.nodes += copy_nodes(conn, corpus.id, keep_ids, keep_nodes, keep_vectors)
        # A document whose nodes alone were lost may still hold its names: written afresh.
        conn.execute(query("drop_entity_vectors_of"), {"corpus_id": corpus.id, "document_ids": keep_ids})
        report.names += copy_names(conn, corpus.id, keep_ids, keep_names, keep_name_vectors)
        report.documents += len(keep_ids)
    return True
