"""The scale harness's corpus copies (pgrag.bench.scale): copy 0 is the corpus, later
copies permute its names by a bijection and add new ones, and ids stay unique."""

from __future__ import annotations

import re

from pgrag.bench.scale import name_words, scaled_copy

DOCS = [
    {"title": "Lothair II", "text": "Lothair II was the son of Ermengarde of Tours. He died in August 869."},
    {"title": "Ermengarde of Tours", "text": "Ermengarde of Tours was the wife of Lothair I, the emperor."},
    {"title": "Tours", "text": "Tours is a city in France, on the Loire; the emperor visited it."},
]


def test_names_are_capitalised_words_never_in_lower_case():
    names = name_words(DOCS)
    assert {"Lothair", "Ermengarde", "Tours", "France", "Loire"} <= set(names)
    assert "He" not in names and "August" not in names     # "he" occurs in lower case; months are no names
    assert "The" not in names


def test_copy_zero_is_the_corpus_and_later_copies_rename_by_a_bijection():
    names = name_words(DOCS)
    assert scaled_copy(DOCS, 0, names) == DOCS
    copy = scaled_copy(DOCS, 3, names, new_share=0.0)
    words = [re.findall(r"\w+", d["title"] + " " + d["text"]) for d in DOCS]
    renamed = [re.findall(r"\w+", d["title"] + " " + d["text"]) for d in copy]
    mapping: dict[str, str] = {}
    for old, new in zip(words, renamed):
        assert len(old) == len(new)
        for a, b in zip(old, new):
            if a in names:
                assert mapping.setdefault(a, b) == b and b in names   # one name, one image, a known name
            else:
                assert a == b                                      # everything else untouched
    assert len(set(mapping.values())) == len(mapping) and mapping != {n: n for n in mapping}
    assert {d["id"] for d in copy} == {f"3/{d['title']}" for d in DOCS}


def test_a_share_of_the_names_is_new_in_each_copy():
    names = name_words(DOCS)
    text = " ".join(d["text"] for d in scaled_copy(DOCS, 1, names, new_share=0.5))
    assert {w for w in re.findall(r"\b[A-Z][a-z]+\b", text)} - set(names)
    assert scaled_copy(DOCS, 1, names) == scaled_copy(DOCS, 1, names)    # seeded: the same copy every run
