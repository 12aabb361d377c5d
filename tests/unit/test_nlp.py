"""spaCy at query time (pgrag.nlp): ``entities`` runs only the NER and what it
listens to, and finds exactly what the full ``parse`` finds."""

import pytest

from pgrag import nlp
from pgrag.config import Settings

TEXTS = [
    "Who was the mother of Lothair II?",
    "Which film came out first, Aas Ka Panchhi or Phoolwari?",
    "Teutberga was a queen of Lotharingia.\n\nShe married Lothair II in 855, and Boso the Elder was her father.",
    "",
    "no names here at all",
]


@pytest.fixture(scope="module")
def model() -> str:
    return Settings.from_env().spacy_model


def test_entities_equal_those_of_the_full_parse(model):
    found = nlp.entities(TEXTS, model)
    assert found == [p.entities for p in nlp.parse(TEXTS, model)]
    second = TEXTS[2].index("\n\n")
    assert any(e.start > second and TEXTS[2][e.start:e.end] == e.text for e in found[2])   # offsets in the text
    assert found[3] == []


def test_the_ner_runs_without_the_sentence_segmenter(model):
    skipped = nlp._ner_only(nlp.load(model))
    assert "senter" in skipped and "ner" not in skipped
