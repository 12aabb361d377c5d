"""``pgrag server`` (the embedded PostgreSQL) and ``pgrag models`` (the shared
model runtime): the processes pgrag runs on this machine."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from .. import server as srv
from ..exceptions import PgragError
from .common import F, PgragGroup, data_dir_option, echo_json, json_option, load_settings


@click.group(cls=PgragGroup)
def server() -> None:
    """Start, stop or inspect the embedded PostgreSQL server."""


@server.command("start")
@data_dir_option
@click.option("--models/--no-models", default=None,
              help="Start the shared model runtime beside it (pgrag models serve), which every backend and "
                   "client on this machine then uses (default: yes, unless PGRAG_START_MODELS=0).")
def server_start(data_dir: Path | None, models: bool | None) -> None:
    """Start the embedded server (it keeps running) and print its URI."""
    from .. import embedded

    settings = load_settings(None, data_dir)
    click.echo(embedded.start(settings.data_dir, models=models, embedding_model=settings.embedding_model))


@server.command("stop")
@data_dir_option
def server_stop(data_dir: Path | None) -> None:
    """Stop the embedded server and its model runtime."""
    from .. import embedded

    settings = load_settings(None, data_dir)
    click.echo("stopped" if embedded.stop(settings.data_dir) else "not running")


@server.command("status")
@data_dir_option
def server_status(data_dir: Path | None) -> None:
    """Say whether the embedded server runs; print its URI on a line of its own,
    and psql's path (or open psql on it with `pgrag server psql`)."""
    st = srv.status(load_settings(None, data_dir).data_dir)
    click.echo(f"data directory: {st.data_dir}")
    click.echo(f"running: {'yes, pid ' + str(st.pid) if st.running else 'no'}")
    if st.uri:
        click.echo(st.uri)
    click.echo(f"psql: {st.psql}")
    from .. import preload

    click.echo("pgrag in the postmaster: " + ("yes (pgrag_preload)" if preload.configured(st.data_dir) else
               "no (python -m pgrag.preload builds it; PGRAG_PRELOAD=0 leaves it out)"))
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

    from .. import embedded

    settings = load_settings(None, data_dir)
    uri = embedded.start(settings.data_dir, embedding_model=settings.embedding_model)
    psql = str(srv.psql_path())
    os.execv(psql, [psql, uri, *psql_args])


@click.group(cls=PgragGroup)
def models() -> None:
    """The shared model runtime: one process that embeds (and parses) for every backend and client."""


def socket_option(fn: F) -> F:
    return click.option(
        "--socket", type=click.Path(path_type=Path), default=None,
        help="Unix socket to serve on (default: pgrag-models.sock in the embedded server's data directory, "
             "or $PGRAG_MODEL_SOCKET).")(fn)


def _socket(socket: Path | None, data_dir: Path | None) -> Path:
    from .. import model_service
    from ..config import default_model_socket

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
@click.option("--window-ms", type=float, default=None,
              help="How long a request waits for others to share its model batch (default: 0 on ONNX Runtime, "
                   "where a text costs the same alone or batched; 2 on torch).")
@click.option("--max-batch", type=int, default=64, show_default=True, help="Texts per model batch.")
@click.option("--port", type=int, default=None,
              help="Serve on TCP instead of a socket (for backends on other machines; nothing but the network "
                   "guards it: keep it on a private address). Backends then use pgrag.model_runtime = "
                   "'http://HOST:PORT/v1'.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address for --port.")
def models_serve(socket: Path | None, data_dir: Path | None, model: str | None, group: str | None,
                 owner: str | None, window_ms: float | None, max_batch: int, port: int | None, host: str) -> None:
    """Serve the models on a Unix socket, in the foreground, restarting the runtime if it dies.

    For an existing PostgreSQL on this machine, run it as the server's OS user and
    point the backends at it:

        pgrag models serve --socket /run/pgrag/models.sock
        ALTER SYSTEM SET pgrag.model_runtime = 'unix:/run/pgrag/models.sock';
    """
    from .. import model_service

    argv = ["--model", model or load_settings(None).embedding_model, "--max-batch", str(max_batch)]
    if window_ms is not None:
        argv += ["--window-ms", str(window_ms)]
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
    from ..model_client import Endpoint, describe_setting, health

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
            if isinstance(value, dict):   # cache, this_process: one "key: value" line each
                value = ", ".join(f"{k} {v}" for k, v in value.items())
            click.echo(f"{key}: {value}")
    if report["status"] != "ok":
        sys.exit(3)
