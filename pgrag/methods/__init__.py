"""Retrieval methods, one module each, looked up by name."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..exceptions import UnknownMethod

if TYPE_CHECKING:
    from ..corpus import Corpus
    from ..results import Hits

Method = Callable[..., "Hits"]  # (corpus, question, k, **options) -> Hits


def registry() -> dict[str, Method]:
    from . import bm25, dense, hybrid, tigrag

    methods: dict[str, Method] = {"dense": dense.retrieve, "bm25": bm25.retrieve, "hybrid": hybrid.retrieve}
    methods.update({name: tigrag.retriever(name) for name in tigrag.PRESETS})
    return methods


def names() -> list[str]:
    return list(registry())


def get(name: str) -> Method:
    methods = registry()
    if name not in methods:
        raise UnknownMethod(f"unknown method {name!r}; available: {', '.join(methods)}")
    return methods[name]
