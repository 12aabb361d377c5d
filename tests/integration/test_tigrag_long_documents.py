"""TIGRAG on a corpus with a long document (``linked_drivers``): a question that
names a document links all its chunks into the first hop, but only the
document's best-ranked chunks drive the next hop. Built by this module: an
almanac of eight sections, one keeper named in each, and the keepers' own
passages."""

from __future__ import annotations

import pytest

from tests.conftest import seeded_database

KEEPERS = ["Ada Morrow", "Ewan Tull", "Morag Pryde", "Callum Dunn", "Isla Fenwick", "Rory Baird", "Elspeth Kerr",
           "Duncan Moir"]
FILLER = ["The lamp was cleaned every week.", "Ships passed the headland at dawn.", "The log book was kept in ink.",
          "Supplies came by boat each month."]


def _section(n: int, keeper: str) -> str:
    event = ("The winter storms of that year broke every window of the lantern room."
             if n == 0 else "The weather that year was calm.")
    return " ".join([f"In {1900 + 5 * n}, the keeper of the light was {keeper}.", event, *FILLER])


LONG_DOCS = [
    {"id": "almanac", "title": "Lighthouse Almanac",
     "text": "\n\n".join(_section(n, k) for n, k in enumerate(KEEPERS))},
    *({"id": f"keeper{n}", "title": k, "text": f"{k} was a lighthouse keeper, born in a fishing village."}
      for n, k in enumerate(KEEPERS)),
]
QUESTION = "What does the Lighthouse Almanac say about the winter storms?"

database_uri = seeded_database("almanac", docs=LONG_DOCS)


@pytest.fixture
def kb(db):
    return db.corpus("almanac")


def _first_drivers(kb, **options):
    """The almanac's chunks (id -> text) and the hop-1 driving chunks and names."""
    hits = kb.retrieve(QUESTION, method="tigrag", k=100, **options)
    almanac = {h.provenance.chunk_id: h.text for h in hits if h.provenance.external_id == "almanac"}
    step = next(s for s in hits.trace.steps if s["step"] == "entities" and s["hop"] == 1)
    return almanac, [c for c in step["from_chunks"] if c in almanac], step["found"]


def test_a_named_long_document_drives_with_its_best_chunks(kb):
    almanac, every, found = _first_drivers(kb, linked_drivers=0)
    assert len(almanac) >= 6 and sorted(every) == sorted(almanac)    # before the cap: every chunk drove
    assert set(KEEPERS) <= set(found)
    for cap in (2, 5):
        _, drivers, _ = _first_drivers(kb, linked_drivers=cap)
        assert len(drivers) == cap and set(drivers) < set(almanac)
    assert len(_first_drivers(kb)[1]) == 5       # the default
    _, (best,), found = _first_drivers(kb, linked_drivers=1)
    assert "winter storms" in almanac[best]      # the chunk that answers the question is the one that drives
    named = [k for k in KEEPERS if k in almanac[best]]
    assert named and set(found) & set(KEEPERS) == set(named)
