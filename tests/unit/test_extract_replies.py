"""The shape checks applied to LLM extraction replies: lenient with harmless
variations, strict with what cannot become a triple."""

from __future__ import annotations

import pytest

from pgrag.extract import _entity_list, _sentence_of, _triple_list


def test_entities_in_the_shapes_models_produce():
    assert _entity_list({"entities": ["Lothair II", " Teutberga ", ""]}) == ["Lothair II", "Teutberga"]
    assert _entity_list(["Paris", 1987]) == ["Paris", "1987"]
    assert _entity_list({"entities": [{"name": "Judd  Nelson", "type": "PERSON"}, {"x": 1}]}) == ["Judd Nelson"]
    for bad in ({"people": []}, "Paris", 3, None):
        with pytest.raises(ValueError):
            _entity_list(bad)


def test_triples_keep_only_three_short_non_empty_elements():
    value = {"triples": [["Lothair II", "was married to", "Teutberga"],
                         {"subject": "Teutberga", "predicate": "daughter of", "object": "Boso"},
                         ["x", "", "y"], ["a", "b"], ["a", "b", "c" * 500]]}
    assert _triple_list(value) == [("Lothair II", "was married to", "Teutberga"),
                                   ("Teutberga", "daughter of", "Boso")]
    assert _triple_list({"triples": []}) == []
    with pytest.raises(ValueError, match="no triple"):
        _triple_list({"triples": [["x", "", "y"]]})
    with pytest.raises(ValueError):
        _triple_list({"facts": []})


def test_sentence_of_a_triple():
    text = "Lothair II was king. He married Teutberga. She died in 875."
    start, end = _sentence_of(text, "Lothair II", "Teutberga")
    assert text[start:end] == "He married Teutberga."
    assert _sentence_of(text, "nobody", "nothing") == (0, len(text))
