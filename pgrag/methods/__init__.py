"""Retrieval methods, one module each, one registry entry each.

A method is a ``MethodSpec``: its name, a ``run(ctx, question, k, settings) ->
Hits`` function over a ``pgrag.context.Context``, its settings (a frozen
dataclass whose fields are the method's options, or None for no options) and
what it needs (triples, an LLM). ``run(ctx, name, question, k, options)`` below
is the one entry point, used by ``kb.retrieve`` in a client process and by SQL's
``pgrag.retrieve`` inside the server. An application or a researcher adds its
own method with ``register`` and compares it in ``pgrag.bench.evaluate`` like any other.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..exceptions import InputError, PgragError, UnknownMethod, quoted
from .spec import MethodSpec, Run

if TYPE_CHECKING:
    from ..context import Context
    from ..filters import Filter
    from ..results import Hits

__all__ = ["MAIN", "MethodSpec", "Run", "families_for", "get", "names", "needs_triples", "register", "registry",
           "run", "takes_option", "unregister"]

MAIN = ("dense", "bm25", "hybrid", "tigrag", "t2rag", "threadrag", "cirag")   # what the demo and eval run by default


_registered: dict[str, MethodSpec] = {}


# Each main method lives in the module of its name, so that running one imports
# only its own (a server backend's first bm25 call then skips the LLM methods,
# spaCy's helpers and prompts). tests/unit/test_method_modules.py checks it.
_MODULES = MAIN


def _module_of(name: str) -> str | None:
    """The module that defines built-in method ``name`` (tigrag's presets and
    ablations are ``tigrag-*``), or None for a name no built-in module has."""
    base = "tigrag" if name.startswith("tigrag-") else name
    return base if base in _MODULES else None


def _specs(module: str) -> list[MethodSpec]:
    import importlib

    loaded = importlib.import_module(f".{module}", __name__)
    return list(getattr(loaded, "SPECS", None) or [loaded.SPEC])


@functools.cache
def _builtin() -> dict[str, MethodSpec]:
    return {s.name: s for module in _MODULES for s in _specs(module)}


def registry() -> dict[str, MethodSpec]:
    return {**_builtin(), **_registered}


def register(spec: MethodSpec) -> None:
    """Add a method (for this process). Built-in names are taken."""
    if not spec.name or spec.name in _builtin():
        raise PgragError(f"method name {spec.name!r} is empty or already built in")
    _registered[spec.name] = spec


def unregister(name: str) -> None:
    _registered.pop(name, None)


def names(*, variants: bool = True) -> list[str]:
    """Every method name; without ``variants`` only the main ones (no presets
    or ablations such as ``tigrag-paper``)."""
    return list(registry()) if variants else [n for n in registry() if n in MAIN or n in _registered]


def get(name: str) -> MethodSpec:
    if name in _registered:
        return _registered[name]
    module = _module_of(name)
    if module is not None:   # only this method's module, not every method's
        found = next((s for s in _specs(module) if s.name == name), None)
        if found is not None:
            return found
    methods = registry()
    if name not in methods:
        raise UnknownMethod(f"unknown method {quoted(str(name))}; available: {', '.join(methods)}")
    return methods[name]


def takes_option(name: str, option: str) -> bool:
    """Whether method ``name`` accepts ``option`` (``llm`` for the LLM-driven ones)."""
    spec = get(name)
    return spec.takes_llm if option == "llm" else option in spec.options()


def families_for(method_names: "Iterable[str]") -> list[str]:
    """The method families (``pgrag.families``) the given methods need, in order
    (methods needing none add none)."""
    needed = (get(name).family for name in method_names)
    return list(dict.fromkeys(f for f in needed if f is not None))


def needs_triples(method_names: "list[str] | tuple[str, ...]") -> bool:
    """Whether any of the methods retrieves triples/propositions (so the corpus
    must have them extracted first)."""
    return any(get(name).needs_triples for name in method_names)


MAX_QUESTION_CHARS = 10_000
MAX_K = 1_000_000_000   # past it numpy's fixed-size integers overflow; SQL's k is an integer anyway


def run(ctx: "Context", name: str, question: Any, k: int = 5, options: Mapping[str, Any] | None = None) -> "Hits":
    """Run method ``name``: the one entry point of both homes (client and server)."""
    if not isinstance(question, str):
        raise InputError("question must be a string")
    # PostgreSQL text cannot hold NUL; it carries no meaning in a question.
    question = question.replace("\x00", " ")
    if not question.strip():
        raise InputError("question is empty")
    if len(question) > MAX_QUESTION_CHARS:
        # The embedding model reads a few hundred words; a longer "question" is a
        # document sent by mistake, and would only cost every stage its length.
        raise InputError(f"a question is at most {MAX_QUESTION_CHARS:,} characters, this one has {len(question):,}")
    try:  # a lone surrogate can be neither embedded nor sent to PostgreSQL
        question.encode("utf-8")
    except UnicodeEncodeError as error:
        raise InputError(f"the question is not valid Unicode (lone surrogate at position {error.start})") from None
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_K:
        # pgrag.answer reads k from its options: it may be any JSON number there
        raise InputError(f"k must be an integer of at least 1 (and at most {MAX_K:,})")
    spec = get(name)
    options = dict(options or {})
    wanted = options.pop("filter", None)
    settings = spec.configure(options)
    checked = _checked_filter(spec, wanted) if wanted is not None else None
    if spec.family is not None:
        ctx.require_family(spec.family)
    if checked is not None:
        import dataclasses

        from ..filters import scope

        ctx = dataclasses.replace(ctx, scope=scope(ctx.db, ctx.id, checked))
    from ..model_client import one_request

    with one_request():   # the runtime serves this question's hops before later questions'
        hits = spec.run(ctx, question, k, settings)
    if ctx.scope is not None:
        hits.trace.steps.insert(0, {"step": "filter", "filter": dict(ctx.scope.filter.spec),
                                    "documents": len(ctx.scope.documents)})
    return hits


def _checked_filter(spec: MethodSpec, wanted: Any) -> "Filter | None":
    """The metadata filter ``wanted``, checked (None for an empty one); an error
    for a method that cannot keep to one."""
    from ..filters import compile_filter

    checked = compile_filter(wanted)
    if checked is not None and not spec.filters:
        takes = ", ".join(n for n, s in registry().items() if s.filters)
        raise InputError(f"method {spec.name!r} does not take a filter yet; these do: {takes}")
    return checked
