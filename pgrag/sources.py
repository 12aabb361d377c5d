"""Input documents: validation of Python dicts and loading from files.

Everything is checked before anything is written, so bad input never leaves a
half-ingested corpus behind.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .exceptions import InputError

MAX_ID_LENGTH = 1000
TEXT_SUFFIXES = (".txt", ".md")


@dataclass(frozen=True, kw_only=True)
class DocumentIn:
    """A document to ingest. ``external_id`` is the application's key."""

    external_id: str
    title: str
    body: str
    metadata: dict[str, Any] = field(default_factory=dict)


def validate(documents: Iterable[Mapping[str, Any] | DocumentIn], *, source: str = "input") -> list[DocumentIn]:
    """Check and normalise documents given as dicts with ``text`` (or ``body``),
    optional ``id``, ``title`` and ``metadata``. Without an id the title is the id.
    Raises ``InputError`` naming the offending document."""
    out: list[DocumentIn] = []
    seen: dict[str, int] = {}
    for n, raw in enumerate(documents, start=1):
        where = f"{source}: document {n}"
        doc = raw if isinstance(raw, DocumentIn) else _from_mapping(raw, where)
        _check(doc, where)
        if doc.external_id in seen:
            raise InputError(
                f"{where}: duplicate id {doc.external_id!r} (also document {seen[doc.external_id]})")
        seen[doc.external_id] = n
        out.append(doc)
    return out


def _from_mapping(raw: Any, where: str) -> DocumentIn:
    if not isinstance(raw, Mapping):
        raise InputError(f"{where}: expected an object with 'text', got {type(raw).__name__}")
    body = raw.get("text", raw.get("body"))
    if not isinstance(body, str) or not body.strip():
        raise InputError(f"{where}: no text (a document needs a non-empty 'text' string)")
    title = raw.get("title", "")
    if title is None:
        title = ""
    if not isinstance(title, str):
        raise InputError(f"{where}: 'title' must be a string")
    ident = raw.get("id", title)
    if isinstance(ident, int) and not isinstance(ident, bool):
        ident = str(ident)
    if not isinstance(ident, str) or not ident.strip():
        raise InputError(f"{where}: no id (give an 'id', or a 'title' to use as the id)")
    metadata = raw.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise InputError(f"{where}: 'metadata' must be an object")
    return DocumentIn(external_id=ident, title=title, body=body, metadata=dict(metadata))


def _check(doc: DocumentIn, where: str) -> None:
    if not doc.body.strip():
        raise InputError(f"{where}: no text")
    if len(doc.external_id) > MAX_ID_LENGTH:
        raise InputError(f"{where}: id longer than {MAX_ID_LENGTH} characters")
    for name, value in (("id", doc.external_id), ("title", doc.title), ("text", doc.body)):
        _check_storable(value, f"{where}: {name}")
    try:
        # Strict JSON, as jsonb takes it: no NaN or Infinity.
        json.dumps(doc.metadata, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{where}: metadata is not JSON-serialisable: {exc}") from exc
    for value in _strings(doc.metadata):
        _check_storable(value, f"{where}: metadata")


def _strings(value: Any) -> Iterator[str]:
    """Every string in a JSON value, keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _strings(key)
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


def _check_storable(value: str, what: str) -> None:
    """PostgreSQL text and jsonb hold valid UTF-8 without NUL; say which rule broke."""
    if "\x00" in value:
        raise InputError(f"{what} contains a NUL character, which PostgreSQL text cannot store")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(f"{what} is not valid Unicode: lone surrogate {value[exc.start]!r} "
                         f"at position {exc.start}") from exc


def load_path(path: Path) -> list[DocumentIn]:
    """Documents from a JSON array, a JSONL file, or a folder of .txt/.md files."""
    if path.is_dir():
        return _load_folder(path)
    if not path.exists():
        raise InputError(f"{path}: no such file or folder")
    text = _read_text(path)
    if path.suffix == ".jsonl" or (path.suffix != ".json" and not text.lstrip().startswith("[")):
        return validate(_jsonl(path, text), source=str(path))
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: line {exc.lineno}, column {exc.colno}: invalid JSON: {exc.msg}") from exc
    if not isinstance(data, list):
        raise InputError(f"{path}: expected a JSON array of documents")
    return validate(data, source=str(path))


def _jsonl(path: Path, text: str) -> list[Any]:
    rows = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}: line {lineno}: invalid JSON: {exc.msg}") from exc
    return rows


def _load_folder(folder: Path) -> list[DocumentIn]:
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES)
    if not files:
        raise InputError(f"{folder}: no .txt or .md files")
    docs = [
        {"id": p.relative_to(folder).as_posix(), "title": p.stem, "text": _read_text(p),
         "metadata": {"path": p.relative_to(folder).as_posix()}}
        for p in files
    ]
    return validate(docs, source=str(folder))


def _read_text(path: Path) -> str:
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InputError(f"{path}: line {line}: not valid UTF-8 (byte offset {exc.start})") from exc
