"""pgrag over HTTP: a small JSON service beside the database (``pgrag serve``).

Managed PostgreSQL services have no PL/Python, so SQL's ``pgrag.retrieve`` cannot
run there. This service runs the same methods in its own process over
``pgrag.connect(dsn)`` and gives an application in any language the same
methods, options, filters and errors as JSON:

    POST /v1/corpora/{corpus}/retrieve   hits with provenance, and the trace
    POST /v1/corpora/{corpus}/answer     an answering method's answer (t2rag, threadrag, cirag)
    GET  /v1/methods                     names, options with defaults, filter / LLM
    GET  /v1/corpora                     the corpora the DSN's role may read
    GET  /health                         the database answers
    GET  /openapi.json                   an OpenAPI 3.1 document of all of it

A pgrag error is ``{"error": {"message", "sqlstate", "type"}}`` with an HTTP
status that fits it (``STATUS``). Blocking calls run in a thread pool, so
requests run concurrently over one shared ``Database`` (its connector keeps a
connection per thread). docs/http.md is the user's page.
"""

from __future__ import annotations

import dataclasses
import hmac
import inspect
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import methods
from .exceptions import (
    AnswerFailed,
    ConnectionFailed,
    CorpusNotFound,
    InputError,
    MethodNotBuilt,
    ModelRuntimeUnavailable,
    PgragError,
    QueryCanceled,
    UnknownMethod,
)

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response

    from .database import Database
    from .llm import LLMSettings
    from .results import Hit, Hits

log = logging.getLogger("pgrag.http")

MAX_BODY_BYTES = 1_000_000   # a question is at most 10,000 characters; 1 MB leaves room for any filter
MAX_K = 100                  # one request's work stays bounded
FIELDS = ("question", "method", "k", "options", "filter")

# The HTTP status of each pgrag error, most specific first; any other is 500.
# LLM failures are the upstream's (502); a runtime or database that is down is 503.
STATUS: tuple[tuple[type[PgragError], int], ...] = (
    (CorpusNotFound, 404), (MethodNotBuilt, 409), (UnknownMethod, 400), (InputError, 400),
    (AnswerFailed, 502), (ModelRuntimeUnavailable, 503), (ConnectionFailed, 503), (QueryCanceled, 503),
)


class RequestRejected(InputError):
    """The HTTP request itself is unusable (not JSON, too large, not an object)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def status_of(error: PgragError) -> int:
    """The HTTP status for a pgrag error."""
    if isinstance(error, RequestRejected):
        return error.status
    from .llm import LLMError  # the endpoint refused or failed: the upstream's fault

    if isinstance(error, LLMError):
        return 502
    return next((status for cls, status in STATUS if isinstance(error, cls)), 500)


def error_body(message: str, sqlstate: str | None, kind: str) -> dict[str, Any]:
    """Every error's JSON: ``sqlstate`` None for an error of HTTP itself (401, 404 route)."""
    return {"error": {"message": message, "sqlstate": sqlstate, "type": kind}}


# -- requests --------------------------------------------------------------------

def _default(function: Callable[..., Any]) -> str:
    """The default method of a ``Corpus`` call: the service's is Python's."""
    return str(inspect.signature(function).parameters["method"].default)


@dataclass(frozen=True, kw_only=True)
class Ask:
    """One retrieve or answer request, checked: the question, the method, ``k``
    and the method's options (the filter among them, as ``kb.retrieve`` takes it)."""

    question: str
    method: str
    k: int
    options: dict[str, Any]

    @classmethod
    def from_json(cls, body: Any, *, default_method: str) -> "Ask":
        """The request of a decoded JSON body; an ``InputError`` for anything off."""
        if not isinstance(body, dict):
            raise RequestRejected(f"the body must be a JSON object, not {type(body).__name__}")
        unknown = sorted(set(body) - set(FIELDS))
        if unknown:
            raise InputError(f"unknown field(s) {', '.join(unknown)}; a request takes {', '.join(FIELDS)}")
        question, method, k = body.get("question"), body.get("method", default_method), body.get("k", 5)
        if not isinstance(question, str):
            raise InputError("question must be a string")
        if not isinstance(method, str):
            raise InputError("method must be a string")
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_K:
            raise InputError(f"k must be an integer from 1 to {MAX_K}")
        return cls(question=question, method=method, k=k, options=_options(body))


def _options(body: dict[str, Any]) -> dict[str, Any]:
    options, wanted = body.get("options"), body.get("filter")
    options = {} if options is None else options
    if not isinstance(options, dict):
        raise InputError("options must be a JSON object")
    if "llm" in options:   # the endpoint and its key are the service's, never a caller's
        raise InputError("option 'llm' is the service's: start `pgrag serve` with --llm / PGRAG_LLM_*")
    if wanted is None:
        return dict(options)
    if not isinstance(wanted, dict):
        raise InputError("filter must be a JSON object (docs/filters.md)")
    if "filter" in options:
        raise InputError("give the filter once: as 'filter' or in 'options', not both")
    return {**options, "filter": wanted}


def _configured(spec: methods.MethodSpec, options: dict[str, Any]) -> None:
    """Check the method's own options before anything runs: a bad one is the
    caller's mistake (400; ``configure`` raises ``OptionError``, an InputError,
    and an application's method may raise a plain PgragError)."""
    try:
        spec.configure({k: v for k, v in options.items() if k != "filter"})
    except InputError:
        raise
    except PgragError as exc:
        raise InputError(str(exc)) from exc


# -- the service's logic, apart from HTTP -----------------------------------------

def hit_json(hit: "Hit") -> dict[str, Any]:
    """A hit as the framework retrievers' metadata gives it (pgrag.integrations.calls):
    pgrag.retrieve's columns, ``details`` and TIGRAG's ``hop``."""
    return {**hit.row(), "hop": hit.details.get("hop")}


class Service:
    """What the endpoints do, over one ``Database`` shared by every request thread;
    the LLM-driven methods use ``llm`` (default: PGRAG_LLM_*) where it is configured."""

    def __init__(self, database: "Database", llm: "LLMSettings | None" = None) -> None:
        from .corpus import Corpus
        from .llm import LLMSettings

        self.database = database
        self.llm = llm if llm is not None else LLMSettings.from_env()
        self.defaults = {"retrieve": _default(Corpus.retrieve), "answer": _default(Corpus.answer)}

    def health(self) -> dict[str, Any]:
        self.database.fetch_row("server_facts")   # one round trip: the database answers
        return {"status": "ok", "version": version()}

    def corpora(self) -> list[dict[str, Any]]:
        return self.database.corpora()

    def methods(self) -> list[dict[str, Any]]:
        return [method_json(spec) for spec in methods.registry().values()]

    def retrieve(self, corpus: str, body: Any) -> dict[str, Any]:
        ask = Ask.from_json(body, default_method=self.defaults["retrieve"])
        hits = self._run(corpus, ask, ask.options)
        return {"corpus": corpus, "method": ask.method, "k": ask.k, "answer": hits.answer,
                "hits": [hit_json(h) for h in hits], "trace": dataclasses.asdict(hits.trace)}

    def answer(self, corpus: str, body: Any) -> dict[str, Any]:
        """SQL pgrag.answer's result (``pgrag.inserver.answer_result``): ``strict``
        in the options makes a failed LLM an error (PR010, 502) instead of
        ``finish = "llm_error"`` with the retrieval-only hits."""
        from .inserver import answer_result

        ask = Ask.from_json(body, default_method=self.defaults["answer"])
        if not methods.get(ask.method).answers:   # as SQL's pgrag.answer says it
            raise InputError(f"method {ask.method!r} retrieves but does not answer: call retrieve for its hits")
        options = dict(ask.options)
        strict = options.pop("strict", False)
        if not isinstance(strict, bool):
            raise InputError("option 'strict' must be true or false")
        hits = self._run(corpus, ask, options)
        result = answer_result(ask.method, hits, self.llm, strict=strict)
        return {"corpus": corpus, "method": ask.method, "k": ask.k, **result,
                "hits": [hit_json(h) for h in hits]}

    def _run(self, corpus: str, ask: Ask, options: dict[str, Any]) -> "Hits":
        spec = methods.get(ask.method)
        _configured(spec, options)
        kb = self.database.corpus(corpus, create=False)
        # The service's LLM, or none: never one a caller or another setting names.
        llm = (kb.llm(self.llm) if self.llm.configured else False) if spec.takes_llm else None
        return kb.retrieve(ask.question, method=ask.method, k=ask.k, llm=llm, **options)


def method_json(spec: methods.MethodSpec) -> dict[str, Any]:
    """A method as GET /v1/methods lists it: its options with their defaults and what it takes."""
    settings = spec.settings
    options = {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)} if settings else {}
    return {"name": spec.name, "main": spec.name in methods.MAIN, "options": options, "filter": spec.filters,
            "llm": spec.takes_llm, "answers": spec.answers, "needs_triples": spec.needs_triples,
            "family": spec.family}


def version() -> str:
    """The installed pgrag's version (what /health reports)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("pgrag-multihop")
    except PackageNotFoundError:  # a checkout on sys.path, not installed
        return "0"


# -- HTTP ------------------------------------------------------------------------

Endpoint = Callable[["Request"], Awaitable["Response"]]


def create_app(database: "Database", *, llm: "LLMSettings | None" = None, api_key: str | None = None,
               host: str | None = "127.0.0.1", concurrency: int = 8) -> "Starlette":
    """The service's application. ``api_key``: every endpoint but /health asks for
    ``Authorization: Bearer <key>``. ``host``: the address it listens on (the Host
    headers it accepts follow from it; None for a Unix socket). At most
    ``concurrency`` calls run at once, each in a worker thread."""
    import anyio
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.middleware import Middleware
    from starlette.middleware.trustedhost import TrustedHostMiddleware
    from starlette.routing import Route

    service = Service(database, llm)
    slots = anyio.CapacityLimiter(concurrency)
    secret = service.llm.api_key
    document = openapi(service)

    def respond(data: Any, status: int = 200) -> "Response":
        return json_response(data, status, secret)

    def endpoint(work: Callable[["Request"], Awaitable[Any]], *, public: bool = False) -> Endpoint:
        async def handle(request: "Request") -> "Response":
            if not public and api_key and not authorized(request, api_key):
                return json_response(error_body("missing or wrong API key (Authorization: Bearer <key>)",
                                                None, "Unauthorized"), 401, secret,
                                     {"WWW-Authenticate": "Bearer"})
            try:
                return respond(await work(request))
            except PgragError as exc:
                return respond(error_body(str(exc), exc.sqlstate, type(exc).__name__), status_of(exc))
            except Exception:   # a bug: logged here, never a traceback to the caller
                log.exception("pgrag serve: %s %s failed", request.method, request.url.path)
                return respond(error_body("internal error (see the service's log)", None, "InternalError"), 500)
        return handle

    async def blocking(fn: Callable[..., Any], *args: Any) -> Any:
        async with slots:
            return await run_in_threadpool(fn, *args)

    async def health(request: "Request") -> Any:
        try:
            return await blocking(service.health)
        except PgragError as exc:   # down is 503 whatever the reason, for a load balancer
            raise ConnectionFailed(f"the database does not answer: {exc}") from exc

    async def list_methods(request: "Request") -> Any:
        return {"methods": await blocking(service.methods)}

    async def corpora(request: "Request") -> Any:
        return {"corpora": await blocking(service.corpora)}

    async def retrieve(request: "Request") -> Any:
        return await blocking(service.retrieve, request.path_params["corpus"], await read_json(request))

    async def answer(request: "Request") -> Any:
        return await blocking(service.answer, request.path_params["corpus"], await read_json(request))

    async def spec(request: "Request") -> Any:
        return document

    async def not_found(request: "Request", exc: Any) -> "Response":
        status = getattr(exc, "status_code", 404)
        kind = {404: "NotFound", 405: "MethodNotAllowed"}.get(status, "HTTPError")
        return respond(error_body(f"no such endpoint: {request.method} {request.url.path} (see /openapi.json)",
                                  None, kind), status)

    routes = [
        Route("/health", endpoint(health, public=True)),
        Route("/openapi.json", endpoint(spec)),
        Route("/v1/methods", endpoint(list_methods)),
        Route("/v1/corpora", endpoint(corpora)),
        Route("/v1/corpora/{corpus}/retrieve", endpoint(retrieve), methods=["POST"]),
        Route("/v1/corpora/{corpus}/answer", endpoint(answer), methods=["POST"]),
    ]
    # Only the names this service answers to: a page of another site that rebinds
    # its own name to 127.0.0.1 (DNS rebinding) gets 400, not the corpora.
    hosts = ["*"] if host in (None, "0.0.0.0", "::") else sorted({"127.0.0.1", "localhost", "[::1]", str(host)})
    return Starlette(routes=routes, exception_handlers={404: not_found, 405: not_found},
                     middleware=[Middleware(TrustedHostMiddleware, allowed_hosts=hosts)])


def authorized(request: "Request", api_key: str) -> bool:
    """Whether the request carries ``Authorization: Bearer <api_key>`` (compared in constant time)."""
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), api_key.encode())


async def read_json(request: "Request") -> Any:
    """The request's JSON body, read no further than MAX_BODY_BYTES. Only
    ``application/json`` is read: a web page can send a form or text/plain to
    127.0.0.1 without asking (CSRF), but not JSON."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/json":
        raise RequestRejected(f"send the body as application/json, not {kind or 'no content type'}", 415)
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise RequestRejected(f"the body is over {MAX_BODY_BYTES:,} bytes", 413)
    body = bytearray()
    async for chunk in request.stream():   # a body sent without a length is counted as it comes
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            raise RequestRejected(f"the body is over {MAX_BODY_BYTES:,} bytes", 413)
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RequestRejected(f"the body is not JSON: {exc}") from None


def json_response(data: Any, status: int, secret: str | None,
                  headers: dict[str, str] | None = None) -> "Response":
    """``data`` as JSON; the LLM's key masked wherever it shows (an endpoint may
    echo it in an error message, and messages reach the trace)."""
    from starlette.responses import Response

    from .inserver import json_default

    text = json.dumps(data, default=json_default, ensure_ascii=False)
    if secret and secret in text:
        text = text.replace(secret, "***")
    return Response(text, status_code=status, media_type="application/json",
                    headers={"X-Content-Type-Options": "nosniff", "Cache-Control": "no-store", **(headers or {})})


def serve(database: "Database", *, llm: "LLMSettings | None" = None, api_key: str | None = None,
          host: str = "127.0.0.1", port: int = 8765, uds: str | None = None, concurrency: int = 8) -> None:
    """Serve the API until stopped (uvicorn), on ``host:port`` or the Unix socket ``uds``."""
    import uvicorn

    app = create_app(database, llm=llm, api_key=api_key, host=None if uds else host, concurrency=concurrency)
    uvicorn.run(app, host=host, port=port, uds=uds, log_level="warning")


# -- the OpenAPI document ----------------------------------------------------------

def openapi(service: Service) -> dict[str, Any]:
    """The OpenAPI 3.1 document of this service (its method names included)."""
    from .http_openapi import document

    return document(version(), [spec.name for spec in methods.registry().values()], service.defaults, MAX_K)
