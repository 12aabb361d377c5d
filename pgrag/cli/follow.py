"""Corpora that follow an application table (pgrag.follow): ``attach`` and
``detach``, the ``worker`` that applies the queued changes, its ``status``,
and ``requeue`` for parked items."""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any

import click

from .common import dsn_option, echo_json, json_option, open_database


@click.command()
@click.argument("corpus")
@click.argument("table")
@click.option("--id-column", required=True, help="Unique key column (text, integer or uuid).")
@click.option("--text-column", required=True, help="Column holding the document text.")
@click.option("--title-column", default=None, help="Column holding the title (optional).")
@click.option("--metadata-column", "metadata_columns", multiple=True,
              help="Column copied into the document metadata (repeatable).")
@click.option("--triples", type=click.Choice(["spacy", "llm"]), default=None,
              help="Also extract triples from new chunks when processing.")
@click.option("--model", default=None, help="Embedding model of a new corpus (default: $PGRAG_EMBEDDING_MODEL).")
@click.option("--max-attempts", type=click.IntRange(min=1), default=5, show_default=True,
              help="Failed attempts before an item is parked.")
@click.option("--retry-seconds", type=click.FloatRange(min=0), default=10.0, show_default=True,
              help="First retry delay; doubles with each failure.")
@dsn_option
def attach(corpus: str, table: str, id_column: str, text_column: str, title_column: str | None,
           metadata_columns: tuple[str, ...], triples: str | None, model: str | None, max_attempts: int,
           retry_seconds: float, dsn: str | None) -> None:
    """Make CORPUS follow the application table TABLE (schema.table): triggers
    queue every change, `pgrag worker` applies them. Existing rows are queued.

        pgrag attach wiki app.articles --id-column id --text-column body --title-column title
    """
    n = open_database(dsn).attach(corpus, table, id_column=id_column, text_column=text_column,
                                  title_column=title_column, metadata_columns=metadata_columns, triples=triples,
                                  embedding_model=model, max_attempts=max_attempts, retry_seconds=retry_seconds)
    click.echo(f"{corpus} follows {table}: {n} rows queued; run `pgrag worker` to index them")


@click.command()
@click.argument("corpus")
@click.option("--drop-corpus", is_flag=True, help="Also delete the corpus and everything derived.")
@dsn_option
def detach(corpus: str, drop_corpus: bool, dsn: str | None) -> None:
    """Stop CORPUS following its table: remove the triggers and the queue."""
    open_database(dsn).detach(corpus, drop_corpus=drop_corpus)
    click.echo(f"{corpus}: detached" + (" and dropped" if drop_corpus else ""))


@click.command()
@click.option("--corpus", "-c", default=None, help="Only this corpus (default: every attached corpus).")
@click.option("--once", is_flag=True, help="Process what is due, then exit.")
@click.option("--batch-size", type=click.IntRange(min=1), default=64, show_default=True,
              help="Queue items per transaction.")
@click.option("--idle-seconds", type=click.FloatRange(min=1), default=60.0, show_default=True,
              help="Longest wait for a notification before re-checking (not a poll: triggers wake it).")
@click.option("--progress/--no-progress", default=None,
              help="Progress bar (default: on a terminal; otherwise JSON log lines on stderr).")
@dsn_option
def worker(corpus: str | None, once: bool, batch_size: int, idle_seconds: float, progress: bool | None,
           dsn: str | None) -> None:
    """Keep attached corpora in sync with their tables: take queued changes in
    batches (FOR UPDATE SKIP LOCKED; several workers may run), sleep on
    LISTEN/NOTIFY when idle. Failing rows are retried with backoff, then parked
    (`pgrag status`, `pgrag requeue`).

        pgrag worker --corpus wiki
    """
    from ..follow import Worker, run_in_foreground

    database = open_database(dsn)
    bar_wanted = sys.stderr.isatty() if progress is None else progress
    bar: Any = None
    if bar_wanted:
        from ..progress import tqdm

        bar = tqdm(unit="item", desc="pgrag worker", dynamic_ncols=True)

    def on_batch(r: Any) -> None:
        if bar is not None:
            bar.update(r.items)
            bar.set_postfix(corpus=r.corpus, indexed=r.indexed, deleted=r.deleted, failed=r.failed)
        else:
            click.echo(json.dumps({"event": "batch", "corpus": r.corpus, "items": r.items, "keys": r.keys,
                                   "indexed": r.indexed, "deleted": r.deleted, "unchanged": r.unchanged,
                                   "stale": r.stale, "failed": r.failed, "parked": r.parked,
                                   "seconds": round(r.seconds, 3)}), err=True)

    w = Worker(database, corpus=corpus, batch_size=batch_size, idle_seconds=idle_seconds, on_batch=on_batch,
               settings=database.settings)

    def on_start() -> None:
        if bar is None:
            click.echo(json.dumps({"event": "start", "corpus": corpus, "once": once}), err=True)

    report = run_in_foreground(w, once=once, on_start=on_start)
    if bar is not None:
        bar.close()
    summary = {"event": "stop", "batches": report.batches, "items": report.items, "indexed": report.indexed,
               "deleted": report.deleted, "failed": report.failed, "parked": report.parked}
    click.echo(json.dumps(summary), err=bar is None)


@click.command()
@click.option("--corpus", "-c", default=None, help="Only this corpus.")
@dsn_option
@json_option
def status(corpus: str | None, dsn: str | None, as_json: bool) -> None:
    """Sync status of attached corpora (pgrag.sync_status): pending, in progress,
    retrying and parked items, last error, last processed time, lag."""
    rows = open_database(dsn).sync_status(corpus)
    if as_json:
        echo_json([dataclasses.asdict(r) for r in rows], indent=2, default=str)
        return
    if not rows:
        click.echo("no attached corpora")
    for r in rows:
        click.echo(f"{r.corpus} <- {r.source}\t{r.pending} pending\t{r.in_progress} in progress\t"
                   f"{r.retrying} retrying\t{r.parked} parked\tlag {r.lag_seconds:.1f}s\t"
                   f"last processed {r.last_processed_at or 'never'}"
                   + (f"\tlast error: {r.last_error}" if r.last_error else ""))


@click.command()
@click.argument("corpus")
@click.argument("keys", nargs=-1)
@dsn_option
def requeue(corpus: str, keys: tuple[str, ...], dsn: str | None) -> None:
    """Put CORPUS's parked items (all, or those of KEYS) back in the queue."""
    from ..follow import requeue as requeue_items

    n = requeue_items(open_database(dsn), corpus, list(keys) or None)
    click.echo(f"{corpus}: {n} item(s) re-queued")
