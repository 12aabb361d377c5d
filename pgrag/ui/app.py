"""The web page (Starlette): pick a corpus, ask a question, see the hits of two or
three methods side by side with their provenance in the document, and each
method's path as a picture. It reads as the role in its DSN, so row-level
security decides which corpora it sees; a corpus the role may not read is an
error page."""

from __future__ import annotations

import json
import threading
from typing import TYPE_CHECKING, Any

from .. import methods as registry
from ..exceptions import CorpusNotFound, PgragError
from . import render
from .explain import MethodView, explain, failed

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import HTMLResponse

    from ..database import Database
    from ..llm import LLMSettings

DEFAULT_METHODS = ("tigrag", "bm25", "dense")
MAX_K = 50


def create_app(database: "Database", *, llm: "LLMSettings | None" = None, host: str = "127.0.0.1") -> "Starlette":
    """The page's application; ``host`` is the address it listens on (the Host
    headers it accepts follow from it)."""
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.middleware.trustedhost import TrustedHostMiddleware
    from starlette.responses import HTMLResponse
    from starlette.routing import Route

    lock = threading.Lock()  # one Database, used by one request at a time
    names = registry.names(variants=False)

    def html(text: str, status: int = 200) -> HTMLResponse:
        return HTMLResponse(text, status_code=status, headers={
            "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
            "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
                                       "form-action 'self'; frame-ancestors 'none'"})

    def corpora() -> list[str]:
        return [str(c["name"]) for c in database.corpora()]

    def home(request: "Request") -> HTMLResponse:
        with lock:
            try:
                visible = corpora()
            except PgragError as exc:
                return html(render.error(str(exc), 403), 403)
        return html(render.page(corpora=visible, methods=names, chosen=list(DEFAULT_METHODS),
                                corpus=visible[0] if visible else None, question="", k=5, views=[]))

    def ask(request: "Request") -> HTMLResponse:
        params = request.query_params
        corpus = params.get("corpus", "")
        question = params.get("question", "").strip()
        chosen = [m for m in params.getlist("method") if m] or list(DEFAULT_METHODS)
        try:
            k = int(params.get("k", "5"))
        except ValueError:
            return html(render.error("k must be a whole number", 400), 400)
        if not corpus or not question or not 1 <= k <= MAX_K or len(chosen) > len(names):
            return html(render.error(f"give a corpus, a question, 1 to {len(names)} methods and k from 1 to {MAX_K}",
                                     400), 400)
        filter_text = params.get("filter", "").strip()
        try:
            options = {"filter": json.loads(filter_text)} if filter_text else {}
        except ValueError:
            return html(render.error("the filter is not JSON (docs/filters.md)", 400), 400)
        with lock:
            try:
                kb = database.corpus(corpus, create=False)
                visible = corpora()
            except CorpusNotFound as exc:  # also a corpus that row-level security hides
                return html(render.error(str(exc), 404), 404)
            except PgragError as exc:      # permission denied
                return html(render.error(str(exc), 403), 403)
            client = kb.llm(llm) if llm is not None and llm.configured else None
            views: list[MethodView] = []
            for method in chosen:
                try:
                    views.append(explain(kb, question, method, k, options, llm=client))
                except PgragError as exc:
                    views.append(failed(method, question, str(exc)))
        return html(render.page(corpora=visible, methods=names, chosen=chosen, corpus=corpus, question=question,
                                k=k, views=views, filter=filter_text))

    def not_found(request: "Request", exc: Any) -> HTMLResponse:
        return html(render.error("no such page", 404), 404)

    # Only the names this server answers to: a page of another site that rebinds its
    # own name to 127.0.0.1 (DNS rebinding) gets 400, not the corpora.
    hosts = ["*"] if host in ("0.0.0.0", "::") else sorted({"127.0.0.1", "localhost", "[::1]", host})
    return Starlette(routes=[Route("/", home), Route("/ask", ask)], exception_handlers={404: not_found},
                     middleware=[Middleware(TrustedHostMiddleware, allowed_hosts=hosts)])


def serve(database: "Database", *, llm: "LLMSettings | None" = None, host: str = "127.0.0.1",
          port: int = 8000) -> None:
    """Serve the page until stopped (uvicorn)."""
    import uvicorn

    uvicorn.run(create_app(database, llm=llm, host=host), host=host, port=port, log_level="warning")
