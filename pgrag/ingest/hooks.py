"""The families' hooks: how a method family (``pgrag.families``) adds its rows to ingest.

A family registers one ``FamilyHook`` under its name. The stages never name a
family: prepare asks the hooks of the families the corpus maintains to plan
their data (models only), write asks the hooks of the families maintained as of
the write lock to store it, in the same transaction as the documents' rows.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..embed import Embedder
    from .prepare import Prepared
    from .report import IngestReport


class FamilyHook(Protocol):
    """A family's part of ingest. Its plan lives in ``Prepared.derived[name]``."""

    def prepare(self, prepared: "list[Prepared]", embedder: "Embedder", report: "IngestReport") -> None:
        """Plan the family's rows of prepared documents (models only, no database)."""
        ...

    def write(self, conn: Any, corpus_id: int, work: "list[Prepared]", ids: dict[str, int],
              embedder: "Embedder", report: "IngestReport") -> None:
        """Store the rows of ``work`` (``ids``: external id -> document id) under the
        write lock; plan first what a preparation before an enable skipped."""
        ...


_HOOKS: dict[str, FamilyHook] = {}


def register(family: str, hook: FamilyHook) -> None:
    """Make ingest maintain ``family`` through ``hook`` for corpora that list it."""
    _HOOKS[family] = hook


def hooks_for(families: Iterable[str]) -> list[tuple[str, FamilyHook]]:
    """The registered hooks of ``families``, in their order."""
    return [(f, _HOOKS[f]) for f in families if f in _HOOKS]
