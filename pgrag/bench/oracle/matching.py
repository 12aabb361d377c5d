"""The oracle's normalised matching: SQuAD normalisation, and whether a text
contains another as whole words."""

from __future__ import annotations

import re
import string
import unicodedata

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans({c: " " for c in string.punctuation + "‘’“”–—"})


def normalise(text: str) -> str:
    """SQuAD answer normalisation (lower case, no punctuation or articles), accents
    kept, words joined by single spaces."""
    text = unicodedata.normalize("NFC", text).casefold().translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def contains(haystack: str, needle: str) -> bool:
    """Whether ``needle`` occurs in ``haystack`` as whole words, both normalised."""
    n = normalise(needle)
    return bool(n) and f" {n} " in f" {normalise(haystack)} "

