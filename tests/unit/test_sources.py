import json

import pytest

from pgrag.exceptions import InputError
from pgrag.sources import load_path, validate


def test_title_is_the_default_id():
    [doc] = validate([{"title": "Paris", "text": "Capital of France."}])
    assert doc.external_id == "Paris" and doc.body == "Capital of France."


@pytest.mark.parametrize("raw, message", [
    ({"id": "a", "text": "   "}, "no text"),
    ({"id": "a"}, "no text"),
    ({"text": "x"}, "no id"),
    ({"id": "a", "text": "x\x00y"}, "NUL"),
    ({"id": "a", "text": "x", "metadata": [1]}, "metadata"),
    ("just a string", "expected an object"),
])
def test_invalid_documents_are_named(raw, message):
    with pytest.raises(InputError, match=message):
        validate([{"id": "ok", "text": "fine"}, raw])
    with pytest.raises(InputError, match="document 2"):
        validate([{"id": "ok", "text": "fine"}, raw])


def test_duplicate_ids_within_one_batch():
    with pytest.raises(InputError, match="duplicate id 'a'.*document 1"):
        validate([{"id": "a", "text": "x"}, {"id": "b", "text": "y"}, {"id": "a", "text": "z"}])


def test_malformed_json_names_file_and_line(tmp_path):
    path = tmp_path / "docs.json"
    path.write_text('[\n {"id": "a", "text": "x"},\n {"id": "b" "text": "y"}\n]')
    with pytest.raises(InputError, match=r"docs\.json: line 3"):
        load_path(path)


def test_malformed_jsonl_names_file_and_line(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text('{"id": "a", "text": "x"}\n\n{"id": "b", "text": \n')
    with pytest.raises(InputError, match=r"docs\.jsonl: line 3"):
        load_path(path)


def test_non_utf8_file_is_rejected_with_its_name(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "good.txt").write_text("fine")
    (folder / "bad.txt").write_bytes(b"line one\ncaf\xe9\n")
    with pytest.raises(InputError, match=r"bad\.txt: line 2: not valid UTF-8"):
        load_path(folder)


def test_folder_of_text_files(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.txt").write_text("Alpha text.")
    (tmp_path / "sub" / "b.md").write_text("# Beta\nBeta text.")
    (tmp_path / "ignored.csv").write_text("x")
    docs = load_path(tmp_path)
    assert [d.external_id for d in docs] == ["a.txt", "sub/b.md"]
    assert docs[1].title == "b"


def test_json_array_and_jsonl_load_the_same(tmp_path):
    rows = [{"id": "a", "title": "A", "text": "x"}, {"id": "b", "title": "B", "text": "y"}]
    (tmp_path / "c.json").write_text(json.dumps(rows))
    (tmp_path / "c.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    assert load_path(tmp_path / "c.json") == load_path(tmp_path / "c.jsonl")


def test_missing_path(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        load_path(tmp_path / "nope.json")
