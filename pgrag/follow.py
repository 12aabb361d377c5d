"""Corpora that follow an application's own table (README "Following an application table").

``pgrag.attach`` (sql/70_follow.sql) puts row triggers on the table; they append the
key of every changed row to ``pgrag.follow_queue`` in the application's own
transaction. Processing brings the corpus up to date from the table's *current*
rows, so any number of items for one key collapse into one write:

- ``process_batch`` is one step: lock a batch of due items (``FOR UPDATE SKIP
  LOCKED``), read their rows, prepare the changed documents (spaCy, embeddings),
  then, under the corpus write lock, re-read the rows and write only those still
  as prepared, delete the items it settled and record failures (retry with
  backoff, then parked) — all in one transaction. It needs only
  ``db.transaction()`` yielding an object whose ``execute(sql, params)`` returns
  rows, and the ingest functions, so the in-server runtime (``SELECT
  pgrag.index('wiki')``) runs the same code over SPI.
- ``process_queue`` repeats it until nothing is due, isolating failures.
- ``Worker`` is the long-running client (``pgrag worker``): psycopg, LISTEN/NOTIFY,
  no polling.

Why re-reading under the lock is enough for exactness: every change of a row
commits together with its queue item, and an item is deleted only by a
transaction that wrote the row as it was *after* the item was visible. A
concurrent writer of the same key re-reads under the same lock, so the last
write always carries the newest committed row; a change committed after that
re-read has its own item, still queued.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .config import Settings
from .context import CorpusInfo
from .embed import Embedder
from .exceptions import InputError, PgragError
from .ingest import (
    IngestReport,
    describe,
    prepare_each,
    refresh_statistics,
    states_in,
    unchanged,
    update_metadata,
    write_prepared,
)
from .queries import query
from .sources import DocumentIn, validate

if TYPE_CHECKING:
    from .context import Context, QueryRunner

CHANNEL = "pgrag_follow"
log = logging.getLogger("pgrag.worker")


@dataclass(frozen=True, kw_only=True)
class Attachment:
    """A corpus that follows an application table (a row of ``pgrag.follow``)."""

    corpus_id: int
    corpus: str
    source_schema: str
    source_table: str
    id_column: str
    text_column: str
    title_column: str | None
    metadata_columns: tuple[str, ...]
    triples: str | None
    max_attempts: int
    retry_seconds: float
    attached_at: datetime
    last_processed_at: datetime | None

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> "Attachment":
        return cls(corpus_id=row[0], corpus=row[1], source_schema=row[2], source_table=row[3],
                   id_column=row[4], text_column=row[5], title_column=row[6],
                   metadata_columns=tuple(row[7] or ()), triples=row[8], max_attempts=row[9],
                   retry_seconds=float(row[10]), attached_at=row[11], last_processed_at=row[12])

    @property
    def source(self) -> str:
        return f"{self.source_schema}.{self.source_table}"


@dataclass(frozen=True, kw_only=True)
class SyncStatus:
    """One row of ``pgrag.sync_status``."""

    corpus: str
    source: str
    pending: int
    in_progress: int
    retrying: int
    parked: int
    last_error: str | None
    last_processed_at: datetime | None
    lag_seconds: float

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> "SyncStatus":
        return cls(corpus=row[0], source=row[1], pending=int(row[2]), in_progress=int(row[3]),
                   retrying=int(row[4]), parked=int(row[5]), last_error=row[6], last_processed_at=row[7],
                   lag_seconds=float(row[8] or 0.0))


@dataclass(kw_only=True)
class BatchReport:
    """What one ``process_batch`` did."""

    corpus: str
    items: int = 0                 # queue items taken
    keys: int = 0                  # distinct source keys among them
    indexed: int = 0               # documents added or replaced
    deleted: int = 0               # documents removed (row gone, or no text)
    unchanged: int = 0             # already indexed at this content (metadata refreshed)
    stale: int = 0                 # row changed while preparing: left queued, redone next batch
    failed: int = 0                # keys that failed (retry later)
    parked: int = 0                # of which parked (max_attempts reached)
    done_item_ids: list[int] = field(default_factory=list)
    seconds: float = 0.0
    ingest: IngestReport | None = None


# -- attach / detach / status --------------------------------------------------

def attach(db: "QueryRunner", corpus: str, source: str, *, id_column: str, text_column: str,
           title_column: str | None = None, metadata_columns: Sequence[str] = (),
           triples: str | None = None, embedding_model: str | None = None,
           max_attempts: int = 5, retry_seconds: float = 10.0) -> int:
    """Make ``corpus`` follow ``source`` (``"schema.table"``); returns the number of
    queue items enqueued (every existing row). Raises ``AttachError`` and changes
    nothing on a bad call. A new corpus gets ``embedding_model`` (default: the
    configured one, ``PGRAG_EMBEDDING_MODEL``)."""
    from .embed import get_embedder

    model = embedding_model or Settings.from_env().embedding_model
    row = db.fetchone("corpus_by_name", {"name": corpus})
    dim = row[3] if row is not None else get_embedder(model).dim
    return int(db.fetch_row("follow_attach", {
        "corpus": corpus, "source": source, "id_column": id_column, "text_column": text_column,
        "title_column": title_column, "metadata_columns": list(metadata_columns), "triples": triples,
        "embedding_model": model, "embedding_dim": dim, "max_attempts": max_attempts,
        "retry_seconds": float(retry_seconds)})[0])


def detach(db: "QueryRunner", corpus: str, *, drop_corpus: bool = False) -> None:
    """Stop following: remove the triggers and the queue (and the corpus, if asked)."""
    db.fetch_row("follow_detach", {"corpus": corpus, "drop_corpus": drop_corpus})


def attachments(db: "QueryRunner", corpus: str | None = None) -> list[Attachment]:
    return [Attachment.from_row(r) for r in db.fetchall("follow_list", {"corpus": corpus})]


def sync_status(db: "QueryRunner", corpus: str | None = None) -> list[SyncStatus]:
    return [SyncStatus.from_row(r) for r in db.fetchall("sync_status", {"corpus": corpus})]


def requeue(db: "QueryRunner", corpus: str, keys: Sequence[str] | None = None) -> int:
    """Put parked items (all of the corpus's, or those of ``keys``) back in the queue."""
    att = _attachment(db, corpus)
    return int(db.fetch_row("follow_requeue", {
        "corpus_id": att.corpus_id, "keys": list(keys) if keys is not None else None})[0])


def parked(db: "QueryRunner", corpus: str) -> list[dict[str, Any]]:
    """Parked items with their errors."""
    att = _attachment(db, corpus)
    cols = ("item_id", "key", "op", "attempts", "error", "enqueued_at", "parked_at")
    return [dict(zip(cols, r)) for r in db.fetchall("follow_parked", {"corpus_id": att.corpus_id})]


def _attachment(db: "QueryRunner", corpus: str) -> Attachment:
    found = attachments(db, corpus)
    if not found:
        from .exceptions import AttachError

        raise AttachError(f"corpus {corpus!r} is not attached to a table")
    return found[0]


# -- processing (client and server) -------------------------------------------

_Row = tuple[str, str, str | None, Any]   # key, title, body, metadata


def _rows(tx: Any, name: str, params: dict[str, Any]) -> list[tuple]:
    return [tuple(r) for r in tx.execute(query(name), params)]


def process_batch(db: Any, corpus: CorpusInfo, *, embedder: Embedder, spacy_model: str,
                  limit: int = 64, keys: Sequence[str] | None = None) -> BatchReport | None:
    """Take up to ``limit`` due items (or the items of ``keys``) and settle them in
    one transaction; ``None`` when nothing was due. A key whose text is invalid
    or whose preparation fails is recorded as failed (the rest go on); a database
    error rolls the whole batch back and is raised (``process_queue`` then
    retries its keys one at a time)."""
    started = time.perf_counter()
    cid = corpus.corpus_id
    report = BatchReport(corpus=corpus.name)
    with db.transaction() as tx:
        items = _rows(tx, "follow_take", {"corpus_id": cid, "limit": limit,
                                          "keys": list(keys) if keys is not None else None})
        if not items:
            return None
        _rows(tx, "follow_hold", {"item_ids": [i for i, _, _ in items]})
        by_key: dict[str, list[tuple[int, int]]] = {}
        for item_id, key, attempts in items:
            by_key.setdefault(key, []).append((item_id, attempts))
        report.items, report.keys = len(items), len(by_key)
        key_list = list(by_key)
        seen = _source(tx, cid, key_list)

        failures: dict[str, str] = {}
        docs: dict[str, DocumentIn] = {}
        for key in key_list:
            row = seen.get(key)
            if row is None or row[2] is None:
                continue                                   # a deletion
            try:
                docs[key] = validate([{"id": key, "title": row[1], "text": row[2], "metadata": row[3]}],
                                     source=f"{corpus.name} row {key!r}")[0]
            except InputError as exc:
                failures[key] = str(exc)
        current = unchanged(states_in(tx, cid, list(docs)), docs.values())
        ingest_report = IngestReport(corpus=corpus.name)
        prepared, prep_failures = prepare_each(
            [d for k, d in docs.items() if k not in current], corpus, embedder, spacy_model, ingest_report)
        failures.update(prep_failures)

        # Under the corpus write lock, only what is still as read gets written.
        tx.execute(query("corpus_write_lock"), {"corpus_id": cid})
        now = _source(tx, cid, key_list)
        stale = {k for k in key_list if now.get(k) != seen.get(k)}
        if current - stale:
            # Skipped as already indexed: still so? (another worker may have written meanwhile)
            still = sorted(current - stale)
            stale |= set(still) - unchanged(states_in(tx, cid, still), (docs[k] for k in still))
        report.stale = len(stale)

        gone = [k for k in key_list if k not in stale and (seen.get(k) is None or seen[k][2] is None)]
        if gone:
            ids = [r[0] for r in _rows(tx, "document_ids", {"corpus_id": cid, "ids": gone})]
            if ids:
                tx.execute(query("unindex_documents"), {"corpus_id": cid, "document_ids": ids, "keep": False})
            report.deleted = len(ids)
        same = sorted(current - stale)
        if same:
            update_metadata(tx, cid, [docs[k] for k in same])
            report.unchanged = len(same)
        to_write = [p for p in prepared if p.doc.external_id not in stale]
        if to_write:
            write_prepared(tx, corpus, to_write, ingest_report, embedder=embedder)
            tx.execute(query("ensure_chunk_index"), {"corpus_id": cid})
            report.indexed = ingest_report.added + ingest_report.replaced

        failed = {k: e for k, e in failures.items() if k not in stale}
        done = [i for k in key_list if k not in stale and k not in failed for i, _ in by_key[k]]
        if done:
            tx.execute(query("follow_done"), {"corpus_id": cid, "item_ids": done})
        if failed:
            newest = {k: max(by_key[k]) for k in failed}
            parked_now = _rows(tx, "follow_failed", {
                "corpus_id": cid,
                "drop_ids": [i for k in failed for i, _ in by_key[k] if i != newest[k][0]],
                "item_ids": [newest[k][0] for k in failed],
                "attempts": [newest[k][1] + 1 for k in failed],
                "errors": [failed[k] for k in failed]})
            report.failed = len(failed)
            report.parked = sum(1 for _, is_parked in parked_now if is_parked)
        tx.execute(query("follow_processed"), {"corpus_id": cid})
        report.done_item_ids = done
    report.ingest = ingest_report
    report.seconds = time.perf_counter() - started
    return report


def _source(tx: Any, corpus_id: int, keys: list[str]) -> dict[str, _Row]:
    rows = _rows(tx, "follow_source", {"corpus_id": corpus_id, "keys": keys})
    return {r[0]: (r[0], r[1], r[2], r[3]) for r in rows}


def record_failure(db: Any, corpus_id: int, key: str, error: str) -> None:
    """Count a failed attempt on ``key``'s items (those not held by another worker)."""
    with db.transaction() as tx:
        items = _rows(tx, "follow_take", {"corpus_id": corpus_id, "limit": 1, "keys": [key]})
        if items:
            newest = max((i, a) for i, _, a in items)
            _rows(tx, "follow_failed", {
                "corpus_id": corpus_id, "drop_ids": [i for i, _, _ in items if i != newest[0]],
                "item_ids": [newest[0]], "attempts": [newest[1] + 1], "errors": [error[:2000]]})


def process_queue(db: Any, corpus: CorpusInfo, *, embedder: Embedder, spacy_model: str,
                  batch_size: int = 64, max_batches: int | None = None,
                  on_batch: Callable[[BatchReport], None] | None = None) -> list[BatchReport]:
    """Process batches until nothing is due (what ``pgrag.index('wiki')`` runs in
    the server). A batch that fails as a whole is retried key by key, and a key
    that still fails gets a failed attempt recorded, so the rest go on."""
    reports: list[BatchReport] = []
    while max_batches is None or len(reports) < max_batches:
        try:
            report = process_batch(db, corpus, embedder=embedder, spacy_model=spacy_model, limit=batch_size)
        except Exception as exc:  # noqa: BLE001 - isolated key by key below
            log.warning("batch of %s failed (%s); retrying its keys one at a time", corpus.name, exc)
            report = _one_by_one(db, corpus, embedder, spacy_model)
        if report is None:
            break
        reports.append(report)
        if on_batch is not None:
            on_batch(report)
    if any(r.indexed for r in reports):
        refresh_statistics(db, corpus.corpus_id)
    return reports


def _one_by_one(db: Any, corpus: CorpusInfo, embedder: Embedder, spacy_model: str) -> BatchReport | None:
    with db.transaction() as tx:
        keys = sorted({k for _, k, _ in _rows(tx, "follow_take", {
            "corpus_id": corpus.corpus_id, "limit": 64, "keys": None})})
    if not keys:
        return None
    total = BatchReport(corpus=corpus.name)
    for key in keys:
        try:
            r = process_batch(db, corpus, embedder=embedder, spacy_model=spacy_model, limit=1, keys=[key])
        except Exception as exc:  # noqa: BLE001 - recorded on the key's item
            record_failure(db, corpus.corpus_id, key, describe(exc))
            total.failed += 1
            continue
        if r is not None:
            for name in ("items", "keys", "indexed", "deleted", "unchanged", "stale", "failed", "parked"):
                setattr(total, name, getattr(total, name) + getattr(r, name))
            total.done_item_ids += r.done_item_ids
    return total


def sync(ctx: "Context", *, batch_size: int = 64, on_batch: Callable[[BatchReport], None] | None = None,
         attachment: Attachment | None = None) -> list[BatchReport]:
    """Process the queue of ``ctx``'s corpus until nothing is due, then extract
    triples from the new chunks when the attachment asks for them (resumable:
    every chunk not yet extracted; ``llm`` triples with ``ctx.llm``). The same
    work in both homes: ``kb.sync()`` and the worker in a client, ``SELECT
    pgrag.index('wiki')`` in the server."""
    from .extract import extract_triples

    att = attachment or _attachment(ctx.db, ctx.name)
    reports = process_queue(ctx.db, ctx.info, embedder=ctx.embedder, spacy_model=ctx.spacy_model,
                            batch_size=batch_size, on_batch=on_batch)
    if att.triples:
        extract_triples(ctx, att.triples, llm=ctx.llm, progress=False)
    return reports


# -- the long-running worker (client side, psycopg) ---------------------------

@dataclass(kw_only=True)
class WorkerReport:
    batches: int = 0
    items: int = 0
    indexed: int = 0
    deleted: int = 0
    failed: int = 0
    parked: int = 0
    wakeups: int = 0               # times the worker woke from waiting (notifications, retry timers)
    done_item_ids: list[int] = field(default_factory=list)


class Worker:
    """Follows the queue of every attached corpus (or one): drains what is due,
    then sleeps on LISTEN pgrag_follow until a trigger notifies, a retry comes
    due, or ``idle_seconds`` pass. Several workers may run at once."""

    def __init__(self, db: "QueryRunner", *, corpus: str | None = None, batch_size: int = 64,
                 idle_seconds: float = 60.0, on_batch: Callable[[BatchReport], None] | None = None,
                 settings: Settings | None = None) -> None:
        self.db = db
        self.settings = settings or Settings.from_env()
        self.corpus = corpus
        self.batch_size = batch_size
        self.idle_seconds = idle_seconds
        self.on_batch = on_batch
        self.report = WorkerReport()
        self.idle = threading.Event()       # set while waiting for work (tests, status)
        self._stop = threading.Event()

    def stop(self) -> None:
        """Ask a running worker to return (wakes it)."""
        self._stop.set()
        with contextlib.suppress(PgragError):
            self.db.fetch_row("follow_wake")

    def run(self, *, once: bool = False) -> WorkerReport:
        """Work until stopped; with ``once``, until nothing is due."""
        import psycopg

        with psycopg.connect(self.db.dsn, autocommit=True) as listener:
            listener.execute(f"LISTEN {CHANNEL}")   # a constant, not input
            if self.corpus is not None:
                _attachment(self.db, self.corpus)  # fail early on a corpus that is not attached
            while not self._stop.is_set():
                self.drain()
                if once:
                    break
                self.idle.set()
                timeout = self._timeout()
                for _ in listener.notifies(timeout=timeout, stop_after=1):
                    pass
                for _ in listener.notifies(timeout=0.0):   # fold the backlog into this wake-up
                    pass
                self.idle.clear()
                self.report.wakeups += 1
        return self.report

    def drain(self) -> None:
        for att in attachments(self.db, self.corpus):
            sync(self._context(att), batch_size=self.batch_size, on_batch=self._batch_done, attachment=att)

    def _context(self, att: Attachment) -> "Context":
        """The attached corpus as a method sees it, with the LLM of PGRAG_LLM_*
        for an attachment whose triples come from the LLM."""
        from .context import Context, lookup_corpus
        from .exceptions import CorpusNotFound
        from .llm import LLM, LLMSettings

        info = lookup_corpus(self.db, att.corpus)
        if info is None:
            raise CorpusNotFound(f"corpus {att.corpus!r} does not exist")
        llm = LLM(self.db, info.corpus_id, LLMSettings.from_env()) if att.triples == "llm" else None
        return Context(db=self.db, info=info, spacy_model=self.settings.spacy_model, llm=llm)

    def _batch_done(self, r: BatchReport) -> None:
        w = self.report
        w.batches += 1
        w.items += r.items
        w.indexed += r.indexed
        w.deleted += r.deleted
        w.failed += r.failed
        w.parked += r.parked
        w.done_item_ids += r.done_item_ids
        if self.on_batch is not None:
            self.on_batch(r)

    def _timeout(self) -> float:
        ids = [a.corpus_id for a in attachments(self.db, self.corpus)]
        due = self.db.fetch_row("follow_next_due", {"corpus_ids": ids})[0] if ids else None
        return max(0.05, min(self.idle_seconds, due if due is not None else self.idle_seconds))


def run_in_foreground(worker: Worker, *, once: bool = False,
                      on_start: Callable[[], None] | None = None) -> WorkerReport:
    """Run ``worker`` as a process's main work (``pgrag worker``): SIGTERM asks
    it to stop after its batch, Ctrl-C stops it at once; its report either way.
    ``on_start`` runs once SIGTERM is handled (a supervisor told "started" may
    stop it at once)."""
    import signal

    signal.signal(signal.SIGTERM, lambda *_: worker.stop())
    if on_start is not None:
        on_start()
    try:
        return worker.run(once=once)
    except KeyboardInterrupt:
        return worker.report


@contextlib.contextmanager
def running(worker: Worker) -> Iterator[threading.Thread]:
    """Run ``worker`` in a thread for the duration of a ``with`` block."""
    errors: list[BaseException] = []

    def target() -> None:
        try:
            worker.run()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            errors.append(exc)

    thread = threading.Thread(target=target, name="pgrag-worker", daemon=True)
    thread.start()
    try:
        yield thread
    finally:
        worker.stop()
        thread.join(timeout=120)
    if errors:
        raise errors[0]
