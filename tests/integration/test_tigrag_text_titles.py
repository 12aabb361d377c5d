"""TIGRAG's text titles (pgrag.methods.tigrag_chain.with_titles) on the test
corpus: Lothair II's passage names his mother, "the second son of Emperor
Lothair I and Ermengarde of Tours", and spaCy's small model tags neither name,
so without the lever the second hop never looks for her."""

from __future__ import annotations

import pytest

from tests.conftest import seeded_database

database_uri = seeded_database("wiki")
QUESTION = "When did Lothair II's mother die?"


@pytest.fixture
def kb(db):
    return db.corpus("wiki")


def _first_hop_entities(hits) -> list[str]:
    return next(s for s in hits.trace.steps if s["step"] == "entities")["found"]


def test_a_title_the_driving_passage_names_becomes_a_bridge_spacy_missed(kb):
    # each hop's own scores (hop_normalise off) over two hops: which hop ranks her is the point here
    two = {"hop_normalise": False, "hops": 2}
    without = kb.retrieve(QUESTION, method="tigrag", k=5, text_titles=False, **two)
    with_titles = kb.retrieve(QUESTION, method="tigrag", k=5, **two)
    assert "Ermengarde of Tours" not in _first_hop_entities(without)
    found = _first_hop_entities(with_titles)
    assert "Ermengarde of Tours" in found and "Lothair II" not in found
    # her passage now ranks by the second hop's question + name vector (cosine 0.71 against
    # 0.52 for the question alone in the first hop)
    mother = {h.provenance.external_id: h for h in with_titles}["ermengarde"]
    before = {h.provenance.external_id: h for h in without}["ermengarde"]
    assert mother.details["hop"] == 2 and before.details["hop"] == 1
    assert mother.details["cosine"] > before.details["cosine"] + 0.1


def test_text_title_links_also_link_the_named_documents_into_the_next_hop(kb):
    def linked_in_hop_2(hits) -> list[str]:
        return next(s for s in hits.trace.steps if s["step"] == "titles" and s["hop"] == 2)["linked"]

    assert "Ermengarde of Tours" not in linked_in_hop_2(kb.retrieve(QUESTION, method="tigrag", k=5))
    assert "Ermengarde of Tours" in linked_in_hop_2(kb.retrieve(QUESTION, method="tigrag", k=5,
                                                                text_title_links=True))
