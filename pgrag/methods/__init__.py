"""Retrieval methods, one module each, looked up by name.

A method is a function ``(corpus, question, k, **options) -> Hits``. The
built-in ones are below; an application or a researcher can add its own with
``register`` and compare it in ``pgrag.evaluate`` like any other.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..exceptions import PgragError, UnknownMethod

if TYPE_CHECKING:
    from ..corpus import Corpus
    from ..llm import LLM
    from ..results import Hits, Trace

Method = Callable[..., "Hits"]  # (corpus, question, k, **options) -> Hits

MAIN = ("dense", "bm25", "hybrid", "tigrag", "t2rag", "threadrag", "cirag")   # what the demo and eval run by default
_registered: dict[str, Method] = {}


def registry() -> dict[str, Method]:
    from . import bm25, cirag, dense, hybrid, t2rag, threadrag, tigrag

    methods: dict[str, Method] = {"dense": dense.retrieve, "bm25": bm25.retrieve, "hybrid": hybrid.retrieve}
    methods.update({name: tigrag.retriever(name) for name in tigrag.PRESETS})
    methods["t2rag"] = t2rag.retrieve
    methods["threadrag"] = threadrag.retrieve
    methods["cirag"] = cirag.retrieve
    methods.update(_registered)
    return methods


def register(name: str, method: Method) -> None:
    """Add a method under ``name`` (for this process). Built-in names are taken."""
    if not name or name in registry() and name not in _registered:
        raise PgragError(f"method name {name!r} is empty or already built in")
    _registered[name] = method


def unregister(name: str) -> None:
    _registered.pop(name, None)


def names(*, variants: bool = True) -> list[str]:
    """Every method name; without ``variants`` only the main ones (no presets
    or ablations such as ``tigrag-paper``)."""
    return list(registry()) if variants else [n for n in registry() if n in MAIN or n in _registered]


def get(name: str) -> Method:
    methods = registry()
    if name not in methods:
        raise UnknownMethod(f"unknown method {name!r}; available: {', '.join(methods)}")
    return methods[name]


def takes_option(name: str, option: str) -> bool:
    """Whether method ``name`` accepts ``option`` as a keyword (e.g. ``llm``)."""
    params = inspect.signature(get(name)).parameters
    return option in params and params[option].kind in (params[option].KEYWORD_ONLY,
                                                          params[option].POSITIONAL_OR_KEYWORD)


def encode(kb: "Corpus", texts: list[str], trace: "Trace") -> list[Any]:
    """Embeddings of ``texts`` with the corpus's model, timed as the trace's "embed" stage."""
    t0 = time.perf_counter()
    out = list(kb.embedder.encode(texts)) if texts else []
    trace.time("embed", t0)
    return out


def needs_triples(method_names: "list[str] | tuple[str, ...]") -> bool:
    """Whether any of the methods retrieves triples/propositions (so the corpus
    must have them extracted first)."""
    return any(getattr(get(name), "needs_triples", False) for name in method_names)


def resolve_llm(kb: "Corpus", llm: "LLM | bool | None") -> "LLM | None":
    """The LLM an LLM-driven method uses: ``llm`` itself (re-bound to this
    corpus's cache, so no reply crosses corpora), none when ``llm`` is False,
    else the one configured in the environment (PGRAG_LLM_*), else none."""
    from ..llm import LLMSettings

    if llm is False:
        return None
    if llm is None or llm is True:
        settings = LLMSettings.from_env()
        return kb.llm(settings) if settings.configured else None
    return llm if llm.corpus_id == kb.id else kb.llm(llm.settings)


def without_llm_note(llm: Any) -> str:
    """The trace's explanation when a method runs without an LLM."""
    return ("LLM disabled (llm=False)" if llm is False else
            "no LLM configured (PGRAG_LLM_BASE_URL / PGRAG_LLM_MODEL, or llm=...): retrieval-only fallback")
