"""Client ingest and ``index_pending``: the stages run in batches.

validate (``pgrag.sources.validate``, by the caller) -> change detection
(``changes``: unchanged documents only get their metadata refreshed) -> prepare
(``prepare``: spaCy, embeddings, the families' plans) -> write (``write``: one
transaction a batch, under the corpus's write lock). With prefetch the next
``AHEAD`` batches are prepared in threads while this one is written, so the
database's work and the models' overlap, and so do one batch's spaCy parse (one
core) and another's embeddings (every core).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from ..config import in_server
from ..context import CorpusInfo, QueryRunner
from ..embed import Embedder
from ..model_client import RemoteEmbedder
from ..progress import tqdm
from ..queries import query
from ..sources import DocumentIn, validate
from .changes import read_states, unchanged
from .prepare import Prepared, prepare
from .report import IngestReport, add_timings
from .write import update_metadata, write_batch

# Batches prepared ahead of the write. With one, a batch's parse and its
# embeddings ran in turn, and during the parse (spaCy, one core) the other core
# idled; with two, the threads drift into a pipeline where one parses while the
# other embeds (docs/SCALING.md, "Ingest through the runtime").
AHEAD = 2


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
    the next ``AHEAD`` batches' sentences and vectors are computed in threads
    while this batch is written, so the database's work and the models' overlap."""
    started = time.perf_counter()
    report = IngestReport(corpus=corpus.name, documents=len(documents))
    current = unchanged(read_states(db, corpus.corpus_id, [d.external_id for d in documents]), documents)
    todo = [d for d in documents if d.external_id not in current]
    report.unchanged = len(documents) - len(todo)
    if report.unchanged:
        with db.transaction() as conn:
            update_metadata(conn, corpus.corpus_id, [d for d in documents if d.external_id in current])
    batches = [todo[i : i + batch_size] for i in range(0, len(todo), batch_size)]
    ahead = prefetches(embedder) if prefetch is None else prefetch
    waited = 0.0   # with prefetch: the time this thread waited for prepared batches

    def prepare_part(batch: Sequence[DocumentIn]) -> tuple[list[Prepared], IngestReport]:
        part = IngestReport(corpus=corpus.name)
        return prepare(batch, corpus, embedder, spacy_model, batch_size, part), part

    with tqdm(total=len(todo), unit="doc", desc=f"ingest {corpus.name}", disable=not progress or not todo) as bar, \
            ThreadPoolExecutor(max_workers=AHEAD, thread_name_prefix="pgrag-prepare") as pool:
        following: deque[Future[tuple[list[Prepared], IngestReport]]] = deque(
            pool.submit(prepare_part, b) for b in (batches[:AHEAD] if ahead else []))
        try:
            for i, batch in enumerate(batches):
                if not ahead:
                    prepared = prepare(batch, corpus, embedder, spacy_model, batch_size, report)
                else:
                    t_wait = time.perf_counter()
                    prepared, part = following.popleft().result()
                    waited += time.perf_counter() - t_wait
                    if i + AHEAD < len(batches):
                        following.append(pool.submit(prepare_part, batches[i + AHEAD]))
                    add_timings(report, part)
                write_batch(db, corpus, prepared, report, embedder)
                bar.update(len(batch))
        finally:
            for future in following:
                future.cancel()
    if todo:
        with db.transaction() as conn:
            # Under the write lock: two ingests finishing together would otherwise
            # both CREATE INDEX IF NOT EXISTS, and one fails on the catalog's unique key.
            conn.execute(query("corpus_write_lock"), {"corpus_id": corpus.corpus_id})
            conn.execute(query("ensure_chunk_index"), {"corpus_id": corpus.corpus_id})
        refresh_statistics(db, corpus.corpus_id)
    report.total_seconds = time.perf_counter() - started
    # "other" is this thread's own work (chunking, the writes): the total less the
    # time it waited for the models. With prefetch that work overlaps the models'
    # on the batches ahead, so the three timings add up to more than the total.
    report.other_seconds = report.total_seconds - (
        waited if ahead else report.embedding_seconds + report.nlp_seconds)
    return report


def refresh_statistics(db: QueryRunner, corpus_id: int) -> bool:
    """ANALYZE the corpus tables when the planner's statistics do not know the
    corpus yet (``pgrag_internal.refresh_statistics``: until autovacuum catches
    up, a new corpus beside bigger ones is estimated at one row, and its drop or
    lookups by chunk id take the wrong index). Run after the writes have
    committed; returns whether it analyzed."""
    return bool(db.fetch_row("refresh_statistics", {"corpus_id": corpus_id})[0])


def prefetches(embedder: Embedder) -> bool:
    """Whether an ingest prepares ahead by default: in a client whose models
    (embeddings and spaCy) run in the model runtime, where the thread only
    waits on its socket. Never in a backend, where only the main thread may
    touch the server; not with models in process, whose lazy loading in a
    second thread is not safe everywhere (CPython 3.11's ast module, which
    spaCy's and hypothesis's parsing share, failed a test run that way)."""
    return not in_server() and isinstance(embedder, RemoteEmbedder) and embedder.target.serves_nlp


def index_pending(db: Any, corpus: CorpusInfo, *, embedder: Embedder, spacy_model: str,
                  batch_size: int = 64, progress: bool = True) -> IngestReport:
    """Index the documents inserted or changed directly in ``pgrag.document`` (by an
    ORM session, or by an application's INSERT followed by SQL's ``pgrag.index``):
    the same stages, from validate on."""
    rows = db.fetchall("pending_documents", {"corpus_id": corpus.corpus_id})
    docs = validate(
        [{"id": ext, "title": title, "text": body, "metadata": meta} for ext, title, body, meta in rows],
        source=f"corpus {corpus.name!r}")
    return ingest(db, corpus, docs, embedder=embedder, spacy_model=spacy_model, batch_size=batch_size,
                  progress=progress)
