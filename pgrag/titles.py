"""Document titles that a text names: TIGRAG's title linking (issue 37).

A question such as "Which film came out first, Dark River (2017 Film) or Airheads?"
names documents by their titles. ``TitleIndex.link`` finds them: every run of the
question's words whose first and last words are capitalised (or digits) is looked
up by its key (the words lower-cased, joined by one space) among the documents'
titles, with or without the title's trailing note ("(2017 film)"). Longer runs win
over the runs inside them, and a title matched with its note over titles matched
without theirs, so "Dark River (2017 Film)" links that film alone and not "Dark
River (1990 film)". ``TitleIndex.named`` looks up whole names (the entities a hop
found) the same way.

The index is every document's title and chunks, read by one query
(``document_titles``) and cached per corpus and graph version, like the ranking
index: a change to the corpus bumps the version and the next query reads the
titles again, O(documents): for 2Wiki's 6,119, measured on a loaded 2-core
machine, the query 24-45 ms, building the index 64-150 ms, 2.5 MB held. A linking
itself is a dictionary lookup per run of capitalised words (0.08 ms a question).
At scale, an expression index on the title key (a migration) would replace the
full read; not done yet.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import QueryRunner

WORD = re.compile(r"[^\W_]+")
NOTE = re.compile(r"\s*\([^()]*\)\s*$")


def words(text: str) -> list[str]:
    """The runs of letters and digits of ``text`` (NFC), in order."""
    return WORD.findall(unicodedata.normalize("NFC", text))


def key(text: str) -> str:
    """A title's or a name's lookup key: its words, lower-cased, one space apart."""
    return " ".join(w.lower() for w in words(text))


@dataclass(frozen=True)
class Link:
    """A document a text names, and where (word positions, ``last`` inclusive)."""

    document_id: int
    title: str
    chunk_ids: tuple[int, ...]
    first: int
    last: int
    exact: bool          # matched with the title's note, or the title has none


class TitleIndex:
    """Documents by title key (with and without a trailing note)."""

    def __init__(self, rows: Iterable[tuple[int, str, Sequence[int]]]) -> None:
        self.by_key: dict[str, list[tuple[int, bool]]] = {}
        self.documents: dict[int, tuple[str, tuple[int, ...]]] = {}
        self.max_words = 0
        for document_id, title, chunk_ids in rows:
            self.documents[document_id] = (title, tuple(chunk_ids))
            full = key(title)
            stripped = key(NOTE.sub("", title))
            keys = [(full, True)] + ([(stripped, False)] if stripped != full else [])
            for k, exact in keys:
                if k:
                    self.by_key.setdefault(k, []).append((document_id, exact))
                    self.max_words = max(self.max_words, k.count(" ") + 1)

    def _matches(self, k: str, first: int, last: int) -> list[Link]:
        found = self.by_key.get(k, [])
        if any(exact for _, exact in found):
            found = [f for f in found if f[1]]
        return [Link(document_id=d, title=self.documents[d][0], chunk_ids=self.documents[d][1],
                     first=first, last=last, exact=exact) for d, exact in found]

    def link(self, text: str) -> list[Link]:
        """The documents ``text`` names by title: longest capitalised runs first,
        a run inside (or overlapping) a linked one is not linked again."""
        ws = words(text)
        capital = [w[:1].isupper() or w[:1].isdigit() for w in ws]
        spans = [(i, j) for i in range(len(ws)) if capital[i]
                 for j in range(i, min(len(ws), i + self.max_words)) if capital[j]]
        spans.sort(key=lambda s: (s[0] - s[1], s[0]))      # longest first, then leftmost
        taken = [False] * len(ws)
        out: list[Link] = []
        for i, j in spans:
            if any(taken[i:j + 1]):
                continue
            found = self._matches(" ".join(w.lower() for w in ws[i:j + 1]), i, j)
            if found:
                out.extend(found)
                taken[i:j + 1] = [True] * (j - i + 1)
        return sorted(out, key=lambda link: (link.first, link.document_id))

    def named(self, names: Sequence[str]) -> list[Link]:
        """The documents titled by each whole name (``first`` = the name's index)."""
        out: list[Link] = []
        for n, name in enumerate(names):
            out.extend(self._matches(key(name), n, n))
        return out


_cache: dict[tuple[str, int], tuple[int, TitleIndex]] = {}
_lock = threading.Lock()


def title_index(db: "QueryRunner", corpus_id: int, version: int) -> TitleIndex:
    """The corpus's title index at graph ``version`` (read once per version)."""
    cache_key = (db.dsn, corpus_id)
    with _lock:
        held = _cache.get(cache_key)
    if held is not None and held[0] == version:
        return held[1]
    index = TitleIndex(db.fetchall("document_titles", {"corpus_id": corpus_id}))
    with _lock:
        _cache[cache_key] = (version, index)
    return index


def clear_cache() -> None:
    with _lock:
        _cache.clear()
