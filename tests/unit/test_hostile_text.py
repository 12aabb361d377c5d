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
    assert all(0 <= f <= last < n and last - f < size for f, last in windows)


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


# Named functions in strategies, not lambdas: hypothesis describes a lambda by
# parsing this file's source (see tests/integration/test_reliability.py).
def containers_of(inner: st.SearchStrategy) -> st.SearchStrategy:
    return st.lists(inner, max_size=3) | st.dictionaries(ANY_TEXT, inner, max_size=3)


def storable_containers_of(inner: st.SearchStrategy) -> st.SearchStrategy:
    return st.lists(inner, max_size=3) | st.dictionaries(STORABLE_TEXT, inner, max_size=3)


def not_blank(text: str) -> bool:
    return bool(text.strip())


def id_sized(text: str) -> bool:
    return len(text) <= 1000


def doc_id(doc: dict) -> object:
    return doc["id"]


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | ANY_TEXT,
    containers_of, max_leaves=6)

# Documents PostgreSQL can store: no NUL, no lone surrogate, finite numbers, a
# non-blank text and id. Control characters, RTL marks and SQL are all fine.
STORABLE_CHAR = st.characters(codec="utf-8", exclude_characters="\x00")
STORABLE_TEXT = st.text(STORABLE_CHAR, max_size=200)
NON_BLANK = st.text(STORABLE_CHAR, min_size=1, max_size=200).filter(not_blank)
STORABLE_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | STORABLE_TEXT,
    storable_containers_of, max_leaves=6)
VALID_DOC = st.fixed_dictionaries(
    {"id": NON_BLANK.filter(id_sized), "text": NON_BLANK},
    optional={"title": STORABLE_TEXT, "metadata": st.dictionaries(STORABLE_TEXT, STORABLE_JSON, max_size=3)})
RAW_DOC = st.one_of(
    st.dictionaries(st.sampled_from(["id", "title", "text", "body", "metadata"]), JSONISH, max_size=5),
    st.fixed_dictionaries({"id": ANY_TEXT, "title": ANY_TEXT, "text": ANY_TEXT},
                          optional={"metadata": st.dictionaries(ANY_TEXT, JSONISH, max_size=3)}),
    JSONISH,
    VALID_DOC,
)


def storable(value: str) -> bool:
    """What PostgreSQL text can hold: valid UTF-8 (no lone surrogate), no NUL."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in value


def strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from strings(k)
            yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)


def expected_id(raw) -> "str | None":
    """The id an independent reading of the input rules gives ``raw``, or None
    when the document must be refused (README "Input documents")."""
    if not isinstance(raw, dict):
        return None
    body = raw["text"] if "text" in raw else raw.get("body")
    title = raw.get("title") if raw.get("title") is not None else ""
    ident = raw["id"] if "id" in raw else title
    if isinstance(ident, int) and not isinstance(ident, bool):
        ident = str(ident)
    metadata = raw.get("metadata") or {}
    if not (isinstance(body, str) and body.strip() and isinstance(title, str) and isinstance(metadata, dict)):
        return None
    if not (isinstance(ident, str) and ident.strip() and len(ident) <= 1000):
        return None
    try:
        json.dumps(metadata, allow_nan=False)
    except (TypeError, ValueError):
        return None
    if not all(storable(v) for v in (ident, title, body, *strings(metadata))):
        return None
    return ident


@settings(deadline=None, max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(RAW_DOC, max_size=4))
def test_validate_accepts_only_storable_documents(raw):
    ids = [expected_id(r) for r in raw]
    if None in ids or len(set(ids)) < len(ids):
        with pytest.raises(InputError):
            validate(raw)
        return
    docs = validate(raw)
    assert [d.external_id for d in docs] == ids
    for doc in docs:
        assert isinstance(doc, DocumentIn)
        assert doc.body.strip() and doc.external_id.strip()
        assert all(storable(v) for v in (doc.external_id, doc.title, doc.body))
        text = json.dumps(doc.metadata, allow_nan=False, ensure_ascii=False)  # strict JSON, as jsonb takes it
        assert storable(text) and "\\u0000" not in text


@settings(deadline=None, max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(VALID_DOC, max_size=5, unique_by=doc_id))
def test_validate_accepts_every_storable_document_unchanged(raw):
    docs = validate(raw)
    assert [(d.external_id, d.title, d.body, d.metadata) for d in docs] == [
        (r["id"], r.get("title", ""), r["text"], r.get("metadata", {})) for r in raw]


FLAWS = {
    "nul in id": lambda d: {**d, "id": d["id"] + "\x00"},
    "surrogate in title": lambda d: {**d, "title": "t\udcff"},
    "surrogate in text": lambda d: {**d, "text": d["text"] + "\ud800"},
    "blank text": lambda d: {**d, "text": " \n\t"},
    "no text": lambda d: {k: v for k, v in d.items() if k != "text"},
    "id too long": lambda d: {**d, "id": "x" * 1001},
    "blank id": lambda d: {**d, "id": "  "},
    "title not a string": lambda d: {**d, "title": 5},
    "metadata not an object": lambda d: {**d, "metadata": [1, 2]},
    "nan in metadata": lambda d: {**d, "metadata": {"v": float("nan")}},
    "infinity in metadata": lambda d: {**d, "metadata": {"v": [float("-inf")]}},
    "nul in a metadata key": lambda d: {**d, "metadata": {"k\x00": 1}},
    "surrogate in metadata": lambda d: {**d, "metadata": {"k": {"deep": "\udfff"}}},
    "not an object": lambda d: [d],
}


@settings(deadline=None, max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(VALID_DOC, min_size=1, max_size=4, unique_by=doc_id), st.sampled_from(sorted(FLAWS)),
       st.data())
def test_one_flaw_among_valid_documents_is_refused(raw, flaw, data):
    at = data.draw(st.integers(0, len(raw) - 1))
    raw[at] = FLAWS[flaw](raw[at])
    with pytest.raises(InputError, match=f"document {at + 1}"):
        validate(raw)


def test_a_duplicate_id_is_refused():
    with pytest.raises(InputError, match="duplicate id 'a' \\(also document 1\\)"):
        validate([{"id": "a", "text": "x"}, {"id": "b", "text": "y"}, {"id": "a", "text": "z"}])


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
