"""Where users meet pgrag: ``pgrag mcp`` (pgrag/mcp_server.py), ``pgrag serve``
(the HTTP JSON API, pgrag/http_api.py), ``pgrag ui`` (the local web page,
pgrag/ui) and ``pgrag explain`` (one retrieval's path)."""

from __future__ import annotations

from pathlib import Path

import click

from .. import methods as method_registry
from .common import dsn_option, llm_options, llm_settings, open_database


@click.command("mcp")
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
    from ..mcp_server import serve

    serve(open_database(dsn), llm=llm_settings(llm_base_url, llm_model), transport=transport, host=host, port=port)


@click.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (loopback: only this machine; 0.0.0.0 for every interface).")
@click.option("--port", type=click.IntRange(1, 65535), default=8765, show_default=True, help="Port.")
@click.option("--uds", type=click.Path(dir_okay=False), default=None, metavar="PATH",
              help="Listen on this Unix socket instead of HOST:PORT.")
@click.option("--api-key", default=None, metavar="KEY",
              help="Ask every request but /health for 'Authorization: Bearer KEY' (default: $PGRAG_API_KEY; "
                   "none: no key asked).")
@click.option("--concurrency", type=click.IntRange(1, 64), default=8, show_default=True,
              help="Calls run at once (each in a worker thread with its own connection).")
@llm_options
@dsn_option
def serve_command(host: str, port: int, uds: str | None, api_key: str | None, concurrency: int,
                  llm_base_url: str | None, llm_model: str | None, dsn: str | None) -> None:
    """Serve pgrag as an HTTP JSON API beside the database (docs/http.md): retrieve,
    answer, methods, corpora, health and /openapi.json, for an application in any
    language where the database has no PL/Python (a managed PostgreSQL).

    \b
        pgrag serve --dsn postgresql://reader@host/db
        curl -s http://127.0.0.1:8765/v1/corpora/pgrag-sample/retrieve -H 'Content-Type: application/json' \\
             -d '{"question": "When did the mother of Lothair II die?", "method": "tigrag"}'
    """
    from ..config import service_api_key
    from ..http_api import serve

    database = open_database(dsn)
    where = f"unix:{uds}" if uds else f"http://{'[' + host + ']' if ':' in host else host}:{port}/"
    click.echo(f"pgrag serve on {where} (Ctrl-C stops it)", err=True)
    serve(database, llm=llm_settings(llm_base_url, llm_model), api_key=api_key or service_api_key(),
          host=host, port=port, uds=uds, concurrency=concurrency)


@click.command("ui")
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
    from ..ui.app import serve

    click.echo(f"pgrag ui on http://{host}:{port}/ (Ctrl-C stops it)", err=True)
    serve(open_database(dsn), llm=llm_settings(llm_base_url, llm_model), host=host, port=port)


@click.command("explain")
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
    from ..ui import render
    from ..ui.explain import explain

    kb = open_database(dsn).corpus(corpus, create=False)
    settings = llm_settings(llm_base_url, llm_model)
    view = explain(kb, question, method, k, llm=kb.llm(settings) if settings.configured else None)
    if html_path is not None:
        html_path.write_text(render.standalone(view, corpus), encoding="utf-8")
        click.echo(f"wrote {html_path}")
        return
    for layer in view.layers:
        click.echo(click.style(layer.label, bold=True) + ": " + " | ".join(layer.items))
