"""Plain-text helpers: paragraph spans, sentence windows, the chunk search text.

Tokenisation is *not* here: the token pipeline is defined once, in SQL
(``pgrag.tokenize``), and used by ingest and queries alike.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator

# spaCy refuses texts over 1M characters; paragraphs longer than this are cut at
# whitespace before parsing (sentences never span the cut).
MAX_PIECE = 100_000

_PARAGRAPH_BREAK = re.compile(r"\n[ \t\r\f\v]*\n")


def content_hash(title: str, body: str) -> str:
    """Same value as the database's generated ``document.content_hash``."""
    return hashlib.md5((title + "\n" + body).encode("utf-8")).hexdigest()


def chunk_search_text(title: str, chunk_text: str) -> str:
    """Text embedded for a chunk; mirrors SQL ``pgrag_internal.chunk_search_text``."""
    return chunk_text if title == "" else title + "\n" + chunk_text


def paragraph_spans(text: str) -> Iterator[tuple[int, int]]:
    """(start, end) of the non-blank paragraphs of ``text``, each at most MAX_PIECE long."""
    start = 0
    for match in _PARAGRAPH_BREAK.finditer(text):
        yield from _pieces(text, start, match.start())
        start = match.end()
    yield from _pieces(text, start, len(text))


def _pieces(text: str, start: int, end: int) -> Iterator[tuple[int, int]]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    while end - start > MAX_PIECE:
        cut = text.rfind(" ", start + MAX_PIECE // 2, start + MAX_PIECE)
        cut = cut if cut > start else start + MAX_PIECE
        yield start, cut
        start = cut
        while start < end and text[start].isspace():
            start += 1
    if end > start:
        yield start, end


def sentence_windows(n_sentences: int, size: int, overlap: int) -> list[tuple[int, int]]:
    """Inclusive (first, last) sentence ordinals of each chunk (TIGRAG eq. 3.1):
    windows of ``size`` sentences with stride ``size - overlap``. A window that would
    add no sentence beyond the previous one is not emitted."""
    if n_sentences <= 0:
        return []
    stride = size - overlap
    windows = []
    first = 0
    while True:
        last = min(first + size, n_sentences) - 1
        windows.append((first, last))
        if last >= n_sentences - 1:
            return windows
        first += stride
