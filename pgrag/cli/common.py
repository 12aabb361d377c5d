"""What every ``pgrag`` command shares: its settings and database, the options
many commands take, ``--json`` output, and library errors as exit code 1."""

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

from .. import methods as method_registry
from ..config import Settings
from ..exceptions import PgragError

F = TypeVar("F", bound=Callable[..., Any])


def load_settings(dsn: str | None, data_dir: Path | None = None) -> Settings:
    """The environment's settings, with the command's --dsn and --data-dir."""
    settings = Settings.from_env()
    changes: dict[str, Any] = {}
    if dsn:
        changes["dsn"] = dsn
    if data_dir:
        changes["data_dir"] = data_dir
    return dataclasses.replace(settings, **changes)


def open_database(dsn: str | None) -> Any:
    """The command's database, closed when the command ends (its connections
    would otherwise stay open until the process exits: a library caller of
    ``main``, a test among them, would leak them)."""
    from .. import connect

    settings = load_settings(dsn)
    database = connect(settings.dsn, settings=settings)
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.call_on_close(database.close)
    return database


def admin_dsn(dsn: str | None) -> str:
    """``dsn``, else the embedded server's URI (starting it)."""
    from .. import embedded

    settings = load_settings(dsn)
    return settings.dsn or embedded.start(settings.data_dir, embedding_model=settings.embedding_model)


def llm_settings(base_url: str | None, model: str | None) -> Any:
    """The LLM of --llm / --llm-model, else of PGRAG_LLM_*."""
    from ..llm import LLMSettings

    return LLMSettings.from_env(base_url=base_url, model=model)


class PgragGroup(click.Group):
    """Turns library errors into a one-line message and exit code 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except PgragError as exc:
            raise click.ClickException(str(exc)) from exc


# -- options many commands take ------------------------------------------------

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


def llm_options(fn: F) -> F:
    fn = click.option("--llm-model", default=None, metavar="NAME",
                      help="LLM model name (default: $PGRAG_LLM_MODEL).")(fn)
    return click.option("--llm", "llm_base_url", default=None, metavar="URL",
                        help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8080/v1 "
                             "(default: $PGRAG_LLM_BASE_URL).")(fn)


def int_list(ctx: click.Context, param: click.Parameter, value: str) -> tuple[int, ...]:
    """Callback: a comma-separated list of k, each at least 1."""
    try:
        ks = tuple(int(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {value!r}") from None
    if not ks or min(ks) < 1:
        raise click.BadParameter("give at least one k, each at least 1")
    return ks


def method_list(ctx: click.Context | None, param: click.Parameter | None, value: str) -> list[str]:
    """Callback: a comma-separated list of known methods, without repeats."""
    names = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [n for n in names if n not in method_registry.names()]
    if unknown or not names:
        raise click.BadParameter(
            f"unknown method(s) {', '.join(unknown) or '(none given)'}; "
            f"available: {', '.join(method_registry.names())}")
    return list(dict.fromkeys(names))


def ingest_methods(names: str) -> list[str]:
    """``ingest --methods``: may be empty (the default methods need no family)."""
    return method_list(None, None, names) if names.strip() else []


# -- --json ----------------------------------------------------------------------

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

