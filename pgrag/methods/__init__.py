"""Retrieval methods, one module each, looked up by name.

A method is a function ``(corpus, question, k, **options) -> Hits``. The
built-in ones are below; an application or a researcher can add its own with
``register`` and compare it in ``pgrag.evaluate`` like any other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..exceptions import PgragError, UnknownMethod

if TYPE_CHECKING:
    from ..corpus import Corpus
    from ..results import Hits

Method = Callable[..., "Hits"]  # (corpus, question, k, **options) -> Hits

MAIN = ("dense", "bm25", "hybrid", "tigrag")   # what the demo and eval run by default
_registered: dict[str, Method] = {}


def registry() -> dict[str, Method]:
    from . import bm25, dense, hybrid, tigrag

    methods: dict[str, Method] = {"dense": dense.retrieve, "bm25": bm25.retrieve, "hybrid": hybrid.retrieve}
    methods.update({name: tigrag.retriever(name) for name in tigrag.PRESETS})
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
