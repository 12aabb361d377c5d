"""TIGRAG against a real corpus: the graph from the database, its cache, the
pooling cut-off, hops and their termination, the SQL entry points."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pgrag.exceptions import PgragError
from pgrag.index import pagerank
from pgrag.index.cache import token_graph
from pgrag.index.graph import load_graph
from tests.conftest import seeded_database

database_uri = seeded_database("tig")


@pytest.fixture
def kb(db):
    """Corpus "tig": the sample, built once (conftest.seeded_database)."""
    return db.corpus("tig")


def edges_from_table(db, kb):
    with db.transaction() as conn:
        return conn.execute(
            "SELECT ta.term, tb.term, e.weight FROM pgrag.token_edge e "
            "JOIN pgrag.token ta ON ta.corpus_id = e.corpus_id AND ta.token_id = e.token_a "
            "JOIN pgrag.token tb ON tb.corpus_id = e.corpus_id AND tb.token_id = e.token_b "
            "WHERE e.corpus_id = %s", (kb.id,)).fetchall()


def test_matrix_is_the_edge_table(db, kb):
    g = load_graph(db, kb.id)
    rows = edges_from_table(db, kb)
    assert g.edges == len(rows) > 0
    for a, b, w in rows:
        i, j = g.index[a], g.index[b]
        assert g.transition[i, j] == pytest.approx(w / g.degree[j])
        assert g.transition[j, i] == pytest.approx(w / g.degree[i])
    sums = np.asarray(g.transition.sum(axis=0)).ravel()
    assert sums[~g.dangling] == pytest.approx(1.0)


def test_cache_follows_the_graph_version(db, kb, wiki_docs):
    first = token_graph(db, kb.id)
    assert token_graph(db, kb.id) is first          # unchanged: served from the cache
    kb.ingest([{"id": "new", "title": "Zanzibar", "text": "Zanzibar exports cloves and nutmeg."}], progress=False)
    second = token_graph(db, kb.id)
    assert second is not first and second.version > first.version
    assert "zanzibar" in second.index and "zanzibar" not in first.index
    kb.delete(["new"])
    third = token_graph(db, kb.id)
    assert third.version > second.version
    assert third.edges == first.edges
    # a stale cached graph is never served to a query either
    hits = kb.retrieve("Zanzibar cloves", method="tigrag", k=3)
    assert hits.trace.steps[1]["version"] == third.version


def test_pool_is_the_shortest_prefix_reaching_the_mass_threshold(db, kb):
    g = token_graph(db, kb.id)
    terms = [t for t in kb.tokenize("Lothair emperor daughter Tours river valley sentence rapper") if t in g.index]
    ids = [int(g.token_ids[g.index[t]]) for t in terms]
    weights = [1 / len(ids)] * len(ids)

    def pool(threshold):   # the SQL pool (pgrag.tigrag's; TIGRAG in Python pools in numpy, test_postings)
        with db.transaction() as conn:
            return conn.execute("SELECT chunk_id, rho, candidates "
                                "FROM pgrag_internal.tigrag_pool(%s, %s, %s, %s, %s, true, "
                                "1000)", (kb.id, ids, weights, ids, threshold)).fetchall()

    everything = pool(1.0)
    rhos = [r[1] for r in everything]
    assert rhos == sorted(rhos, reverse=True) and len(everything) >= 3
    total = sum(rhos)
    for th in (0.3, 0.5, 0.8, 0.95):
        got = pool(th)
        m = len(got)
        assert got == everything[:m]
        assert sum(rhos[:m]) >= th * total - 1e-9          # reaches the threshold ...
        assert sum(rhos[: m - 1]) < th * total             # ... and one chunk fewer would not
    assert everything[0][2] == len(everything)             # candidates counted before the cut


def test_two_hops_find_the_bridge_document(kb):
    hits = kb.retrieve("When did Lothair II's mother die?", method="tigrag", k=5)
    titles = [h.title for h in hits]
    assert "Lothair II" in titles and "Ermengarde of Tours" in titles
    steps = {s["step"]: s for s in reversed(hits.trace.steps)}    # each step's first
    assert steps["entities"]["hop"] == 1 and "Teutberga" in steps["entities"]["new"]
    hops = [s for s in hits.trace.steps if s["step"] == "hop"]
    # a third hop: "When did s mother die" leaves two terms (remainder_stop 2)
    assert [h["hop"] for h in hops] == [1, 2, 3]
    # one vector per new entity the question does not name (here all four): the question's
    # remaining part + e instead of M(mu + e) (hop_remainder="replace")
    assert "teutberga" in hops[1]["seeds"] and hops[1]["embeddings"] == len(steps["entities"]["new"]) == 4
    # a hop's score before it is divided by the hop's best (hop_normalise, test_tigrag_bridges):
    # cosine plus 0.2 x rho / (the hop's max rho), plus 0.2 for a linked title (test_title_linking_*)
    raw = kb.retrieve("When did Lothair II's mother die?", method="tigrag", k=5, hop_normalise=False)
    assert {h.title for h in raw} == set(titles)
    for h in raw:
        assert h.details["hop"] in (1, 2, 3) and h.details["rho"] >= 0
        bonus = 0.2 if h.details["linked"] else 0.0
        assert h.details["cosine"] + bonus <= h.details["score"] <= h.details["cosine"] + 0.2 + bonus + 1e-9
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_golden_second_hop_on_the_sample(kb):
    """Hand-checked on the sample: the question names a song, not the rapper. Hop 1
    finds the song's passage ("changed"), which names Nicki Minaj; hop 2 seeds on
    her and ranks her own passage ("minaj", which says where she was born) by
    its cosine to the entity, well above what one hop gives it. Title linking,
    hop_remainder and the hops' normalisation are off: this pins the hop mechanism
    itself, not the levers."""
    q = "Where was the rapper of Changed It born?"
    off = {"link_titles": False, "link_entities": False, "hop_remainder": "off", "hop_normalise": False}
    hits = kb.retrieve(q, method="tigrag", k=2, **off)
    assert [(h.provenance.external_id, h.provenance.chunk_ordinal, h.details["hop"]) for h in hits] == [
        ("changed", 0, 2), ("minaj", 0, 2)]
    entities = next(s for s in hits.trace.steps if s["step"] == "entities")
    assert entities["hop"] == 1 and "Nicki Minaj" in entities["new"]
    one_hop = {h.provenance.external_id: h.score for h in kb.retrieve(q, method="tigrag", k=2, hops=1, **off)}
    assert hits[1].score > one_hop["minaj"] + 0.1
    # hop_remainder: the question's words the song's passage lacks ("Where the of born"), plus
    # Nicki Minaj, find her passage (which says where she was born) first; the song's passage
    # keeps its first-hop score, which no M(mu + e) of the second hop tops any more
    rest = kb.retrieve(q, method="tigrag", k=2, link_titles=False, link_entities=False, hop_normalise=False)
    assert [(h.provenance.external_id, h.details["hop"]) for h in rest] == [("minaj", 2), ("changed", 1)]
    assert next(s for s in rest.trace.steps if s["step"] == "hop_embeddings")["remainder"] == "Where the of born"


def _steps(hits, name):
    return [s for s in hits.trace.steps if s["step"] == name]


def test_title_linking_seeds_the_first_hop_with_the_documents_the_question_names(kb):
    q = "Where was the rapper of Changed It born?"
    # each hop's own scores (hop_normalise off), which the bonus is added to
    hits = kb.retrieve(q, method="tigrag", k=5, hop_normalise=False)
    first = _steps(hits, "titles")[0]
    assert first["hop"] == 1 and first["linked"] == ["Changed It"]
    # the linked document's names drive the second hop, and the one that titles a document is linked in turn
    assert "Nicki Minaj" in _steps(hits, "entities")[0]["found"]
    assert _steps(hits, "titles")[1] == {"step": "titles", "hop": 2, "linked": ["Nicki Minaj"],
                                         "chunks": [h.provenance.chunk_id for h in hits if h.title == "Nicki Minaj"]}
    by_title = {h.title: h for h in hits}
    # both on top: the document the question names first (lead_named), then the answer's passage, which
    # scores above it (hop_remainder: "Where the of born" + Nicki Minaj) and leads without lead_named
    assert [h.title for h in hits][:2] == ["Changed It", "Nicki Minaj"]
    assert by_title["Nicki Minaj"].details["score"] > by_title["Changed It"].details["score"]
    unnamed = kb.retrieve(q, method="tigrag", k=5, hop_normalise=False, lead_named=False)
    assert [h.title for h in unnamed][:2] == ["Nicki Minaj", "Changed It"]
    assert by_title["Changed It"].details["linked"] and by_title["Nicki Minaj"].details["linked"]
    for h in (by_title["Changed It"], by_title["Nicki Minaj"]):   # title_weight 0.2 on top of the hop's score
        assert h.details["score"] >= h.details["cosine"] + 0.2 - 1e-9
    # off, nothing is linked and no score carries the bonus
    plain = kb.retrieve(q, method="tigrag", k=5, link_titles=False, link_entities=False, hop_normalise=False)
    assert not _steps(plain, "titles") and not any("linked" in h.details for h in plain)
    cosines = {h.provenance.chunk_id: h.details["score"] - h.details["cosine"] for h in plain}
    for h in hits:   # the same hop score, plus title_weight where linked
        if h.provenance.chunk_id in cosines and h.details["hop"] == 1:
            assert h.details["score"] - h.details["cosine"] == pytest.approx(
                cosines[h.provenance.chunk_id] + (0.2 if h.details["linked"] else 0.0), abs=1e-9)


def test_title_linking_needs_the_capitalised_title_and_respects_title_weight(kb):
    lower = kb.retrieve("where was the rapper of changed it born?", method="tigrag", k=5)
    assert _steps(lower, "titles")[0]["linked"] == []
    heavy = kb.retrieve("Where was the rapper of Changed It born?", method="tigrag", k=5, title_weight=1.0,
                        hop_normalise=False)
    linked = [h for h in heavy if h.details["linked"]]
    assert {h.title for h in linked} == {"Changed It", "Nicki Minaj"}
    assert all(h.details["score"] >= h.details["cosine"] + 1.0 for h in linked)
    assert [h.details["linked"] for h in heavy] == sorted((h.details["linked"] for h in heavy), reverse=True)


def test_final_rerank_adds_the_question_cosine_bm25_and_hops(kb):
    q = "When did Lothair II's mother die?"
    two = {"hops": 2, "mentions": False, "chain_weight": 0.0}    # the hops' own chunks, in score order
    base = kb.retrieve(q, method="tigrag", k=10, **two)
    cos_q = {h.provenance.chunk_id: h.score for h in kb.retrieve(q, method="dense", k=10)}
    assert len(base) == 2      # this small corpus: Lothair II and Ermengarde of Tours
    hits = kb.retrieve(q, method="tigrag", k=10, rerank_depth=1, rerank_question=0.5, rerank_hops=0.25, **two)
    assert _steps(hits, "final_rerank")[0]["depth"] == 1
    assert hits[1].score == pytest.approx(base[1].score, abs=1e-9)   # past the depth: unchanged
    hits = kb.retrieve(q, method="tigrag", k=10, rerank_depth=3, rerank_question=0.5, rerank_hops=0.25, **two)
    assert _steps(hits, "final_rerank")[0]["depth"] == 2
    head = {h.provenance.chunk_id: h for h in base[:3]}
    for h in hits:
        c = h.provenance.chunk_id
        expected = base_score = next(b.details["score"] for b in base if b.provenance.chunk_id == c)
        if c in head:
            expected = base_score + 0.5 * cos_q[c] + 0.25 * (h.details["reached"] - 1)
        assert h.score == pytest.approx(expected, abs=1e-6)
    assert [h.score for h in hits[:3]] == sorted((h.score for h in hits[:3]), reverse=True)
    bm25 = kb.retrieve(q, method="tigrag", k=10, rerank_depth=3, rerank_bm25=1.0, **two)
    gains = [h.score - next(b.score for b in base if b.provenance.chunk_id == h.provenance.chunk_id) for h in bm25]
    assert max(gains) == pytest.approx(1.0) and 0 < min(gains) < 1     # BM25 / the candidates' max
    with pytest.raises(PgragError, match="tigrag option 'rerank_depth' takes an integer of at least 0, not -1"):
        kb.retrieve(q, method="tigrag", k=5, rerank_depth=-1)


def test_title_linking_options_from_sql_equal_python(db, kb, database_uri):
    import psycopg

    q = "Where was the rapper of Changed It born?"
    options = {"link_entities": False, "title_weight": 0.5, "rerank_depth": 4, "rerank_question": 0.3}
    python = kb.retrieve(q, method="tigrag", k=5, **options)
    with psycopg.connect(database_uri, autocommit=True) as conn:
        rows = conn.execute("SELECT chunk_id, score, details FROM pgrag.retrieve(%s, %s, 'tigrag', 5, %s::jsonb)",
                            (kb.name, q, json.dumps(options))).fetchall()
    assert [r[0] for r in rows] == [h.provenance.chunk_id for h in python]
    assert [r[1] for r in rows] == pytest.approx([h.score for h in python], abs=1e-6)
    assert [r[2]["linked"] for r in rows] == [h.details["linked"] for h in python]


def test_hop_embedding_reaches_the_second_hops_rerank(kb):
    q = "When did Lothair II's mother die?"
    for mode in ("concat", "sum", "joint"):
        hits = kb.retrieve(q, method="tigrag", k=5, hop_embedding=mode, hop_remainder="off")
        new = next(s for s in hits.trace.steps if s["step"] == "entities")["new"]
        vectors = next(s for s in hits.trace.steps if s["step"] == "hop_embeddings")
        second = [s for s in hits.trace.steps if s["step"] == "hop"][1]
        assert len(new) > 1 and vectors["mode"] == mode
        assert vectors["vectors"] == second["embeddings"] == (1 if mode == "joint" else len(new))


def test_hops_stop_without_new_entities(kb, db):
    one = kb.retrieve("When did Lothair II's mother die?", method="tigrag", k=5, hops=1)
    assert [s["step"] for s in one.trace.steps].count("hop") == 1
    assert not any(s["step"] == "entities" for s in one.trace.steps)
    # the long document names almost nobody: the loop stops before the cap of 3 hops
    plain = kb.retrieve("topic3 river1 valley sentence", method="tigrag", k=5, hops=3)
    stop = [s for s in plain.trace.steps if s["step"] == "stop"]
    executed = [s["hop"] for s in plain.trace.steps if s["step"] == "hop"]
    assert stop and stop[0]["reason"] == "no new entities" and stop[0]["hop"] == executed[-1] < 3
    # with many hops allowed, it ends when the entities run out, not at the cap
    many = kb.retrieve("When did Lothair II's mother die?", method="tigrag", k=5, hops=10)
    executed = [s["hop"] for s in many.trace.steps if s["step"] == "hop"]
    assert len(executed) < 10 and any(s["step"] == "stop" for s in many.trace.steps)


def test_entities_fall_back_to_spacy(kb, db):
    with db.transaction() as conn:
        conn.execute("DELETE FROM pgrag.chunk_entity WHERE corpus_id = %s", (kb.id,))
    hits = kb.retrieve("When did Lothair II's mother die?", method="tigrag", k=5)
    entities = next(s for s in hits.trace.steps if s["step"] == "entities")
    assert "Teutberga" in entities["found"]


def test_presets_ablations_and_options(kb):
    q = "When did Lothair II's mother die?"
    paper = kb.retrieve(q, method="tigrag-paper", k=5)
    assert all(h.details["score"] == h.details["cosine"] for h in paper)
    assert not any(s["step"] == "titles" for s in paper.trace.steps) and "linked" not in paper[0].details
    no_rerank = kb.retrieve(q, method="tigrag-no-rerank", k=5)
    assert all(h.details["cosine"] is None for h in no_rerank)
    assert no_rerank[0].details["score"] == 1.0                      # rho / max rho
    degree = kb.retrieve(q, method="tigrag-degree", k=5)
    assert next(s for s in degree.trace.steps if s["step"] == "hop")["ppr_iterations"] == 0
    assert len(kb.retrieve(q, method="tigrag-no-bm25", k=5)) > 0
    with pytest.raises(PgragError, match=r"'tigrag' does not take option\(s\) 'gama' \(did you mean 'gamma'\?"):
        kb.retrieve(q, method="tigrag", k=5, gama=3)
    with pytest.raises(PgragError, match="tigrag option 'hops' takes an integer of at least 1, not 0"):
        kb.retrieve(q, method="tigrag", k=5, hops=0)
    with pytest.raises(PgragError, match="does not take option"):
        kb.retrieve(q, method="dense", k=5, gamma=3)


def test_unknown_tokens_and_empty_corpus_return_nothing(db, kb):
    assert len(kb.retrieve("qwzxv plokm", method="tigrag", k=5)) == 0
    empty = db.corpus("empty")
    assert len(empty.retrieve("Lothair", method="tigrag", k=5)) == 0


def test_sql_tigrag_matches_python_single_hop(db, kb):
    q = "Who was the wife of Lothair II?"
    # pgrag.tigrag's PPR is the power iteration (pgrag.ppr) to its default tolerance 1e-4: compare like
    # with like (SQL has no title links)
    python = kb.retrieve(q, method="tigrag", k=4, hops=1, ppr="power", tolerance=1e-4, link_titles=False)
    vector = kb.embedder.encode([q])[0]
    rows = db.fetchall("tigrag", {"corpus": kb.name, "query": q, "embedding": vector, "k": 4})
    assert [r[1] for r in rows] == [h.provenance.chunk_id for h in python]
    assert [r[2] for r in rows] == pytest.approx([h.score for h in python], abs=1e-6)


def test_sql_ppr_matches_scipy(db, kb):
    g = token_graph(db, kb.id)
    seeds = ["lothair", "daughter", "tours"]
    pr = pagerank.personalized_pagerank(g, [g.index[s] for s in seeds], damping=0.5)
    rows = db.fetchall("ppr", {"corpus": kb.name, "seeds": seeds + ["notaword"], "damping": 0.5, "top": 20,
                               "tolerance": 1e-6, "max_iterations": 100})
    assert [r[0] for r in rows] == [g.terms[i] for i in pagerank.top_nodes(pr.scores, 20)]
    assert [r[1] for r in rows] == pytest.approx([pr.scores[g.index[t]] for t, _ in rows], abs=1e-9)


@pytest.mark.slow
def test_sql_ppr_matches_scipy_on_the_2wiki_graph(db, bench_2wiki):
    """The whole 2Wiki corpus, one chunk per passage, indexed by the real SQL
    pipeline (pgrag_internal.index_chunks); embeddings are not needed for the graph."""
    docs = json.loads((bench_2wiki / "corpus.json").read_text())
    kb = db.corpus("wiki-graph")
    with db.transaction() as conn:
        conn.execute(
            "INSERT INTO pgrag.document (corpus_id, external_id, title, body) "
            "SELECT %s, t, t, b FROM unnest(%s::text[], %s::text[]) AS x(t, b)",
            (kb.id, [d["title"] for d in docs], [d["text"] for d in docs]))
        conn.execute(
            "INSERT INTO pgrag.chunk (corpus_id, document_id, ordinal, first_sentence, last_sentence, "
            "char_start, char_end, text, embedding) "
            "SELECT corpus_id, document_id, 0, 0, 0, 0, length(body), body, array_fill(0, ARRAY[384])::vector "
            "FROM pgrag.document WHERE corpus_id = %s", (kb.id,))
        conn.execute("SELECT pgrag_internal.index_chunks(%s, (SELECT array_agg(chunk_id) FROM pgrag.chunk "
                     "WHERE corpus_id = %s))", (kb.id, kb.id))
    g = token_graph(db, kb.id)
    assert g.nodes > 30000 and g.edges > 400000
    for seeds in (["lothair", "mother", "die"], ["director", "film", "born", "older"]):
        pr = pagerank.personalized_pagerank(g, [g.index[s] for s in seeds], damping=0.5)
        rows = db.fetchall("ppr", {"corpus": kb.name, "seeds": seeds, "damping": 0.5, "top": 50,
                                   "tolerance": 1e-6, "max_iterations": 100})
        assert [r[0] for r in rows] == [g.terms[i] for i in pagerank.top_nodes(pr.scores, 50)]
        assert [r[1] for r in rows] == pytest.approx([pr.scores[g.index[t]] for t, _ in rows], abs=1e-9)
