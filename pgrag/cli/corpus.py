"""The commands on one corpus: ingest and index it (``ingest``, ``extract``,
``threadrag-index``), ask it (``query``, ``propositions``), list and prune
(``corpora``, ``delete``)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import click

from .. import methods as method_registry
from .common import dsn_option, echo_json, ingest_methods, json_option, llm_options, llm_settings, open_database
from .render import extraction_line, nodes_line, render_hit


@click.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--corpus", "-c", required=True, help="Corpus name (created on first use).")
@click.option("--model", default=None,
              help="Embedding model for a new corpus (default: $PGRAG_EMBEDDING_MODEL or all-MiniLM-L6-v2).")
@click.option("--batch-size", type=int, default=None, help="Documents per transaction (default 64).")
@click.option("--progress/--no-progress", default=True, help="Show a progress bar.")
@click.option("--triples", type=click.Choice(["spacy", "llm"]), default=None,
              help="Also extract triples and propositions (offline with spaCy, or with the LLM).")
@click.option("--methods", "method_names", default="",
              help="Comma-separated methods the corpus must serve beyond the default ones, e.g. "
                   "threadrag: its semantic nodes are built from now on (older documents backfilled).")
@llm_options
@dsn_option
@json_option
def ingest(path: Path, corpus: str, model: str | None, batch_size: int | None, progress: bool,
           triples: str | None, method_names: str, llm_base_url: str | None, llm_model: str | None,
           dsn: str | None, as_json: bool) -> None:
    """Ingest a JSON array, a JSONL file or a folder of .txt/.md files.

    Each JSON document is {"id", "title", "text", "metadata"}; without an id the
    title is the id. ThreadRAG's semantic nodes are built only for a corpus that
    asked for them (--methods threadrag, or `pgrag threadrag-index`). Example:

        pgrag ingest ../shared/bench/2wiki/corpus.json --corpus 2wiki --methods threadrag
    """
    from ..sources import load_path

    docs = load_path(path)
    database = open_database(dsn)
    kb = database.corpus(corpus, embedding_model=model)
    llm = kb.llm(llm_settings(llm_base_url, llm_model)) if triples == "llm" else None
    report = kb.ingest(docs, batch_size=batch_size, progress=progress, extract_triples=triples or False, llm=llm,
                       methods=ingest_methods(method_names))
    data: dict[str, Any] = dataclasses.asdict(report)
    if as_json:
        echo_json(data, indent=2)
        return
    click.echo(
        f"{corpus}: {report.added} added, {report.replaced} replaced, {report.unchanged} unchanged; "
        f"{report.chunks} chunks, {report.sentences} sentences in {report.total_seconds:.1f}s"
        + (f"; {report.nodes} semantic nodes and {report.names} name vectors "
           f"({report.node_embedding_seconds:.1f}s embedding)"
           if "threadrag" in kb.families else ""))
    if report.backfill is not None:
        click.echo(nodes_line(data["backfill"]))
    if triples:
        click.echo(extraction_line(data["triples"]))


@click.command()
@click.option("--corpus", "-c", required=True, help="Corpus name.")
@click.option("--triples", type=click.Choice(["spacy", "llm"]), default="spacy", show_default=True,
              help="Extractor: offline spaCy dependency rules, or LLM OpenIE.")
@click.option("--batch-size", type=click.IntRange(min=1), default=None,
              help="Chunks per transaction (default 32 for spacy, 8 for llm).")
@click.option("--progress/--no-progress", default=True, help="Show a progress bar.")
@llm_options
@dsn_option
@json_option
def extract(corpus: str, triples: str, batch_size: int | None, progress: bool, llm_base_url: str | None,
            llm_model: str | None, dsn: str | None, as_json: bool) -> None:
    """Extract triples and propositions from the chunks not yet processed (resumable).

        pgrag extract --corpus 2wiki --triples spacy
        pgrag extract --corpus 2wiki --triples llm --llm http://127.0.0.1:8080/v1 --llm-model smollm2
    """
    kb = open_database(dsn).corpus(corpus, create=False)
    llm = kb.llm(llm_settings(llm_base_url, llm_model)) if triples == "llm" else None
    data = dataclasses.asdict(kb.extract_triples(triples, llm=llm, batch_size=batch_size, progress=progress))
    if as_json:
        echo_json(data, indent=2)
    else:
        click.echo(extraction_line(data))


@click.command("threadrag-index")
@click.option("--corpus", "-c", required=True, help="Corpus name.")
@click.option("--batch-size", type=click.IntRange(min=1), default=256, show_default=True,
              help="Documents per transaction.")
@click.option("--progress/--no-progress", default=True, help="Show a progress bar.")
@click.option("--disable", is_flag=True, help="Stop maintaining the nodes at ingest instead (threadrag then refuses).")
@click.option("--drop", is_flag=True, help="With --disable: also delete the corpus's semantic nodes.")
@dsn_option
@json_option
def threadrag_index(corpus: str, batch_size: int, progress: bool, disable: bool, drop: bool,
                    dsn: str | None, as_json: bool) -> None:
    """Enable ThreadRAG for a corpus and build its semantic nodes (resumable).

    From then on every ingest (and the follow worker, and SQL's pgrag.index)
    maintains them; this backfills the documents that have none. Re-run it to
    finish an interrupted backfill; --disable [--drop] undoes it.

        pgrag threadrag-index --corpus 2wiki
    """
    if drop and not disable:
        raise click.UsageError("--drop goes with --disable")
    kb = open_database(dsn).corpus(corpus, create=False)
    if disable:
        dropped = kb.disable("threadrag", drop=drop)
        if as_json:
            echo_json({"corpus": corpus, "families": list(kb.families), "nodes_dropped": dropped})
        else:
            click.echo(f"{corpus}: ThreadRAG nodes no longer maintained; {dropped} dropped")
        return
    data = dataclasses.asdict(kb.build_semantic_nodes(batch_size=batch_size, progress=progress))
    if as_json:
        echo_json(data, indent=2)
    else:
        click.echo(nodes_line(data))


@click.command()
@click.argument("question")
@click.option("--corpus", "-c", required=True, help="Corpus name.")
@click.option("--chunks", "unique_chunks", type=click.IntRange(min=1), default=5, show_default=True,
              help="Stop once the propositions cover this many distinct chunks.")
@dsn_option
@json_option
def propositions(question: str, corpus: str, unique_chunks: int, dsn: str | None, as_json: bool) -> None:
    """Propositions closest to QUESTION, until they cover N distinct source chunks.

        pgrag propositions "Who is the mother of Lothair II?" --corpus 2wiki --chunks 5
    """
    props = open_database(dsn).corpus(corpus, create=False).propositions(question, unique_chunks=unique_chunks)
    if as_json:
        echo_json([dataclasses.asdict(p) for p in props], indent=2, ensure_ascii=False)
        return
    for p in props:
        click.echo(f"{p.rank}. ({p.subject} | {p.predicate} | {p.object})  score {p.score:.4f}  "
                   f"[{p.title or p.external_id}, chunk {p.chunk_id}, chars {p.char_start}-{p.char_end}]")


def _json_object(_ctx: click.Context, _param: click.Parameter, value: str | None) -> dict | None:
    if value is None:
        return None
    try:
        parsed = json.loads(value)
    except ValueError as error:
        raise click.BadParameter(f"not JSON: {error}") from None
    if not isinstance(parsed, dict):
        raise click.BadParameter("a filter is a JSON object")
    return parsed


@click.command()
@click.argument("question")
@click.option("--corpus", "-c", required=True, help="Corpus name.")
@click.option("--method", "-m", default="dense", show_default=True,
              help=f"Retrieval method: {', '.join(method_registry.names())}.")
@click.option("-k", "k", type=click.IntRange(min=1), default=5, show_default=True, help="Number of hits.")
@click.option("--filter", "filter_json", metavar="JSON", callback=_json_object,
              help='Metadata filter (docs/filters.md), e.g. \'{"kind": "film", "year": {"$gte": 1990}}\'.')
@llm_options
@dsn_option
@json_option
def query(question: str, corpus: str, method: str, k: int, filter_json: dict | None, llm_base_url: str | None,
          llm_model: str | None, dsn: str | None, as_json: bool) -> None:
    """Retrieve the top-k chunks for QUESTION, with provenance; answering methods
    (t2rag, threadrag, cirag) also print their answer when an LLM is configured.

        pgrag query "Who is the mother of Lothair II?" --corpus 2wiki --method bm25 -k 5
    """
    database = open_database(dsn)
    kb = database.corpus(corpus, create=False)
    settings = llm_settings(llm_base_url, llm_model)
    options: dict[str, Any] = ({"llm": kb.llm(settings)}
                               if settings.configured and method_registry.takes_option(method, "llm") else {})
    if filter_json is not None:
        options["filter"] = filter_json
    hits = kb.retrieve(question, method=method, k=k, **options)
    if as_json:
        echo_json({"answer": hits.answer, "hits": [dataclasses.asdict(h) for h in hits],
                   "trace": dataclasses.asdict(hits.trace)}, indent=2, ensure_ascii=False)
        return
    if hits.answer is not None:
        click.echo(click.style(f"answer: {hits.answer}", bold=True))
    for hit in hits:
        click.echo(render_hit(hit))


@click.command()
@dsn_option
@json_option
def corpora(dsn: str | None, as_json: bool) -> None:
    """List corpora with their model, size and method families."""
    rows = open_database(dsn).corpora()
    if as_json:
        echo_json(rows, indent=2)
        return
    if not rows:
        click.echo("no corpora")
    for r in rows:
        families = ",".join(r["families"]) or "none"
        click.echo(f"{r['name']}\t{r['documents']} documents\t{r['chunks']} chunks\t{r['tokens']} tokens\t"
                   f"{r['edges']} edges\t{r['pending']} pending\t{r['embedding_model']} ({r['embedding_dim']}d)\t"
                   f"families: {families}")


@click.command()
@click.argument("ids", nargs=-1, required=True)
@click.option("--corpus", "-c", required=True, help="Corpus name.")
@dsn_option
def delete(ids: tuple[str, ...], corpus: str, dsn: str | None) -> None:
    """Delete documents (by id) and everything derived from them."""
    n = open_database(dsn).corpus(corpus, create=False).delete(list(ids))
    click.echo(f"deleted {n} document(s)")
