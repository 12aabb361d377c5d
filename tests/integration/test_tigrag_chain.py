"""TIGRAG's chain levers (issue 44, pgrag.methods.tigrag_chain) on a small corpus
this module builds: a three-hop chain, a parallel chain and a wrong bridge.

The question "On which river is the birthplace of the composer of the Harbour
Suite?" needs three passages: Harbour Suite (names its composer, Anton Weller),
Anton Weller (names his birthplace, Hollstadt, and Leipzig, where he studied)
and Hollstadt (names its river, the Saale). Forest Suite, Karl Brenner and Linz
are the same chain for another work; Leipzig is the wrong bridge of the second
hop; Saale names the river without the town."""

from __future__ import annotations

import pytest

from pgrag.methods.tigrag_chain import remainder
from tests.conftest import seeded_database

CHAIN_DOCS = [
    {"id": "harbour", "title": "Harbour Suite",
     "text": "The Harbour Suite is an orchestral work by the composer Anton Weller, first played in 1921."},
    {"id": "weller", "title": "Anton Weller",
     "text": "Anton Weller was a German composer. He was born in Hollstadt and studied music in Leipzig."},
    {"id": "hollstadt", "title": "Hollstadt",
     "text": "Hollstadt is a small town in Bavaria on the banks of the Saale river. Its bridge dates from 1600."},
    {"id": "forest", "title": "Forest Suite",
     "text": "The Forest Suite is an orchestral work by the composer Karl Brenner, first played in 1930."},
    {"id": "brenner", "title": "Karl Brenner",
     "text": "Karl Brenner was an Austrian composer. He was born in Linz and studied music in Vienna."},
    {"id": "linz", "title": "Linz", "text": "Linz is a city in Austria on the banks of the Danube river."},
    {"id": "leipzig", "title": "Leipzig",
     "text": "Leipzig is a city in Saxony, known for its trade fairs and its university."},
    {"id": "saale", "title": "Saale", "text": "The Saale is a river in Germany that flows into the Elbe."},
]
QUESTION = "On which river is the birthplace of the composer of the Harbour Suite?"

database_uri = seeded_database("chain", docs=CHAIN_DOCS)


@pytest.fixture
def kb(db):
    return db.corpus("chain")


def _steps(hits, name):
    return [s for s in hits.trace.steps if s["step"] == name]


def test_golden_three_hop_chain(kb):
    """Hand-checked. Hop 1 links the question's title, Harbour Suite, which names
    Anton Weller; his passage is linked by that name in hop 2. After two hops two
    of the question's terms are still unanswered ("river", "birthplace": the words
    the Harbour Suite and Anton Weller passages lack), so the default runs a third
    hop (remainder_stop 2); it takes his passage's new entities (German, Hollstadt,
    Leipzig) and links Hollstadt and Leipzig by title. The rerank vector "On which
    river birthplace of of" + Hollstadt (hop_remainder) has cosine 0.83 with
    Hollstadt's passage, against 0.61 for the question + Hollstadt. Each hop's
    scores are divided by its best (hop_normalise), so the three hops' best
    passages, the chain, score 1 and rank in hop order, above the wrong bridge
    Leipzig (0.88 of hop 3's best) and far above the other work's chain (Karl
    Brenner, and Linz, which the mention links bring in: his passage names it)."""
    hits = kb.retrieve(QUESTION, method="tigrag", k=6)
    assert [(h.provenance.external_id, h.details["hop"]) for h in hits] == [
        ("harbour", 1), ("weller", 2), ("hollstadt", 3), ("leipzig", 3), ("brenner", 2), ("linz", 3)]
    assert [h.details["score"] for h in hits[:3]] == [pytest.approx(1.0)] * 3
    assert hits[2].details["cosine"] == pytest.approx(0.832, abs=0.01)
    assert hits[3].details["score"] == pytest.approx(0.878, abs=0.01)
    entities = _steps(hits, "entities")
    assert [(e["hop"], e["new"]) for e in entities] == [(1, ["Anton Weller"]), (2, ["German", "Hollstadt", "Leipzig"])]
    # the first two places: the first two hops' best (the lead), here the chain's first two passages
    assert _steps(hits, "lead")[0]["chunks"] == [h.provenance.chunk_id for h in hits[:2]]
    # without the remaining part the chain still fills the top 3, Hollstadt third (cosine 0.61)
    off = kb.retrieve(QUESTION, method="tigrag", k=4, hop_remainder="off")
    assert [h.provenance.external_id for h in off] == ["harbour", "weller", "hollstadt", "leipzig"]
    assert off[2].details["cosine"] == pytest.approx(0.609, abs=0.01)
    # while three terms must remain, the hops stop after two: Hollstadt only has its hop-1 cosine, sixth
    stop = kb.retrieve(QUESTION, method="tigrag", k=6, remainder_stop=3)
    assert _steps(stop, "stop")[0]["remainder"] == ["river", "birthplace"]
    assert [h.provenance.external_id for h in stop] == ["harbour", "weller", "brenner", "forest", "linz", "hollstadt"]


def test_hop_remainder_vectors_are_the_unanswered_words_plus_each_entity(kb, monkeypatch):
    """The kept lever (hop_remainder="replace"): instead of M(question ⊕ e), a hop
    after the first encodes the question's words that the driving chunks lack,
    then e, and only that: M(question ⊕ e) is not encoded to be thrown away."""
    from pgrag.context import Context

    encoded: list[list[str]] = []
    encode = Context.encode
    monkeypatch.setattr(Context, "encode", lambda self, texts, trace=None: encoded.append(list(texts))
                        or encode(self, texts, trace))
    hits = kb.retrieve(QUESTION, method="tigrag", k=5)
    step = _steps(hits, "hop_embeddings")[0]
    new = _steps(hits, "entities")[0]["new"]
    driving = " ".join(CHAIN_DOCS[0][key] for key in ("title", "text"))
    assert step["remainder"] == remainder(QUESTION, driving) == "On which river birthplace of of"
    assert encoded[:2] == [[QUESTION], [f"On which river birthplace of of {e}" for e in new]]
    assert step["vectors"] == len(new) == _steps(hits, "hop")[1]["embeddings"]
    both = kb.retrieve(QUESTION, method="tigrag", k=5, hop_remainder="add")
    assert _steps(both, "hop_embeddings")[0]["vectors"] == 2 * len(new)
    off = kb.retrieve(QUESTION, method="tigrag", k=5, hop_remainder="off")
    assert _steps(off, "hop_embeddings")[0]["vectors"] == len(new)
    assert "remainder" not in _steps(off, "hop_embeddings")[0]
    # the paper's preset and the ablations keep the paper's vectors
    paper = kb.retrieve(QUESTION, method="tigrag-paper", k=5)
    assert all("remainder" not in s for s in _steps(paper, "hop_embeddings"))


def test_mention_links_follow_a_bridge_entity_to_the_passages_that_name_it(kb):
    """mentions (off by default): the chunks whose stored entities name a bridge
    entity of the hop's best chunks join the next hop, with the chain's support."""
    hits = kb.retrieve(QUESTION, method="tigrag", k=8, mentions=True, chain_weight=0.1,
                       link_titles=False, link_entities=False)
    step = _steps(hits, "mentions")[0]
    assert step["hop"] == 2 and "anton weller" in step["followed"]
    linked = {h.provenance.external_id for h in hits if h.provenance.chunk_id in set(step["chunks"])}
    assert "weller" in linked
    # a name that more chunks mention than mention_max links nothing
    capped = kb.retrieve(QUESTION, method="tigrag", k=8, mentions=True, mention_max=1,
                         link_titles=False, link_entities=False)
    assert "anton weller" in _steps(capped, "mentions")[0]["too_frequent"]


def test_the_lead_keeps_the_first_two_hops_best_above_chain_support(kb):
    """The first two places are the first two hops' best without chain support
    (lead). With a huge chain_weight and each hop's raw scores (hop_normalise
    off), Anton Weller's passage (supported by Harbour Suite's) and the third
    hop's scores, which mention links also raise, push the Harbour Suite, which
    answers the first hop, out of the top 4; the lead keeps it first."""
    strong = {"chain_weight": 5.0, "hop_normalise": False}
    unled = kb.retrieve(QUESTION, method="tigrag", k=4, lead=0, **strong)
    assert [h.provenance.external_id for h in unled] == ["weller", "hollstadt", "leipzig", "brenner"]
    led = kb.retrieve(QUESTION, method="tigrag", k=4, **strong)
    assert [h.provenance.external_id for h in led] == ["harbour", "weller", "hollstadt", "leipzig"]
    # its score is its own: the lead reorders, it does not rescore
    assert led[0].details["score"] == pytest.approx(0.731 + 0.2 * 1 + 0.2, abs=0.01)
    assert led[0].details["score"] < led[1].details["score"]
    assert _steps(led, "lead")[0]["chunks"] == [h.provenance.chunk_id for h in led[:2]]


def test_the_documents_the_question_names_lead(kb):
    """Hand-checked. A comparison names both of its passages by title; hop 1 links
    Harbour Suite and Forest Suite, whose composers hop 2 links. Over each hop's
    best, hop 2's best (Karl Brenner) scores 1 and Forest Suite 0.98 of hop 1's, so
    without lead_named the composer took the second place; with it, the two named
    documents lead, and the composers follow."""
    question = "Which was first played earlier, the Harbour Suite or the Forest Suite?"
    unnamed = kb.retrieve(question, method="tigrag", k=4, lead_named=False)
    assert [h.provenance.external_id for h in unnamed[:2]] == ["harbour", "brenner"]
    hits = kb.retrieve(question, method="tigrag", k=4)
    assert [h.provenance.external_id for h in hits] == ["harbour", "forest", "brenner", "weller"]
    assert _steps(hits, "titles")[0]["linked"] == ["Harbour Suite", "Forest Suite"]
    assert _steps(hits, "lead")[0]["chunks"] == [h.provenance.chunk_id for h in hits[:2]]


def test_the_leads_sources_are_titles_so_paragraphs_of_one_article_are_one(db):
    """_sources on a real index: MuSiQue-like, an article's two paragraphs are
    two documents with one title; the lead counts them as one source. Without a
    title index each document is its own, and a chunk the index does not hold
    (outside a filter) is its own too."""
    from pgrag.methods.tigrag import _sources
    from pgrag.titles import title_index

    kb = db.corpus("paragraphs")
    kb.ingest([{"id": "africa-1", "title": "Africa", "text": "Africa is the second-largest continent."},
               {"id": "africa-2", "title": "Africa", "text": "The Sahara is the largest hot desert of Africa."},
               {"id": "near-east", "title": "Near East", "text": "The Near East lies by the eastern Mediterranean."}],
              progress=False)
    ctx = kb.context(False)
    graph, postings, _ = ctx.ranking_index()
    chunks = {h.provenance.external_id: h.provenance.chunk_id
              for h in kb.retrieve("Africa Near East continent desert", method="bm25", k=10)}
    ids = [chunks["africa-1"], chunks["africa-2"], chunks["near-east"], 10**9]
    by_title = _sources(postings, title_index(ctx.db, ctx.id, graph.version), ids)
    assert by_title[ids[0]] == by_title[ids[1]] == "Africa"
    assert len({by_title[c] for c in ids}) == 3
    by_document = _sources(postings, None, ids)
    assert len({by_document[c] for c in ids}) == 4
