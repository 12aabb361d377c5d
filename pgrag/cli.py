"""The ``pgrag`` command: parse, call one library function, render. Nothing more."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from . import methods as method_registry
from . import server as srv
from .config import Settings
from .exceptions import PgragError

F = TypeVar("F", bound=Callable[..., Any])


def _settings(dsn: str | None, data_dir: Path | None = None) -> Settings:
    settings = Settings.from_env()
    changes: dict[str, Any] = {}
    if dsn:
        changes["dsn"] = dsn
    if data_dir:
        changes["data_dir"] = data_dir
    return dataclasses.replace(settings, **changes)


def _connect(dsn: str | None) -> Any:
    """The command's database, closed when the command ends (its connections
    would otherwise stay open until the process exits: a library caller of
    ``main``, a test among them, would leak them)."""
    from . import connect

    settings = _settings(dsn)
    database = connect(settings.dsn, settings=settings)
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.call_on_close(database.close)
    return database


def dsn_option(fn: F) -> F:
    return click.option(
        "--dsn", default=None, metavar="URI",
        help="PostgreSQL URI of an existing database (default: $PGRAG_DSN, else the embedded server).",
    )(fn)


def data_dir_option(fn: F) -> F:
    return click.option(
        "--data-dir", type=click.Path(path_type=Path), default=None,
        help="Data directory of the embedded server (default: $PGRAG_DATA_DIR).",
    )(fn)


def corpus_file_option(fn: F) -> F:
    return click.option(
        "--corpus-file", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=True,
        help='Corpus: a JSON list of {"title","text"} or {"id","title","text"}, or JSONL; '
             "indexed once into a corpus named after its content.")(fn)


def questions_option(fn: F) -> F:
    return click.option(
        "--questions", "questions_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
        required=True, help="JSONL questions: id, question, answer, supporting_titles[, answer_aliases].")(fn)


# Where echo_json writes: the real stdout of a command run with --json, whose
# own stdout is sent to stderr while it runs.
_json_stdout: contextvars.ContextVar[Any] = contextvars.ContextVar("pgrag_json_stdout", default=None)


def json_option(fn: F) -> F:
    """``--json``: stdout then carries one JSON document and nothing else (a
    script parses it). Whatever else is printed while the command runs (a
    library's progress line or warning) goes to stderr."""

    @functools.wraps(fn)
    def command(*args: Any, as_json: bool, **kwargs: Any) -> Any:
        if not as_json:
            return fn(*args, as_json=False, **kwargs)
        token = _json_stdout.set(sys.stdout)
        try:
            with contextlib.redirect_stdout(sys.stderr):
                return fn(*args, as_json=True, **kwargs)
        finally:
            _json_stdout.reset(token)

    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")(command)  # type: ignore[return-value]


def echo_json(data: Any, **dumps: Any) -> None:
    """Print ``data`` as JSON on the command's stdout (see json_option)."""
    click.echo(json.dumps(data, **dumps), file=_json_stdout.get() or sys.stdout)


def llm_options(fn: F) -> F:
    fn = click.option("--llm-model", default=None, metavar="NAME",
                      help="LLM model name (default: $PGRAG_LLM_MODEL).")(fn)
    return click.option("--llm", "llm_base_url", default=None, metavar="URL",
                        help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8080/v1 "
                             "(default: $PGRAG_LLM_BASE_URL).")(fn)


def _llm_settings(base_url: str | None, model: str | None) -> Any:
    from .llm import LLMSettings

    return LLMSettings.from_env(base_url=base_url, model=model)


class PgragGroup(click.Group):
    """Turns library errors into a one-line message and exit code 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except PgragError as exc:
            raise click.ClickException(str(exc)) from exc


@click.group(cls=PgragGroup)
@click.version_option(package_name="pgrag-multihop")
def main() -> None:
    """pgrag: multi-hop retrieval inside PostgreSQL + pgvector.

    Without --dsn / PGRAG_DSN every command uses the embedded PostgreSQL server
    in PGRAG_DATA_DIR (default ~/.local/share/pgrag/pgdata), starting it if needed.
    """


# -- server ------------------------------------------------------------------

@main.group(cls=PgragGroup)
def server() -> None:
    """Start, stop or inspect the embedded PostgreSQL server."""


@server.command("start")
@data_dir_option
@click.option("--models/--no-models", default=None,
              help="Start the shared model runtime beside it (pgrag models serve), which every backend and "
                   "client on this machine then uses (default: yes, unless PGRAG_START_MODELS=0).")
def server_start(data_dir: Path | None, models: bool | None) -> None:
    """Start the embedded server (it keeps running) and print its URI."""
    from . import embedded

    settings = _settings(None, data_dir)
    click.echo(embedded.start(settings.data_dir, models=models, embedding_model=settings.embedding_model))


@server.command("stop")
@data_dir_option
def server_stop(data_dir: Path | None) -> None:
    """Stop the embedded server and its model runtime."""
    from . import embedded

    settings = _settings(None, data_dir)
    click.echo("stopped" if embedded.stop(settings.data_dir) else "not running")


@server.command("status")
@data_dir_option
def server_status(data_dir: Path | None) -> None:
    """Say whether the embedded server runs; print its URI on a line of its own,
    and psql's path (or open psql on it with `pgrag server psql`)."""
    st = srv.status(_settings(None, data_dir).data_dir)
    click.echo(f"data directory: {st.data_dir}")
    click.echo(f"running: {'yes, pid ' + str(st.pid) if st.running else 'no'}")
    if st.uri:
        click.echo(st.uri)
    click.echo(f"psql: {st.psql}")
    if not st.running:
        sys.exit(3)


@server.command("psql", context_settings={"ignore_unknown_options": True})
@data_dir_option
@click.argument("psql_args", nargs=-1, type=click.UNPROCESSED)
def server_psql(data_dir: Path | None, psql_args: tuple[str, ...]) -> None:
    """Open psql (shipped with the embedded server) on it; extra arguments go to psql.

        pgrag server psql -c "SELECT * FROM pgrag.bm25('2wiki', 'Who is the mother of Lothair II?', 5)"
    """
    import os

    from . import embedded

    settings = _settings(None, data_dir)
    uri = embedded.start(settings.data_dir, embedding_model=settings.embedding_model)
    psql = str(srv.psql_path())
    os.execv(psql, [psql, uri, *psql_args])


# -- models ------------------------------------------------------------------

@main.group(cls=PgragGroup)
def models() -> None:
    """The shared model runtime: one process that embeds (and parses) for every backend and client."""


def socket_option(fn: F) -> F:
    return click.option(
        "--socket", type=click.Path(path_type=Path), default=None,
        help="Unix socket to serve on (default: pgrag-models.sock in the embedded server's data directory, "
             "or $PGRAG_MODEL_SOCKET).")(fn)


def _socket(socket: Path | None, data_dir: Path | None) -> Path:
    from . import model_service
    from .config import default_model_socket

    if socket is not None:
        return socket
    if data_dir is not None:
        return model_service.files(data_dir)[0]
    return default_model_socket()


@models.command("serve")
@socket_option
@data_dir_option
@click.option("--model", default=None, help="Embedding model (default: $PGRAG_EMBEDDING_MODEL, else all-MiniLM-L6-v2).")
@click.option("--group", default=None, help="OS group that may open the socket too (mode 0660; else 0600).")
@click.option("--owner", default=None, help="OS user that owns the socket (run as root for a server's user).")
@click.option("--window-ms", type=float, default=2.0, show_default=True,
              help="How long a request waits for others to share its model batch.")
@click.option("--max-batch", type=int, default=64, show_default=True, help="Texts per model batch.")
@click.option("--port", type=int, default=None,
              help="Serve on TCP instead of a socket (for backends on other machines; nothing but the network "
                   "guards it: keep it on a private address). Backends then use pgrag.model_runtime = "
                   "'http://HOST:PORT/v1'.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address for --port.")
def models_serve(socket: Path | None, data_dir: Path | None, model: str | None, group: str | None,
                 owner: str | None, window_ms: float, max_batch: int, port: int | None, host: str) -> None:
    """Serve the models on a Unix socket, in the foreground, restarting the runtime if it dies.

    For an existing PostgreSQL on this machine, run it as the server's OS user and
    point the backends at it:

        pgrag models serve --socket /run/pgrag/models.sock
        ALTER SYSTEM SET pgrag.model_runtime = 'unix:/run/pgrag/models.sock';
    """
    from . import model_service

    argv = ["--model", model or _settings(None).embedding_model, "--window-ms", str(window_ms),
            "--max-batch", str(max_batch)]
    if port is not None:
        argv += ["--host", host, "--port", str(port)]
        where = f"http://{host}:{port}/v1"
    else:
        path = _socket(socket, data_dir).expanduser().resolve()
        argv += ["--socket", str(path)]
        where = f"unix:{path}"
    argv += ["--group", group] if group else []
    argv += ["--owner", owner] if owner else []
    click.echo(f"pgrag models: serving on {where}", err=True)
    sys.exit(model_service.supervise(argv))


@models.command("status")
@socket_option
@data_dir_option
@json_option
def models_status(socket: Path | None, data_dir: Path | None, as_json: bool) -> None:
    """Health of the model runtime: model, batches, queue. Exit status 3 when it does not answer."""
    from .model_client import Endpoint, describe_setting, health

    target = Endpoint(socket=_socket(socket, data_dir))
    try:
        report = {**health(target), "socket": str(target.socket)}
    except PgragError as exc:
        report = {"status": "down", "socket": str(target.socket), "error": str(exc)}
    report["this_process"] = describe_setting()
    if as_json:
        echo_json(report, indent=2)
    else:
        for key, value in report.items():
            click.echo(f"{key}: {value}")
    if report["status"] != "ok":
        sys.exit(3)


# -- database ----------------------------------------------------------------

@main.group(cls=PgragGroup)
def db() -> None:
    """Database schema administration."""


@db.command("upgrade")
@dsn_option
def db_upgrade(dsn: str | None) -> None:
    """Bring the schema to the latest migration (idempotent)."""
    database = _connect(dsn)
    click.echo(f"schema at head: {database!r}")
    runtime, path = database.runtime()
    click.echo(f"in-server runtime: {runtime}, pgrag imported from {', '.join(path) or 'the server Python'}"
               if runtime else "in-server runtime: none (no plpython3u here): pgrag.retrieve/answer/index raise "
                               "PR003; the functions that take a vector work")


@db.command("distribute")
@click.option("--shard-count", type=click.IntRange(1, 10000), default=None,
              help="Shards per distributed table (default: Citus's citus.shard_count, 32).")
@dsn_option
@json_option
def db_distribute(shard_count: int | None, dsn: str | None, as_json: bool) -> None:
    """On a Citus coordinator: make corpus and corpus_acl reference tables and
    distribute every other table by corpus_id, co-located (idempotent)."""
    from . import distribute

    rows = distribute.distribute(_connect(dsn), shard_count=shard_count)
    if as_json:
        echo_json([dict(zip(("table", "kind", "colocation_id", "shards"), r)) for r in rows], indent=2)
        return
    for table, kind, colocation, shards in rows:
        click.echo(f"pgrag.{table:<18} {kind:<26} colocation {colocation if colocation is not None else '-':<4} "
                   f"shards {shards}")


@db.command("schema")
@dsn_option
def db_schema(dsn: str | None) -> None:
    """Print the SQL surface of schema pgrag: every function with its signature,
    every table, view and type with its columns (as sql/schema.sql holds it)."""
    from . import schema

    click.echo(schema.surface(_connect(dsn).connector), nl=False)


@db.command("migrations-path")
def db_migrations_path() -> None:
    """Print the folder holding the Alembic migrations."""
    from .resources import resource_dir

    click.echo(resource_dir("migrations"))


# -- corpora -----------------------------------------------------------------

@main.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--corpus", "-c", required=True, help="Corpus name (created on first use).")
@click.option("--model", default=None, help="Embedding model for a new corpus (default: $PGRAG_EMBEDDING_MODEL or all-MiniLM-L6-v2).")
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
    from .sources import load_path

    docs = load_path(path)
    database = _connect(dsn)
    kb = database.corpus(corpus, embedding_model=model)
    llm = kb.llm(_llm_settings(llm_base_url, llm_model)) if triples == "llm" else None
    report = kb.ingest(docs, batch_size=batch_size, progress=progress, extract_triples=triples or False, llm=llm,
                       methods=_ingest_methods(method_names))
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
        click.echo(_nodes_line(data["backfill"]))
    if triples:
        click.echo(_extraction_line(data["triples"]))


def _ingest_methods(names: str) -> list[str]:
    """``ingest --methods``: may be empty (the default methods need no family)."""
    return _method_list(None, None, names) if names.strip() else []


def _nodes_line(r: dict[str, Any]) -> str:
    return (f"semantic nodes: {r['nodes']} for {r['documents']} documents in {r['total_seconds']:.1f}s "
            f"({r['sentences_embedded']} sentences and {r['nodes_embedded']} nodes embedded); "
            f"{r.get('names', 0)} name vectors"
            + (f"; terms stored for {r['terms_filled']} older nodes" if r.get("terms_filled") else ""))


def _extraction_line(r: dict[str, Any]) -> str:
    line = (f"triples ({r['extractor']}): {r['triples']} from {r['chunks']} chunks in {r['seconds']:.1f}s"
            f"{', ' + str(r['failed_chunks']) + ' chunks with unusable LLM replies' if r['failed_chunks'] else ''}")
    if r["llm_calls"]:
        line += f"; LLM: {r['llm_calls']} calls, {r['llm_prompt_tokens']} + {r['llm_completion_tokens']} tokens"
    return line


@main.command()
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
    kb = _connect(dsn).corpus(corpus, create=False)
    llm = kb.llm(_llm_settings(llm_base_url, llm_model)) if triples == "llm" else None
    data = dataclasses.asdict(kb.extract_triples(triples, llm=llm, batch_size=batch_size, progress=progress))
    if as_json:
        echo_json(data, indent=2)
    else:
        click.echo(_extraction_line(data))


@main.command()
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
    props = _connect(dsn).corpus(corpus, create=False).propositions(question, unique_chunks=unique_chunks)
    if as_json:
        echo_json([dataclasses.asdict(p) for p in props], indent=2, ensure_ascii=False)
        return
    for p in props:
        click.echo(f"{p.rank}. ({p.subject} | {p.predicate} | {p.object})  score {p.score:.4f}  "
                   f"[{p.title or p.external_id}, chunk {p.chunk_id}, chars {p.char_start}-{p.char_end}]")


@main.command()
@click.argument("question")
@click.option("--corpus", "-c", required=True, help="Corpus name.")
@click.option("--method", "-m", default="dense", show_default=True,
              help=f"Retrieval method: {', '.join(method_registry.names())}.")
@click.option("-k", "k", type=click.IntRange(min=1), default=5, show_default=True, help="Number of hits.")
@llm_options
@dsn_option
@json_option
def query(question: str, corpus: str, method: str, k: int, llm_base_url: str | None, llm_model: str | None,
          dsn: str | None, as_json: bool) -> None:
    """Retrieve the top-k chunks for QUESTION, with provenance; answering methods
    (t2rag, threadrag, cirag) also print their answer when an LLM is configured.

        pgrag query "Who is the mother of Lothair II?" --corpus 2wiki --method bm25 -k 5
    """
    database = _connect(dsn)
    kb = database.corpus(corpus, create=False)
    settings = _llm_settings(llm_base_url, llm_model)
    options = {"llm": kb.llm(settings)} if settings.configured and method_registry.takes_option(method, "llm") else {}
    hits = kb.retrieve(question, method=method, k=k, **options)
    if as_json:
        echo_json({"answer": hits.answer, "hits": [dataclasses.asdict(h) for h in hits],
                   "trace": dataclasses.asdict(hits.trace)}, indent=2, ensure_ascii=False)
        return
    if hits.answer is not None:
        click.echo(click.style(f"answer: {hits.answer}", bold=True))
    for hit in hits:
        click.echo(render_hit(hit))


@main.command()
@dsn_option
@json_option
def corpora(dsn: str | None, as_json: bool) -> None:
    """List corpora with their model, size and method families."""
    rows = _connect(dsn).corpora()
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


@main.command()
@click.argument("ids", nargs=-1, required=True)
@click.option("--corpus", "-c", required=True, help="Corpus name.")
@dsn_option
def delete(ids: tuple[str, ...], corpus: str, dsn: str | None) -> None:
    """Delete documents (by id) and everything derived from them."""
    n = _connect(dsn).corpus(corpus, create=False).delete(list(ids))
    click.echo(f"deleted {n} document(s)")


@main.command()
@click.option("-k", "k", type=click.IntRange(min=1), default=3, show_default=True, help="Hits per method.")
@click.option("--local-llm", is_flag=True,
              help="When no endpoint is configured, start the bundled SmolLM2 server for the answering "
                   "methods (tiny: it shows the loops run, not good answers).")
@llm_options
@dsn_option
def demo(k: int, local_llm: bool, llm_base_url: str | None, llm_model: str | None, dsn: str | None) -> None:
    """Ingest the bundled 2WikiMultiHopQA sample and answer its questions with every method."""
    settings = _llm_settings(llm_base_url, llm_model)
    if settings.configured or not local_llm:
        _demo(k, dsn, settings)
        return
    from . import local_llm as local

    click.echo("starting the local SmolLM2 server for the answering methods...")
    with local.running() as url:
        # A tiny model rambles: cap its replies so the demo stays a few minutes long.
        _demo(k, dsn, dataclasses.replace(settings, base_url=url, model=local.MODEL_ALIAS, max_tokens=160))


def _demo(k: int, dsn: str | None, settings: Any) -> None:
    from . import demo as demo_mod

    database = _connect(dsn)
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
            click.echo(f"   gold answer: {a.question['answer']}; gold documents: {', '.join(a.question['supporting_titles'])}")
        trace = a.hits.trace
        cost = f", {trace.llm_calls} LLM calls, {trace.prompt_tokens}+{trace.completion_tokens} tokens" if trace.llm_calls else ""
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

    from .queries import query

    statement = f"SELECT rank, title, details FROM pgrag.retrieve('{corpus}', $q${question}$q$, 'tigrag', {k})"
    click.echo("")
    click.echo(click.style("The same from SQL, in one statement (pgrag server psql -c ...):", bold=True))
    click.echo(f"  {statement}")
    try:
        with psycopg.connect(database.dsn, autocommit=True) as conn:
            rows = conn.execute(query("retrieve_sql"), {"corpus": corpus, "question": question, "method": "tigrag",
                                                        "k": k, "options": "{}"}).fetchall()
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
        with psycopg.connect(database.dsn, autocommit=True) as conn:
            for name, value in (("base_url", settings.base_url), ("model", settings.model),
                                ("api_key", settings.api_key)):
                if value:
                    conn.execute("SELECT set_config(%s, %s, false)", (f"pgrag.llm_{name}", value))
            row = conn.execute("SELECT answer, finish, llm_calls FROM pgrag.answer(%s, %s, 't2rag')",
                               (corpus, question)).fetchone()
    except psycopg.Error as error:
        click.echo(f"  {str(error).strip().splitlines()[0]}")
        return
    assert row is not None   # pgrag.answer returns one row
    answer, finish, calls = row
    shown = answer if answer is None or len(answer) <= 200 else answer[:197] + "..."
    click.echo(f"  answer: {shown}  (finish {finish}, {calls} LLM calls)")


def render_hit(hit: Any, indent: str = "") -> str:
    p = hit.provenance
    excerpt = " ".join(hit.text.split())
    excerpt = excerpt if len(excerpt) <= 160 else excerpt[:157] + "..."
    sentences = f"sentences {p.sentences[0].ordinal}-{p.sentences[-1].ordinal}" if p.sentences else "no sentences"
    text = (f"{indent}{hit.rank}. {p.title or p.external_id}  (score {hit.score:.4f})\n"
            f"{indent}   {excerpt}\n"
            f"{indent}   provenance: document {p.external_id!r} (id {p.document_id}), chunk {p.chunk_ordinal}, "
            f"chars {p.char_start}-{p.char_end}, {sentences}")
    if hit.details:  # why the method ranked it there (e.g. TIGRAG's hop, rho and cosine)
        why = ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in hit.details.items())
        text += f"\n{indent}   why: {why}"
    return text


# -- evaluation --------------------------------------------------------------

def _int_list(ctx: click.Context, param: click.Parameter, value: str) -> tuple[int, ...]:
    try:
        ks = tuple(int(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {value!r}") from None
    if not ks or min(ks) < 1:
        raise click.BadParameter("give at least one k, each at least 1")
    return ks


def _method_list(ctx: click.Context | None, param: click.Parameter | None, value: str) -> list[str]:
    names = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [n for n in names if n not in method_registry.names()]
    if unknown or not names:
        raise click.BadParameter(
            f"unknown method(s) {', '.join(unknown) or '(none given)'}; available: {', '.join(method_registry.names())}")
    return list(dict.fromkeys(names))


@main.command("eval")
@corpus_file_option
@questions_option
@click.option("--methods", "method_names", default=",".join(method_registry.names(variants=False)), show_default=True,
              callback=_method_list, help="Comma-separated methods to compare.")
@click.option("--k", "ks", default="2,5", show_default=True, callback=_int_list,
              help="Comma-separated k for Recall@k (distinct documents).")
@click.option("--depth", type=click.IntRange(min=1), default=None,
              help="Chunks each method returns per question (default 4 x the largest k).")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Only the first N questions.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the report's aggregates here (JSON); its per-question rows go to "
                   "<stem>.questions.jsonl beside it.")
@click.option("--markdown", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the Markdown table here.")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write a Recall@k bar chart (PNG) here.")
@click.option("--progress/--no-progress", default=True, help="Show progress bars.")
@click.option("--extract", type=click.Choice(["spacy", "llm"]), default=None,
              help="Also build triples and propositions with this extractor (once; reused).")
@click.option("--oracle", is_flag=True,
              help="Answer the LLM prompts with the oracle reader (pgrag.bench.oracle): an ideal reader of each "
                   "prompt that knows the question's gold evidence (needs 'evidences' in the questions). "
                   "The figures are an upper bound under ideal reasoning.")
@click.option("--failures", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="With --oracle: write the loop methods' failed questions (trace, oracle calls, where the "
                   "evidence was lost) as JSONL here (default: next to --out, *.failures.jsonl).")
@llm_options
@dsn_option
def eval_command(corpus_file: Path, questions_file: Path, method_names: list[str], ks: tuple[int, ...],
                 depth: int | None, limit: int | None, out: Path | None, markdown: Path | None,
                 plot: Path | None, progress: bool, extract: str | None, oracle: bool, failures: Path | None,
                 llm_base_url: str | None, llm_model: str | None, dsn: str | None) -> None:
    """Compare methods on one corpus and question set: Recall@k, EM/F1, latency, tokens.

    The corpus is indexed once, under a name derived from the file's content, and
    reused by later runs. Example:

        pgrag eval --corpus-file ../shared/bench/2wiki/corpus.json --questions ../shared/bench/2wiki/questions.jsonl --methods dense,bm25,hybrid --out report.json --markdown report.md --plot report.png

    With --oracle the answering methods (t2rag, cirag, threadrag) get the oracle
    reader instead of an LLM:

        pgrag eval --corpus-file ../shared/bench/2wiki/corpus.json --questions ../shared/bench/2wiki/questions.jsonl --methods t2rag,cirag,threadrag --oracle --out r.json
    """
    import contextlib

    from .bench import evaluate
    from .bench.report import markdown_report, plot_recall

    if oracle and (llm_base_url or llm_model or extract == "llm"):
        raise click.UsageError("--oracle is the LLM of the run: it does not combine with --llm, --llm-model "
                               "or --extract llm")
    if failures and not oracle:
        raise click.UsageError("--failures needs --oracle")
    questions = evaluate.load_questions(questions_file)
    questions = questions[:limit] if limit else questions
    database = _connect(dsn)
    settings = _llm_settings(llm_base_url, llm_model)
    name = evaluate.corpus_name_for(corpus_file)
    with contextlib.ExitStack() as stack:
        server = None
        llm = None
        if oracle:
            from .bench import oracle as oracle_mod

            golds = {g.id: g for g in oracle_mod.load_gold(questions_file)}
            server = stack.enter_context(oracle_mod.OracleServer([golds[q.id] for q in questions]))
            llm = database.corpus(name).llm(server.settings())
            stack.callback(server.forget, database, llm.corpus_id)
        elif extract == "llm" or settings.configured:  # replies are cached in the eval corpus
            llm = database.corpus(name).llm(settings)
        if extract is None and method_registry.needs_triples(method_names):
            extract = "spacy"  # the proposition index T2RAG searches; built once, then reused
        kb, corpus = evaluate.prepare_corpus(database, corpus_file, extract=extract, methods=method_names,
                                             llm=None if oracle else llm, progress=progress)
        report = evaluate.evaluate(kb, corpus, questions, method_names, ks=ks, depth=depth, llm=llm,
                                   progress=progress, traces=oracle, reader="oracle" if oracle else None)
        data = report.to_json()
        if server is not None:
            records = oracle_mod.failures(data, server.oracle.log)
            failures = failures or (out.with_suffix(".failures.jsonl") if out else None)
            if failures:
                with failures.open("w", encoding="utf-8") as f:
                    for record in records:
                        f.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
            if server.errors:
                click.echo(f"oracle: {len(server.errors)} requests refused, e.g. {server.errors[0]}", err=True)
    text = markdown_report(data)
    click.echo(text)
    if out:
        evaluate.write_report(data, out)
    if markdown:
        markdown.write_text(text, encoding="utf-8")
    if plot:
        plot_recall(data, plot)


# -- benchmarks --------------------------------------------------------------

def _echo_json(result: dict[str, Any], out: Path | None) -> None:
    """Print a benchmark's figures as JSON, and save them to ``out`` when given."""
    text = json.dumps(result, indent=2)
    click.echo(text)
    if out:
        out.write_text(text + "\n")


@main.group(cls=PgragGroup)
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
    from .bench.timing import ingest_benchmark

    runtimes: list[str | None] = [r.strip() for r in model_runtimes.split(",") if r.strip()] or [None]
    result = ingest_benchmark(_connect(dsn), corpus_file, limit=limit, batch_size=batch_size,
                              methods=_ingest_methods(method_names), model_runtimes=runtimes)
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
    from .bench.timing import follow_benchmark

    result = follow_benchmark(_connect(dsn), corpus_file, limit=limit, rows=rows, repeat=repeat,
                              batch_size=batch_size, progress=False)
    _echo_json(result, out)


@bench.command("queries")
@corpus_file_option
@questions_option
@click.option("--methods", "method_names", default=",".join(method_registry.names(variants=False)), show_default=True,
              callback=_method_list, help="Comma-separated methods (dense is always included).")
@click.option("-k", "k", type=click.IntRange(min=1), default=10, show_default=True, help="Hits per query.")
@click.option("--warmup", type=click.IntRange(min=0), default=5, show_default=True,
              help="Untimed questions per method first.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Only the first N questions.")
@click.option("--via", type=click.Choice(["python", "sql", "both"]), default="python", show_default=True,
              help="Ask through kb.retrieve, through SQL's pgrag.retrieve (the in-server runtime), or both.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Also write JSON here.")
@dsn_option
def bench_queries(corpus_file: Path, questions_file: Path, method_names: list[str], k: int, warmup: int,
                  limit: int | None, via: str, out: Path | None, dsn: str | None) -> None:
    """Query latency p50/p95 per method, and each p50 as a ratio to dense's."""
    from .bench.timing import query_benchmark

    result = query_benchmark(_connect(dsn), corpus_file, questions_file, method_names,
                             k=k, warmup=warmup, limit=limit, via=via)
    _echo_json(result, out)


@bench.command("graph")
@corpus_file_option
@questions_option
@click.option("--limit", type=click.IntRange(min=1), default=10, show_default=True, help="Questions to time.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Also write JSON here.")
@dsn_option
def bench_graph(corpus_file: Path, questions_file: Path, limit: int, out: Path | None, dsn: str | None) -> None:
    """Token graph costs: CSR build time, and PPR in scipy vs in SQL (time, agreement)."""
    from .bench.timing import graph_benchmark

    result = graph_benchmark(_connect(dsn), corpus_file, questions_file, limit=limit)
    _echo_json(result, out)


@bench.command("scale")
@corpus_file_option
@questions_option
@click.option("--factors", default="1,10", show_default=True,
              help="Comma-separated sizes, in copies of the corpus (ascending, from 1).")
@click.option("--embeddings", type=click.Choice(["model", "random"]), default="model", show_default=True,
              help="The embedding model, or seeded random unit vectors (no recall; marked in the report).")
@click.option("--methods", "method_names", default="dense,bm25,hybrid,tigrag,threadrag", show_default=True,
              callback=_method_list, help="Comma-separated methods to time at every size.")
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
    from . import embedded
    from .bench.scale import scale_benchmark

    try:
        sizes = [int(f) for f in factors.split(",") if f.strip()]
    except ValueError:
        raise click.BadParameter(f"not a list of integers: {factors!r}", param_hint="--factors") from None
    settings = _settings(dsn)
    admin = settings.dsn or embedded.start(settings.data_dir, embedding_model=settings.embedding_model)

    def save(report: dict[str, Any]) -> None:
        if out:
            out.write_text(json.dumps(report, indent=2) + "\n")

    result = scale_benchmark(admin, corpus_file, questions_file, sizes, embeddings=embeddings,
                             method_names=method_names, limit=limit, database=database, replace=replace,
                             resume=resume, via=via, on_point=save)
    _echo_json(result, out)


# -- CIRAG trajectories ------------------------------------------------------

@main.command("export-trajectories")
@click.option("--corpus", "-c", required=True, help="Corpus name.")
@questions_option
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True, help="JSONL file to write.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Only the first N questions.")
@click.option("--rounds", type=click.IntRange(min=1), default=None, help="Maximum rounds L (default 4).")
@click.option("--progress/--no-progress", default=True, help="Show a progress bar.")
@llm_options
@dsn_option
def export_trajectories(corpus: str, questions_file: Path, out: Path, limit: int | None, rounds: int | None,
                        progress: bool, llm_base_url: str | None, llm_model: str | None, dsn: str | None) -> None:
    """Run CIRAG with an LLM (the teacher) and write each integration step as a
    chat fine-tuning record: {"messages": [system, user, assistant], "meta": {...}}.

        pgrag export-trajectories --corpus 2wiki --questions questions.jsonl --out traj.jsonl --llm http://127.0.0.1:8080/v1 --llm-model qwen2.5-7b
    """
    from .bench import evaluate
    from .bench.trajectories import export_trajectories as export

    settings = _llm_settings(llm_base_url, llm_model)
    if not settings.configured:
        raise click.ClickException("export-trajectories needs an LLM: pass --llm URL --llm-model NAME "
                                   "(or set PGRAG_LLM_BASE_URL and PGRAG_LLM_MODEL)")
    questions = evaluate.load_questions(questions_file)[:limit]
    kb = _connect(dsn).corpus(corpus, create=False)
    options = {"rounds": rounds} if rounds else {}
    report = export(kb, questions, kb.llm(settings), out, progress=progress, **options)
    click.echo(f"{report.steps} integration steps from {report.questions} questions written to {out} "
               f"({report.correct} answered correctly; {report.prompt_tokens} prompt + "
               f"{report.completion_tokens} completion tokens)")


# -- ThreadRAG ------------------------------------------------------------------

@main.command("threadrag-index")
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
    kb = _connect(dsn).corpus(corpus, create=False)
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
        click.echo(_nodes_line(data))


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
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Also write JSON here.")
@dsn_option
def bench_load(corpus_file: Path, questions_file: Path, clients: str, seconds: float, model_runtimes: str,
               method_names: str, k: int, compare_python: bool, torch_threads: str, out: Path | None,
               dsn: str | None) -> None:
    """Concurrent retrieval clients through a connection pool: throughput,
    p50/p95/p99 latency, errors and client memory. Example:

        pgrag bench load --corpus-file ../shared/bench/2wiki/corpus.json --questions ../shared/bench/2wiki/questions.jsonl --clients 8 --seconds 60 --out load.json
    """
    from .bench.timing import load_benchmark

    try:
        threads: list[int | None] = [int(t) for t in torch_threads.split(",") if t.strip()] or [None]
    except ValueError:
        raise click.BadParameter(f"a comma-separated list of thread counts, not {torch_threads!r}",
                                 param_hint="--torch-threads") from None
    if any(t is not None and t < 1 for t in threads):
        raise click.BadParameter("thread counts are positive", param_hint="--torch-threads")
    try:
        levels = [int(c) for c in clients.split(",") if c.strip()]
    except ValueError:
        levels = []
    if not levels or min(levels) < 1:
        raise click.BadParameter(f"a comma-separated list of positive client counts, not {clients!r}",
                                 param_hint="--clients")
    runtimes: list[str | None] = [r.strip() for r in model_runtimes.split(",") if r.strip()] or [None]
    result = load_benchmark(_connect(dsn), corpus_file, questions_file, clients=levels, seconds=seconds,
                            method_names=[m.strip() for m in method_names.split(",") if m.strip()], k=k,
                            compare_python=compare_python, torch_threads=threads, model_runtimes=runtimes)
    _echo_json(result, out)


# -- roles and tenant isolation ----------------------------------------------

@main.group(cls=PgragGroup)
def roles() -> None:
    """Database roles for applications, and row-level security by corpus.

    Roles are created by an administrator (CREATE ROLE app_ro LOGIN ...); these
    commands, run as the schema owner, grant them pgrag's privileges."""


def _role_command(name: str, help_text: str, action: Callable[[Any, str], Any], done: str) -> None:
    @roles.command(name, help=help_text)
    @click.argument("role")
    @dsn_option
    def command(role: str, dsn: str | None) -> None:
        action(_connect(dsn), role)
        click.echo(done.format(role=role))


_role_command("grant-reader", "Let ROLE read the tables and call the retrieval functions (no writes).",
              lambda db, role: db.grant_reader(role), "{role}: reader")
_role_command("grant-writer", "Let ROLE ingest and delete documents too (reader + writes).",
              lambda db, role: db.grant_writer(role), "{role}: writer")
_role_command("revoke", "Take back every pgrag privilege and corpus grant of ROLE.",
              lambda db, role: db.revoke_role(role), "{role}: revoked")


@roles.command("grant-corpus")
@click.argument("role")
@click.argument("corpus")
@dsn_option
def roles_grant_corpus(role: str, corpus: str, dsn: str | None) -> None:
    """Under tenant isolation, let ROLE (and its members) see CORPUS."""
    _connect(dsn).grant_corpus(role, corpus)
    click.echo(f"{role}: may see {corpus}")


@roles.command("revoke-corpus")
@click.argument("role")
@click.argument("corpus")
@dsn_option
def roles_revoke_corpus(role: str, corpus: str, dsn: str | None) -> None:
    """Under tenant isolation, hide CORPUS from ROLE again."""
    _connect(dsn).revoke_corpus(role, corpus)
    click.echo(f"{role}: no longer sees {corpus}")


@roles.command("isolation")
@click.argument("state", type=click.Choice(["on", "off"]))
@dsn_option
def roles_isolation(state: str, dsn: str | None) -> None:
    """Turn row-level security by corpus on or off for every pgrag table."""
    database = _connect(dsn)
    n = database.enable_tenant_isolation() if state == "on" else database.disable_tenant_isolation()
    click.echo(f"tenant isolation {state} ({n} tables)")


@roles.command("list")
@dsn_option
@json_option
def roles_list(dsn: str | None, as_json: bool) -> None:
    """The corpus access list: which role may see which corpus under isolation."""
    rows = _connect(dsn).corpus_access()
    if as_json:
        echo_json([{"corpus": c, "role": r} for c, r in rows], indent=2)
    else:
        for corpus, role in rows:
            click.echo(f"{corpus}\t{role}")


# -- corpora that follow an application table --------------------------------

@main.command()
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
    n = _connect(dsn).attach(corpus, table, id_column=id_column, text_column=text_column,
                             title_column=title_column, metadata_columns=metadata_columns, triples=triples,
                             embedding_model=model, max_attempts=max_attempts, retry_seconds=retry_seconds)
    click.echo(f"{corpus} follows {table}: {n} rows queued; run `pgrag worker` to index them")


@main.command()
@click.argument("corpus")
@click.option("--drop-corpus", is_flag=True, help="Also delete the corpus and everything derived.")
@dsn_option
def detach(corpus: str, drop_corpus: bool, dsn: str | None) -> None:
    """Stop CORPUS following its table: remove the triggers and the queue."""
    _connect(dsn).detach(corpus, drop_corpus=drop_corpus)
    click.echo(f"{corpus}: detached" + (" and dropped" if drop_corpus else ""))


@main.command()
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
    import signal

    from .follow import Worker

    database = _connect(dsn)
    bar_wanted = sys.stderr.isatty() if progress is None else progress
    bar: Any = None
    if bar_wanted:
        from .progress import tqdm

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
    signal.signal(signal.SIGTERM, lambda *_: w.stop())
    if bar is None:
        click.echo(json.dumps({"event": "start", "corpus": corpus, "once": once}), err=True)
    try:
        report = w.run(once=once)
    except KeyboardInterrupt:
        report = w.report
    if bar is not None:
        bar.close()
    summary = {"event": "stop", "batches": report.batches, "items": report.items, "indexed": report.indexed,
               "deleted": report.deleted, "failed": report.failed, "parked": report.parked}
    click.echo(json.dumps(summary), err=bar is None)


@main.command()
@click.option("--corpus", "-c", default=None, help="Only this corpus.")
@dsn_option
@json_option
def status(corpus: str | None, dsn: str | None, as_json: bool) -> None:
    """Sync status of attached corpora (pgrag.sync_status): pending, in progress,
    retrying and parked items, last error, last processed time, lag."""
    rows = _connect(dsn).sync_status(corpus)
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


@main.command()
@click.argument("corpus")
@click.argument("keys", nargs=-1)
@dsn_option
def requeue(corpus: str, keys: tuple[str, ...], dsn: str | None) -> None:
    """Put CORPUS's parked items (all, or those of KEYS) back in the queue."""
    from .follow import requeue as requeue_items

    n = requeue_items(_connect(dsn), corpus, list(keys) or None)
    click.echo(f"{corpus}: {n} item(s) re-queued")


# -- where users meet pgrag: MCP (pgrag/mcp_server.py) -----------------------

@main.command("mcp")
@click.option("--transport", type=click.Choice(["stdio", "http"]), default="stdio", show_default=True,
              help="stdio (for Claude Desktop, Cursor, Zed) or streamable HTTP at http://HOST:PORT/mcp.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (http).")
@click.option("--port", type=click.IntRange(1, 65535), default=8765, show_default=True, help="Port (http).")
@llm_options
@dsn_option
def mcp_command(transport: str, host: str, port: int, llm_base_url: str | None, llm_model: str | None,
                dsn: str | None) -> None:
    """Serve pgrag as an MCP server: tools list_corpora, retrieve, answer and explain,
    as the role in the DSN (row-level security applies).

        pgrag mcp --dsn postgresql://reader@host/db
        pgrag mcp --transport http --port 8765
    """
    from .mcp_server import serve

    serve(_connect(dsn), llm=_llm_settings(llm_base_url, llm_model), transport=transport, host=host, port=port)


# -- where users meet pgrag: the web page and its picture (pgrag/ui) ---------

@main.command("ui")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(1, 65535), default=8000, show_default=True, help="Port.")
@llm_options
@dsn_option
def ui_command(host: str, port: int, llm_base_url: str | None, llm_model: str | None, dsn: str | None) -> None:
    """Serve a local web page over the corpora the DSN's role may read: ask a
    question, see the hits of several methods side by side, each hit highlighted in
    its document, and each method's path drawn.

        pgrag ui --dsn postgresql://reader@host/db      # then open http://127.0.0.1:8000/
    """
    from .ui.app import serve

    click.echo(f"pgrag ui on http://{host}:{port}/ (Ctrl-C stops it)", err=True)
    serve(_connect(dsn), llm=_llm_settings(llm_base_url, llm_model), host=host, port=port)


@main.command("explain")
@click.argument("question")
@click.option("--corpus", "-c", required=True, help="Corpus name.")
@click.option("--method", "-m", default="tigrag", show_default=True,
              help=f"Retrieval method: {', '.join(method_registry.names())}.")
@click.option("-k", "k", type=click.IntRange(min=1), default=5, show_default=True, help="Number of hits.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the picture and the hits as a self-contained HTML file here (opens offline).")
@llm_options
@dsn_option
def explain_command(question: str, corpus: str, method: str, k: int, html_path: Path | None,
                    llm_base_url: str | None, llm_model: str | None, dsn: str | None) -> None:
    """How METHOD reached its hits for QUESTION: the layers of its path (TIGRAG:
    seed tokens, PPR tokens, hop-1 chunks, entities, hop-2 chunks), as text or as an HTML file.

        pgrag explain "When did Lothair II's mother die?" --corpus pgrag-sample --method tigrag --html out.html
    """
    from .ui import render
    from .ui.explain import explain

    kb = _connect(dsn).corpus(corpus, create=False)
    settings = _llm_settings(llm_base_url, llm_model)
    view = explain(kb, question, method, k, llm=kb.llm(settings) if settings.configured else None)
    if html_path is not None:
        html_path.write_text(render.standalone(view, corpus), encoding="utf-8")
        click.echo(f"wrote {html_path}")
        return
    for layer in view.layers:
        click.echo(click.style(layer.label, bold=True) + ": " + " | ".join(layer.items))


if __name__ == "__main__":
    main()
