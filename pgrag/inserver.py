"""pgrag's Python inside PostgreSQL: what SQL's ``pgrag_internal._py(call, args)`` runs.

The SQL entry points (``pgrag.retrieve``, ``pgrag.embed``, ``pgrag.ppr``,
``pgrag.index``; ``sql/90_inserver.sql``) are thin SQL wrappers around one PL/Python
function, ``pgrag_internal._py``, which imports this module once per backend and calls
``call()``. Everything below builds a ``pgrag.context.Context`` over SPI
(``pgrag.spi.SpiDatabase``) and hands it to the same code a client process runs:
``pgrag.methods.run``, ``pgrag.index``, the ingest pipeline. No method has a
second implementation here.

Caches live as long as the backend: the embedding model (``get_embedder``), the
token graph by graph version (``pgrag.index.cache``), and the prepared plans (``GD``).
Errors that are pgrag's own come back as ``{"error": ...}`` and ``pgrag_internal._checked``
raises them with their SQLSTATE (``PgragError.sqlstate``); database errors (a
cancel, a timeout, a permission) propagate unchanged.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

# config sets the backend's environment defaults (no model hub, one BLAS thread)
# when it is first imported, which pgrag/__init__ does before numpy loads.
from . import model_client
from .exceptions import CorpusNotFound, InputError, OptionError, PgragError, echoed, quoted


def call(plpy: Any, GD: dict[str, Any], name: str, payload: str | dict[str, Any]) -> str:
    """Run entry point ``name`` with its JSON arguments; the JSON result."""
    handler = _CALLS.get(name)
    try:
        if handler is None:
            raise PgragError(f"unknown in-server call {name!r}")
        params = _arguments(payload)
        db = _database(plpy, GD)
        if "pgrag.threads" not in GD:
            GD["pgrag.threads"] = _threads(db)
        _use_model_runtime(db)
        with model_client.waiting(db.wait):   # a cancel ends a wait on the model runtime
            result = handler(db, **params)
    except PgragError as exc:
        # Raised by pgrag_internal._checked in SQL, so that the message reads as pgrag's own
        # (an exception leaving PL/Python is prefixed with its Python class name).
        error = {"error": {"message": f"pgrag: {exc}", "sqlstate": exc.sqlstate}}
        return json.dumps(_without(error, _secret(plpy, GD)))
    return json.dumps(result, default=json_default)


def _arguments(payload: str | dict[str, Any]) -> dict[str, Any]:
    """The call's arguments. SQL built them from its parameters, so what Python's
    JSON reader refuses came from a caller's options: a pgrag error, not Python's."""
    if not isinstance(payload, str):
        return dict(payload or {})
    try:
        params: dict[str, Any] = json.loads(payload, parse_int=_integer)
    except RecursionError:   # the reader recurses once a level; only a filter nests, 16 levels at most
        from .filters import MAX_DEPTH, FilterError

        raise FilterError(f"the options nest too deeply: a filter nests at most {MAX_DEPTH} levels deep, "
                          "and no other option nests") from None
    return params


def _integer(digits: str) -> int:
    # Python refuses to read an integer of over 4,300 digits (a ValueError); no
    # option or filter value needs a hundred.
    if len(digits.lstrip("-")) > 100:
        raise InputError("the options hold an integer of more than 100 digits")
    return int(digits)


def _secret(plpy: Any, GD: dict[str, Any]) -> str | None:
    try:
        return llm_settings(_database(plpy, GD))[0].api_key
    except PgragError:
        return None


def _threads(db: Any) -> int | None:
    """The backend's model threads, read at its first call: the session setting
    ``pgrag.torch_threads`` (e.g. a pool's ``options=-c pgrag.torch_threads=2``)
    when set, else config.torch_threads()'s rule (1 in a backend)."""
    from .config import set_torch_threads

    return set_torch_threads(db.fetch_row("torch_threads_setting")[0])


def _use_model_runtime(db: Any) -> None:
    """The session's ``pgrag.model_runtime`` / ``pgrag.model_api_key``, read on
    every call (a SET between calls takes effect at once; one cheap query)."""
    from .config import set_model_runtime

    set_model_runtime(*db.fetch_row("model_runtime_setting"))


def _database(plpy: Any, GD: dict[str, Any]) -> Any:
    from .spi import SpiDatabase

    return SpiDatabase(plpy, GD)


def _context(db: Any, corpus: Any) -> Any:
    from .config import Settings
    from .context import Context, lookup_corpus

    if not isinstance(corpus, str) or not corpus:
        raise InputError("corpus must be a non-empty name")
    info = lookup_corpus(db, corpus)
    if info is None:
        raise CorpusNotFound(f"corpus {quoted(corpus)} does not exist")
    # No LLM in the server yet: the LLM-driven methods run their retrieval-only fallback.
    return Context(db=db, info=info, spacy_model=Settings.from_env().spacy_model,
                   llm_note="no LLM inside the server: retrieval-only fallback (ask from Python for answers)")


def _options(options: Any) -> dict[str, Any]:
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise InputError(f"options must be a JSON object, not {type(options).__name__} ({json.dumps(options)[:80]})")
    return options


# -- entry points ------------------------------------------------------------------

def ping(db: Any) -> dict[str, Any]:
    import sys

    from . import __file__ as package_file

    heavy = ("torch", "sentence_transformers", "spacy", "sqlalchemy", "psycopg", "transformers")
    from . import embed, preload

    return {"python": sys.version.split()[0], "pgrag": os.path.dirname(package_file),
            "preloaded": preload.PRELOADED,
            "models": embed.loaded_here(),   # each with its engine and threads, once a call embeds in process
            "loaded": sorted(m for m in heavy if m in sys.modules)}


def model_runtime(db: Any) -> dict[str, Any]:
    """``SELECT pgrag.model_runtime()``: this backend's choice, and the shared runtime's health."""
    report: dict[str, Any] = model_client.describe_setting()
    target = model_client.endpoint()
    if target is not None and target.serves_nlp:
        try:
            report["health"] = model_client.health(target)
        except PgragError as exc:
            report["health"] = {"status": "down", "error": str(exc)}
    return report


def embed(db: Any, corpus: str, text: Any) -> dict[str, Any]:
    from .spi import vector_text

    if not isinstance(text, str):
        raise InputError("text must not be NULL")
    ctx = _context(db, corpus)
    return {"vector": vector_text(ctx.encode([text.replace("\x00", " ")])[0])}


def retrieve(db: Any, corpus: str, question: Any, method: Any, k: Any, options: Any,
             trace: bool = False) -> dict[str, Any]:
    from . import methods

    if question is None:
        raise InputError("question must not be NULL")
    if method is None or k is None:
        raise InputError("method and k must not be NULL")
    ctx = _context(db, corpus)
    hits = methods.run(ctx, method, question, k, _options(options))
    out: dict[str, Any] = {"hits": [h.row() for h in hits]}
    if hits.answer is not None:
        out["answer"] = hits.answer
    if trace:
        import dataclasses

        out["trace"] = dataclasses.asdict(hits.trace)
    return out


def ppr(db: Any, corpus: str, seeds: Any, damping: float, top: int, tolerance: float,
        max_iterations: int) -> dict[str, Any]:
    from .index.cache import token_graph
    from .index.pagerank import personalized_pagerank, top_nodes

    if damping is None or not 0 <= damping < 1:
        raise InputError(f"damping must be in [0, 1), got {damping}")
    ctx = _context(db, corpus)
    graph = token_graph(db, ctx.id)
    nodes = graph.index.seeds(seeds or [])
    if not nodes or not top or top < 1:
        return {"rows": []}
    result = personalized_pagerank(graph, nodes, damping=damping, tolerance=tolerance,
                                   max_iterations=max_iterations)
    best = top_nodes(result.scores, top)
    return {"rows": [{"term": graph.terms[i], "score": float(result.scores[i])} for i in best]}


def index(db: Any, corpus: str) -> dict[str, Any]:
    import dataclasses

    from .config import Settings
    from .ingest import index_pending

    ctx = _context(db, corpus)
    settings = Settings.from_env()
    report = index_pending(db, ctx.info, embedder=ctx.embedder, spacy_model=ctx.spacy_model,
                           batch_size=settings.batch_size, progress=False)
    # A corpus that follows an application table: its queue, then the triples
    # its attachment asks for, with the code of a client's kb.sync() and worker.
    from . import follow

    batches = []
    for att in follow.attachments(db, corpus):
        if att.triples == "llm":
            ctx.llm = _server_llm(db, ctx.id, "an attachment with llm triples")
        batches = follow.sync(ctx, batch_size=settings.batch_size, attachment=att)
    return {**dataclasses.asdict(report), "queue": [dataclasses.asdict(b) for b in batches]}


def threadrag_index(db: Any, corpus: str) -> dict[str, Any]:
    """ThreadRAG semantic nodes for the documents without any, in this statement."""
    import dataclasses

    from .semantic import build_semantic_nodes

    return dataclasses.asdict(build_semantic_nodes(_context(db, corpus), progress=False))


def threadrag_disable(db: Any, corpus: str, drop: Any) -> dict[str, Any]:
    """Stop maintaining ThreadRAG's semantic nodes (``drop``: delete them too)."""
    from . import families

    if not isinstance(drop, bool):
        raise InputError("drop must be true or false")
    ctx = _context(db, corpus)
    dropped = families.disable(db, ctx.id, "threadrag", drop=drop)
    return {"dropped": dropped, "families": list(families.current(db, ctx.id))}


def extract(db: Any, corpus: str, triples: Any) -> dict[str, Any]:
    """Triples and proposition embeddings for every chunk not yet processed by the
    extractor (``spacy``, or ``llm`` with the server's LLM settings); resumable."""
    import dataclasses

    from .extract import EXTRACTORS, extract_triples

    if triples not in EXTRACTORS:
        raise InputError(f"triples must be one of {', '.join(EXTRACTORS)}, not {triples!r}")
    ctx = _context(db, corpus)
    llm = _server_llm(db, ctx.id, "the llm extractor") if triples == "llm" else None
    report = extract_triples(ctx, triples, llm=llm, progress=False)
    return _without(dataclasses.asdict(report), llm.settings.api_key if llm else None)


def _server_llm(db: Any, corpus_id: int, needed_by: str) -> Any:
    """The server's configured LLM client, or a clear error naming what needs it."""
    settings, _sources = llm_settings(db)
    if not settings.configured:
        raise InputError(f"{needed_by} needs an LLM: SET pgrag.llm_base_url and pgrag.llm_model "
                         "(or PGRAG_LLM_* in the server's environment)")
    return _llm(db, corpus_id, settings)


def llm_settings(db: Any) -> tuple[Any, dict[str, str]]:
    """The LLM settings for this call, and where each came from. The pgrag.llm_*
    settings of the session win (PostgreSQL's own order: SET LOCAL, SET, ALTER
    ROLE / DATABASE, postgresql.conf), then PGRAG_LLM_* in the server's
    environment. The HTTP timeout is cut to what is left of statement_timeout."""
    from .llm import LLMSettings

    row = db.fetch_row("llm_settings_server")
    env = LLMSettings.from_env()
    chosen: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for i, name in enumerate(("base_url", "model", "api_key", "timeout")):
        if row[i] is not None:
            chosen[name], sources[name] = row[i], f"pgrag.llm_{name}"
        else:
            chosen[name], sources[name] = getattr(env, name), f"PGRAG_LLM_{name.upper()} (server environment)"
    try:
        timeout = float(chosen["timeout"])
    except (TypeError, ValueError):
        raise InputError(f"pgrag.llm_timeout must be a number of seconds, not {chosen['timeout']!r}") from None
    retries = env.max_retries
    statement_ms, elapsed_ms = row[4], row[5]
    if statement_ms:
        timeout = max(0.05, min(timeout, (statement_ms - elapsed_ms) / 1000))
        retries = 0   # each retry would wait again: the statement has one budget
        sources["timeout"] += ", bounded by statement_timeout"
    settings = LLMSettings(base_url=chosen["base_url"], model=chosen["model"], api_key=chosen["api_key"],
                           timeout=timeout, max_retries=retries, constrain=env.constrain)
    return settings, sources


def show_llm_settings(db: Any) -> dict[str, Any]:
    settings, sources = llm_settings(db)
    shown = {"base_url": settings.base_url, "model": settings.model,
             "api_key": "(set)" if settings.api_key else None, "timeout": settings.timeout}
    return {"rows": [{"setting": name, "value": None if value is None else str(value), "source": sources[name]}
                     for name, value in shown.items()]}


_LLM_FAILURES = {"llm_error", "malformed", "error"}


def answer(db: Any, corpus: str, question: Any, method: Any, options: Any) -> dict[str, Any]:
    """An answering method's answer, its evidence and its trace, with the LLM
    configured for the server; a failed LLM gives finish = llm_error and the
    retrieval-only hits, or with ``{"strict": true}`` an error (PR010)."""
    from . import methods

    if question is None or method is None:
        raise InputError("question and method must not be NULL")
    if not methods.get(method).answers:
        raise InputError(f"method {method!r} retrieves but does not answer: call pgrag.retrieve for its hits")
    opts = dict(_options(options))
    strict = opts.pop("strict", False)
    if not isinstance(strict, bool):
        raise OptionError(f"{method} option 'strict' takes true or false, not {echoed(strict)}")
    k = opts.pop("k", 5)
    ctx = _context(db, corpus)
    settings, _sources = llm_settings(db)
    if settings.configured:
        ctx.llm = _llm(db, ctx.id, settings)
    else:
        ctx.llm_note = ("no LLM configured for the server (SET pgrag.llm_base_url and pgrag.llm_model, or "
                        "PGRAG_LLM_* in the server's environment): retrieval-only fallback")
    hits = methods.run(ctx, method, question, k, opts)
    result = answer_result(method, hits, settings, strict=strict)
    return _without({**result, "hits": [h.row() for h in hits]}, settings.api_key)


def answer_result(method: str, hits: Any, settings: Any, *, strict: bool) -> dict[str, Any]:
    """pgrag.answer's result for an answering method's ``hits`` (but the hits
    themselves), with ``settings`` the LLM it ran with: ``finish`` is
    ``llm_error`` where a configured LLM failed, or under ``strict`` that is an
    error (PR010). Shared with ``pgrag serve`` (pgrag.http_api)."""
    import dataclasses

    from .exceptions import AnswerFailed

    outcomes = set(hits.trace.outcome.values())
    failed = settings.configured and (hits.answer is None or bool(_LLM_FAILURES & outcomes))
    finish = "llm_error" if failed else hits.trace.outcome.get("finish", "natural")
    if failed and strict:
        errors = [s.get("error") for s in hits.trace.steps if s.get("error")]
        raise AnswerFailed(f"{method} could not answer with the LLM {settings.model!r}: "
                           f"{errors[0] if errors else 'no answer'}")
    return {"answer": hits.answer, "trace": dataclasses.asdict(hits.trace), "llm_calls": hits.trace.llm_calls,
            "prompt_tokens": hits.trace.prompt_tokens, "completion_tokens": hits.trace.completion_tokens,
            "finish": finish}


_clients: dict[tuple[int, Any], Any] = {}


def _llm(db: Any, corpus_id: int, settings: Any) -> Any:
    """The backend's client for these settings: building an OpenAI client (its HTTP
    pool) costs more than a scripted reply, so it is kept, like the model."""
    from .llm import LLM

    llm = _clients.get((corpus_id, settings))
    if llm is None:
        if len(_clients) > 16:   # settings change per statement_timeout budget: keep few
            _clients.clear()
        llm = _clients[(corpus_id, settings)] = LLM(db, corpus_id, settings)
    llm.db = db   # this call's SPI connection (plans live in GD either way)
    return llm


def _without(result: dict[str, Any], secret: str | None) -> dict[str, Any]:
    """``result`` with every occurrence of ``secret`` masked (an endpoint may echo
    the key in an error message, and messages reach the trace)."""
    if not secret:
        return result
    text = json.dumps(result, default=json_default)
    return json.loads(text.replace(secret, "***")) if secret in text else result


def json_default(value: Any) -> Any:
    import numpy as np

    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


_CALLS: dict[str, Callable[..., dict[str, Any]]] = {
    "ping": ping, "model_runtime": model_runtime, "embed": embed, "retrieve": retrieve, "ppr": ppr, "index": index,
    "answer": answer, "extract": extract,
    "llm_settings": show_llm_settings, "threadrag_index": threadrag_index,
    "threadrag_disable": threadrag_disable,
}
