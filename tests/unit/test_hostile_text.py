"""Hostile input to the pure text pipeline (hypothesis): arbitrary Unicode, control
characters, NUL bytes, lone surrogates, extremely long tokens and huge documents.
Every input gives a correct result or an ``InputError``, never another exception."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pgrag.exceptions import InputError
from pgrag.sources import DocumentIn, validate
from pgrag.text import MAX_PIECE, chunk_search_text, content_hash, paragraph_spans, sentence_windows

# Every code point, control characters and lone surrogates included.
ANY_CHAR = st.characters(codec=None, categories=None)
ANY_TEXT = st.text(ANY_CHAR, max_size=300)
SPACEY = st.text(st.sampled_from([" ", "\n", "\t", "\r", "\x0b", "\x0c", "a", "é", "字", "\x00", "'", ";"]),
                 max_size=300)
FEW = settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow])


def check_spans(text: str) -> None:
    spans = list(paragraph_spans(text))
    previous_end = 0
    for start, end in spans:
        assert previous_end <= start < end <= len(text)
        assert end - start <= MAX_PIECE
        assert not text[start].isspace() and not text[end - 1].isspace()
        previous_end = end
    covered = "".join(text[s:e] for s, e in spans)
    # nothing but whitespace is ever dropped
    assert [c for c in text if not c.isspace()] == [c for c in covered if not c.isspace()]


@FEW
@given(st.one_of(ANY_TEXT, SPACEY))
def test_paragraph_spans_cover_every_visible_character(text):
    check_spans(text)


@pytest.mark.parametrize("text", [
    "x" * (3 * MAX_PIECE + 17),                                  # one enormous token, no whitespace
    ("word " * 60_000) + "\n\n" + "y" * (MAX_PIECE + 1),          # a huge paragraph, then a long token
    "\u200b".join(["a"] * 150_000),                              # zero-width spaces are not whitespace
])
def test_paragraph_spans_cut_huge_paragraphs_and_tokens(text):
    check_spans(text)


@FEW
@given(st.integers(-5, 400), st.integers(1, 12), st.data())
def test_sentence_windows_cover_every_sentence_in_order(n, size, data):
    overlap = data.draw(st.integers(0, size - 1))
    windows = sentence_windows(n, size, overlap)
    if n <= 0:
        assert windows == []
        return
    assert windows[0][0] == 0 and windows[-1][1] == n - 1
    for (f1, l1), (f2, l2) in zip(windows, windows[1:]):
        assert f1 < f2 and l1 < l2 and f2 <= l1 + 1
    assert all(0 <= f <= l < n and l - f < size for f, l in windows)


@FEW
@given(ANY_TEXT, ANY_TEXT)
def test_hash_and_search_text_accept_any_string(title, body):
    # lone surrogates cannot be hashed as UTF-8; validate() rejects them first
    if any(0xD800 <= ord(c) <= 0xDFFF for c in title + body):
        with pytest.raises(UnicodeEncodeError):
            content_hash(title, body)
        return
    assert len(content_hash(title, body)) == 32
    assert chunk_search_text(title, body).endswith(body)


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | ANY_TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(ANY_TEXT, inner, max_size=3), max_leaves=6)
RAW_DOC = st.one_of(
    st.dictionaries(st.sampled_from(["id", "title", "text", "body", "metadata"]), JSONISH, max_size=5),
    st.fixed_dictionaries({"id": ANY_TEXT, "title": ANY_TEXT, "text": ANY_TEXT},
                          optional={"metadata": st.dictionaries(ANY_TEXT, JSONISH, max_size=3)}),
    JSONISH,
)


def storable(value: str) -> bool:
    """What PostgreSQL text can hold: valid UTF-8 (no lone surrogate), no NUL."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in value


@settings(deadline=None, max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(RAW_DOC, max_size=4))
def test_validate_accepts_only_storable_documents(raw):
    try:
        docs = validate(raw)
    except InputError:
        return
    for doc in docs:
        assert isinstance(doc, DocumentIn)
        assert doc.body.strip() and doc.external_id.strip()
        assert all(storable(v) for v in (doc.external_id, doc.title, doc.body))
        text = json.dumps(doc.metadata, allow_nan=False, ensure_ascii=False)  # strict JSON, as jsonb takes it
        assert storable(text) and "\\u0000" not in text
    assert len({d.external_id for d in docs}) == len(docs)


@pytest.mark.parametrize("doc, message", [
    ({"id": "a\ud800", "text": "x"}, "not valid Unicode"),
    ({"id": "a", "title": "t\udfff", "text": "x"}, "not valid Unicode"),
    ({"id": "a", "text": "lone \udc80 surrogate"}, "not valid Unicode"),
    ({"id": "a", "text": "x", "metadata": {"k": "nul \x00"}}, "NUL"),
    ({"id": "a", "text": "x", "metadata": {"k\x00": 1}}, "NUL"),
    ({"id": "a", "text": "x", "metadata": {"k": float("nan")}}, "JSON"),
    ({"id": "a", "text": "x", "metadata": {"k": "\ud800"}}, "not valid Unicode"),
    ({"id": "a\x00b", "text": "x"}, "NUL"),
])
def test_validate_names_what_postgres_could_not_store(doc, message):
    with pytest.raises(InputError, match=message):
        validate([doc])
