"""Name keys and a document's names, as pgrag.entity_vector stores them."""

from __future__ import annotations

from pgrag.nlp import name_key
from pgrag.semantic import NameRow, document_names


def test_the_key_is_lower_case_with_single_spaces():
    assert name_key("  Lothair\nII ") == "lothair ii"
    assert name_key("Zoë  SALDAÑA") == "zoë saldaña"
    assert name_key(" \n") == ""


def test_a_document_names_each_key_once_at_its_first_mention():
    sentences = [(0, 20), (21, 40), (41, 60)]
    mentions = [("Lothair II", 45), ("Teutberga", 25), ("LOTHAIR  II", 3), ("lothair ii", 30), ("  ", 50)]
    assert document_names(mentions, sentences) == [
        NameRow(key="lothair ii", sentence=0), NameRow(key="teutberga", sentence=1)]
    assert document_names([], sentences) == []
