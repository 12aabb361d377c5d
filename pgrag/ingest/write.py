"""The write stage: prepared documents -> tables, in one transaction under the
corpus write lock. Document rows, then sentences, chunks and entities in bulk,
then the families' rows (their hooks), then SQL's ``pgrag_internal.index_chunks``
(postings, vocabulary, edges) and the documents' ``indexed_hash``."""

from __future__ import annotations

from typing import Any

from psycopg.types.json import Jsonb

from .. import bulk
from ..context import CorpusInfo, QueryRunner
from ..embed import Embedder
from ..families import locked_families
from ..queries import query
from ..sources import DocumentIn
from .changes import Change, change_of, states_in
from .hooks import hooks_for
from .prepare import Prepared
from .report import IngestReport


def write_batch(db: QueryRunner, corpus: CorpusInfo, prepared: list[Prepared], report: IngestReport,
                embedder: Embedder) -> None:
    """``write_prepared`` in a transaction of its own."""
    with db.transaction() as conn:
        write_prepared(conn, corpus, prepared, report, embedder=embedder)


def write_prepared(conn: Any, corpus: CorpusInfo, prepared: list[Prepared],
                   report: IngestReport, *, embedder: Embedder) -> None:
    """Store prepared documents in the caller's transaction, under the corpus
    write lock: new ones are added, changed ones replace their old version,
    ones already indexed at this content are skipped (the change check, again
    under the lock: a concurrent writer may have indexed them meanwhile). The
    rows of the families the corpus maintains as of the lock are written by
    their hooks (``embedder`` plans the ones a preparation before an enable skipped)."""
    cid = corpus.corpus_id
    conn.execute(query("corpus_write_lock"), {"corpus_id": cid})
    families = hooks_for(locked_families(conn, cid))
    states = states_in(conn, cid, [p.doc.external_id for p in prepared], for_update=True)
    work, new, reindex, same_content = [], [], [], []
    for p in prepared:
        stored = states.get(p.doc.external_id)
        change = change_of(stored, p.doc)
        if change is Change.CURRENT:
            report.unchanged += 1  # indexed meanwhile by a concurrent writer: only metadata may differ
            same_content.append(p.doc)
            continue
        if stored is None:
            new.append(p)
        else:
            if change is Change.CONTENT:
                conn.execute(query("update_document"), {
                    "corpus_id": cid, "document_id": stored.document_id, "title": p.doc.title,
                    "body": p.doc.body, "metadata": Jsonb(p.doc.metadata)})
            else:
                same_content.append(p.doc)
            reindex.append(stored.document_id)
        work.append(p)
    if same_content:
        update_metadata(conn, cid, same_content)
    if not work:
        return
    if reindex:
        conn.execute(query("unindex_documents"), {
            "corpus_id": cid, "document_ids": reindex, "keep": True})
    ids = {ext: s.document_id for ext, s in states.items()}
    if new:
        ids.update(conn.execute(query("insert_documents"), {
            "corpus_id": cid,
            "ids": [p.doc.external_id for p in new],
            "titles": [p.doc.title for p in new],
            "bodies": [p.doc.body for p in new],
            "metadata": [Jsonb(p.doc.metadata) for p in new],
        }).fetchall())
    chunk_ids = _copy_rows(conn, cid, work, ids, report)
    for _, hook in families:
        hook.write(conn, cid, work, ids, embedder, report)
    conn.execute(query("index_chunks"), {"corpus_id": cid, "chunk_ids": chunk_ids})
    conn.execute(query("mark_indexed"), {
        "corpus_id": cid, "document_ids": [ids[p.doc.external_id] for p in work]})
    report.added += len(new)
    report.replaced += len(work) - len(new)


def update_metadata(conn: Any, corpus_id: int, documents: list[DocumentIn]) -> None:
    """Refresh the metadata of documents whose content is unchanged (no re-index)."""
    conn.execute(query("update_metadata"), {
        "corpus_id": corpus_id,
        "ids": [d.external_id for d in documents],
        "metadata": [Jsonb(d.metadata) for d in documents]})


def _copy_rows(conn: Any, cid: int, work: list[Prepared],
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
        entities = p.unique_entities()
        for c, vec in zip(p.chunks, p.embeddings):
            chunk_id = next(next_id)
            chunks.append((cid, chunk_id, doc_id, c.ordinal, c.first, c.last, c.start, c.end, c.text, vec))
            entity_rows.extend((cid, chunk_id, e.text, e.label, e.start, e.end)
                               for e in entities if c.start <= e.start and e.end <= c.end)
    report.sentences += bulk.write(conn, "sentence", sentences)
    report.chunks += bulk.write(conn, "chunk", chunks)
    report.entities += bulk.write(conn, "chunk_entity", entity_rows)
    return chunk_ids
