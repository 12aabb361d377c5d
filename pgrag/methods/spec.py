"""What a retrieval method is: a ``MethodSpec`` (see ``pgrag.methods``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..exceptions import PgragError

if TYPE_CHECKING:
    from ..context import Context
    from ..results import Hits

Run = Callable[["Context", str, int, Any], "Hits"]   # (ctx, question, k, settings) -> Hits


@dataclass(frozen=True, kw_only=True)
class MethodSpec:
    """One registered method."""

    name: str
    run: Run
    settings: Any = None            # default settings (a frozen dataclass instance); None: no options
    needs_triples: bool = False     # retrieves triples/propositions (the corpus must have them)
    takes_llm: bool = False         # uses ``ctx.llm`` when there is one
    answers: bool = False           # returns an answer (``Hits.answer``), not only hits
    family: str | None = None       # stored data it needs that a corpus keeps only when asked (pgrag.families)
    filters: bool = False           # finds only inside ``ctx.scope``, a metadata filter's documents

    def options(self) -> list[str]:
        return [f.name for f in dataclasses.fields(self.settings)] if self.settings is not None else []

    def configure(self, options: Mapping[str, Any]) -> Any:
        """The settings with ``options`` applied; a clear error for a bad one."""
        if not options:
            return self.settings
        if self.settings is None:
            raise PgragError(f"method {self.name!r} does not take option(s) {', '.join(options)} (it takes none)")
        unknown = [k for k in options if k not in self.options()]
        if unknown:
            raise PgragError(f"method {self.name!r} does not take option(s) {', '.join(unknown)} "
                             f"(settings: {', '.join(self.options())})")
        try:
            return dataclasses.replace(self.settings, **options)
        except (TypeError, ValueError) as exc:
            raise PgragError(f"bad {self.name} option: {exc} (settings: {', '.join(self.options())})") from exc
