"""Which bridge entities lead TIGRAG's second hop (context_weight, bridge_limit)
and how the hops' rankings merge (hop_normalise), on a small corpus this module
builds. Hand-checked.

The question "Who is the spouse of the actor who plays Paul in Breakfast at
Tiffany's?" finds the film's passage first. It names four people; only George
Peppard's sentence holds the question's words ("George Peppard plays Paul
Varjak"). Blake Edwards' passage says "actor" and "spouse" as the remaining part
of the question does, so by cosine alone it beats Peppard's, which says
"married"."""

from __future__ import annotations

import pytest

from tests.conftest import seeded_database

DOCS = [
    {"id": "film", "title": "Breakfast at Tiffany's (film)",
     "text": "Breakfast at Tiffany's is a 1961 romantic comedy film. It was directed by Blake Edwards. "
             "George Peppard plays Paul Varjak, a young writer. Buddy Ebsen appears as Doc Golightly. "
             "The score was written by Henry Mancini."},
    {"id": "peppard", "title": "George Peppard",
     "text": "George Peppard was an American actor. He was married to the actress Elizabeth Ashley from 1966 to 1972."},
    {"id": "ebsen", "title": "Buddy Ebsen",
     "text": "Buddy Ebsen was an American actor and dancer. His spouse was Dorothy Knott."},
    {"id": "mancini", "title": "Henry Mancini",
     "text": "Henry Mancini was an American composer. His spouse was the singer Ginny O'Connor."},
    {"id": "edwards", "title": "Blake Edwards",
     "text": "Blake Edwards was an American film director and actor. His spouse was the actress Julie Andrews."},
    {"id": "ashley", "title": "Elizabeth Ashley",
     "text": "Elizabeth Ashley is an American stage and film actress, born in Ocala, Florida."},
]
QUESTION = "Who is the spouse of the actor who plays Paul in Breakfast at Tiffany's?"

database_uri = seeded_database("bridges", docs=DOCS)


@pytest.fixture
def kb(db):
    return db.corpus("bridges")


def _ranking(hits):
    return [(h.provenance.external_id, h.details["hop"]) for h in hits]


def _context(hits):
    return next(s for s in hits.trace.steps if s["step"] == "hop_embeddings")


def test_the_bridge_whose_sentence_holds_the_question_leads_the_second_hop(kb):
    """The question's words less function words are spouse, actor, plays, Paul,
    Breakfast, Tiffany and s: Peppard's sentence holds plays and Paul (2 of 7),
    Paul Varjak's plays (1 of the 6 not his own), the others' none. Peppard's
    vector gains 0.1 x 2/7 = 0.029, more than the 0.017 by which Edwards'
    passage led on cosine."""
    hits = kb.retrieve(QUESTION, method="tigrag", k=4)
    step = _context(hits)
    assert step["remainder"] == "Who spouse of actor who in"
    assert step["context"] == {"Blake Edwards": 0.0, "George Peppard": pytest.approx(2 / 7),
                               "Paul Varjak": pytest.approx(1 / 6), "Buddy Ebsen": 0.0,
                               "Doc Golightly": 0.0, "Henry Mancini": 0.0}
    assert _ranking(hits) == [("film", 1), ("peppard", 2), ("edwards", 2), ("ebsen", 2)]
    plain = kb.retrieve(QUESTION, method="tigrag", k=4, context_weight=0.0)
    assert _ranking(plain) == [("film", 1), ("edwards", 2), ("peppard", 2), ("ebsen", 2)]


def test_bridge_limit_encodes_only_the_best_bridges(kb):
    """The default's limit (8) keeps all six bridges here; a limit of 2 keeps
    Peppard and Paul Varjak (a tie would keep the earlier), and only their
    texts are encoded."""
    assert _context(kb.retrieve(QUESTION, method="tigrag", k=4))["vectors"] == 6
    hits = kb.retrieve(QUESTION, method="tigrag", k=4, bridge_limit=2)
    step = _context(hits)
    assert list(step["context"]) == ["George Peppard", "Paul Varjak"] and step["vectors"] == 2
    hop2 = [s for s in hits.trace.steps if s["step"] == "hop"][1]
    assert hop2["embeddings"] == 2
    assert _ranking(hits)[:2] == [("film", 1), ("peppard", 2)]


def test_each_hops_best_scores_one_before_the_hops_merge(kb):
    """The second hop's vectors ("Who spouse of actor who" + a name) match the
    actors' passages with cosines near 0.9, the question matches the film's with
    0.62: merged by raw score, the film, the passage that found the bridges,
    falls to fifth. Over each hop's best, both hops' leaders score 1."""
    hits = kb.retrieve(QUESTION, method="tigrag", k=5)
    assert [h.details["score"] for h in hits[:2]] == [pytest.approx(1.0), pytest.approx(1.0)]
    assert _ranking(hits)[0] == ("film", 1)
    raw = kb.retrieve(QUESTION, method="tigrag", k=5, hop_normalise=False)
    assert [h.provenance.external_id for h in raw][-1] == "film"
    assert raw[0].details["score"] > 1.0
