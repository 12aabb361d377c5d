"""ThreadRAG end to end on a real corpus: the no-LLM pass, the agent loop
against a scripted LLM (termination, targeted retrieval, degradation), and the
real local LLM driving the loop."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pgrag.exceptions import PgragError
from pgrag.llm import LLMSettings
from tests.conftest import seeded_database
from tests.fake_llm import FakeLLM, Status

database_uri = seeded_database("thread", methods=("threadrag",))


@pytest.fixture
def kb(db):
    """Corpus "thread": the sample, built once (conftest.seeded_database)."""
    return db.corpus("thread")


QUESTION = "Who was the mother of Lothair II?"


def steps(hits, name):
    return [s for s in hits.trace.steps if s["step"] == name]


# What ThreadRAG's document retrieval computed in SQL before it used the cached
# postings: the oracle of test_document_retrieval_equals_the_sql_functions.
SQL_DOCUMENTS = {
    "hybrid": "SELECT h.document_id FROM pgrag.hybrid(%(c)s, %(q)s, %(v)s, %(d)s, %(d)s, 60) h",
    "dense": "SELECT h.document_id FROM pgrag.dense(%(c)s, %(v)s, %(d)s) h",
    "bm25": "SELECT h.document_id FROM pgrag.bm25(%(c)s, %(q)s, %(d)s) h",
}


@pytest.mark.parametrize("retrieval", ["hybrid", "dense", "bm25"])
@pytest.mark.parametrize("depth", [3, 50])
def test_document_retrieval_equals_the_sql_functions(db, kb, retrieval, depth):
    from pgrag.methods import threadrag_retrieval
    from pgrag.methods.threadrag_settings import ThreadragSettings
    from pgrag.results import Trace

    ctx = kb.context(False)
    texts = [QUESTION, "Ermengarde of Tours", "Nicki Minaj rapper", "Lotharingia king 855", "zzz unknown"]
    vectors = ctx.encode(texts)
    settings = ThreadragSettings(retrieval=retrieval, depth=depth)
    exclude = {1}
    # two depths in one call: one dense round trip each, every text with its own
    depths = [depth, depth, depth + 2, depth + 2, depth]
    ranked, chunk_documents = threadrag_retrieval.rankings(ctx, texts, vectors, depths, settings,
                                                           Trace(method="threadrag", query="q"))
    got = [threadrag_retrieval.documents_of(r, chunk_documents, 4, exclude) for r in ranked]
    with db.transaction() as conn:
        for text, vector, d, documents in zip(texts, vectors, depths, got):
            rows = conn.execute(SQL_DOCUMENTS[retrieval] + " ORDER BY h.rank",
                                {"c": kb.name, "q": text, "v": vector, "d": d}).fetchall()
            want = [doc for doc in dict.fromkeys(r[0] for r in rows) if doc not in exclude][:4]
            assert documents == want, (retrieval, text, d)
    assert any(got)


def test_one_node_query_for_two_groups_keeps_their_order(kb):
    """add_nodes with two groups gives the nodes one query per group would."""
    from pgrag.methods import threadrag_retrieval
    from pgrag.methods.threadrag_settings import ThreadragSettings
    from pgrag.results import Trace

    ctx = kb.context(False)
    settings = ThreadragSettings()
    with kb.db.transaction() as conn:
        docs = [r[0] for r in conn.execute("SELECT DISTINCT document_id FROM pgrag.semantic_node "
                                           "WHERE corpus_id = %s ORDER BY 1", (kb.id,))]
    assert len(docs) >= 3
    groups = [[docs[-1], docs[0]], [docs[1]]]        # the second group's document sorts before the first's last
    one, two = threadrag_retrieval.State(), threadrag_retrieval.State()
    threadrag_retrieval.add_nodes(ctx, one, groups, settings, Trace(method="threadrag", query="q"))
    for group in groups:
        threadrag_retrieval.add_nodes(ctx, two, [group], settings, Trace(method="threadrag", query="q"))
    assert [n.node_id for n in one.nodes] == [n.node_id for n in two.nodes]
    assert [n.document_id for n in one.nodes][-1] == docs[1]


def test_rare_terms_are_the_terms_the_token_table_counts_in_few_chunks(kb):
    """A node's rare terms, taken from the ranking index's document
    frequencies, are its tokens whose pgrag.token row has df <= rare_df."""
    from pgrag.index.cache import ranking_index
    from pgrag.methods import threadrag_retrieval

    ctx = kb.context(False)
    with kb.db.transaction() as conn:
        docs = [r[0] for r in conn.execute("SELECT DISTINCT document_id FROM pgrag.semantic_node "
                                           "WHERE corpus_id = %s", (kb.id,))]
    rows = ctx.db.fetchall("threadrag_nodes", {"corpus_id": kb.id, "document_ids": docs, "labels": ["PERSON"]})
    max_df = 2
    got = threadrag_retrieval.rare_terms(ranking_index(ctx.db, kb.id), [r[9] for r in rows], max_df)
    with kb.db.transaction() as conn:
        for row, terms in zip(rows, got):
            want = {t for (t,) in conn.execute(
                "SELECT term FROM pgrag.token WHERE corpus_id = %s AND term = ANY (pgrag.tokenize(%s)) AND df <= %s",
                (kb.id, row[6], max_df))}
            assert terms == want, row[0]
    assert any(got) and any(set(row[9]) - terms for row, terms in zip(rows, got))


def test_one_pass_without_llm(kb):
    hits = kb.retrieve(QUESTION, method="threadrag", k=4, llm=False)
    trace = hits.trace
    assert trace.outcome["finish"] == "no_llm" and hits.answer is None and trace.llm_calls == 0
    assert "LLM disabled" in steps(hits, "fallback")[0]["note"]
    assert steps(hits, "entities")[0] == {"step": "entities", "source": "spacy", "entities": ["Lothair II"]}
    (path_step,) = steps(hits, "pathfinding")
    assert len(path_step["anchors"]) == 3
    assert path_step["anchors"][0]["title"] == "Lothair II"
    assert path_step["paths"][0]["title"] == "Lothair II"
    assert 1 <= len(hits) <= 4
    assert hits[0].title == "Lothair II" and hits[0].details["path"] == 1
    for h in hits:                      # provenance: offsets into the body
        assert h.provenance.char_end > h.provenance.char_start
    # the trace's paths carry exact offsets
    with kb.db.transaction() as conn:
        for p in path_step["paths"]:
            body = conn.execute("SELECT body FROM pgrag.document WHERE corpus_id = %s AND document_id = %s",
                                (kb.id, p["document_id"])).fetchone()[0]
            assert 0 <= p["char_start"] < p["char_end"] <= len(body)
    assert {"retrieve", "nodes", "graph", "pathfinding", "provenance"} <= set(trace.timings_ms)
    assert "total" not in trace.timings_ms        # stages only: callers sum them

    # without fill, the hits are only the chunks under the paths
    only = kb.retrieve(QUESTION, method="threadrag", k=20, llm=False, fill=False, threshold=0.2)
    kept = {p["document_id"] for p in steps(only, "pathfinding")[0]["paths"]}
    assert {h.provenance.document_id for h in only} == kept
    assert all(h.details["path"] is not None for h in only)
    # options are checked
    with pytest.raises(PgragError, match="threadrag option"):
        kb.retrieve(QUESTION, method="threadrag", llm=False, anchors=0)
    with pytest.raises(PgragError):
        kb.retrieve(QUESTION, method="threadrag", llm=False, no_such_setting=1)


def test_a_stored_name_vector_is_the_vector_of_the_name_as_asked(kb):
    """Looked up by its key, whatever the case and spacing of the asking text;
    names the corpus does not mention are encoded, in order with the rest."""
    from pgrag.methods import threadrag_retrieval
    from pgrag.results import Trace

    ctx = kb.context(False)
    names = ["NICKI  minaj", "Lil Wayne", "Nobody Anywhere Ever", "Teutberga"]
    trace = Trace(method="threadrag", query="q")
    got = threadrag_retrieval.encode_names(ctx, [QUESTION], names, trace)
    assert [s for s in trace.steps if s["step"] == "name_vectors"] == [
        {"step": "name_vectors", "stored": 3, "encoded": 1}]
    expected = ctx.encode([QUESTION, *names])
    assert len(got) == 5 and all(np.allclose(a, b, atol=1e-5) for a, b in zip(got, expected))


def test_stored_name_vectors_give_the_hits_that_encoding_the_names_gives(kb):
    """The question's entities and the bridge entities are looked up in
    pgrag.entity_vector; without the rows they are encoded, with the same result."""
    stored = kb.retrieve(QUESTION, method="threadrag", k=6, llm=False)
    question, bridges = steps(stored, "name_vectors")
    # "Lothair II" is not a stored name of the corpus (spaCy misses it there): encoded
    assert question["stored"] + question["encoded"] == len(steps(stored, "entities")[0]["entities"])
    assert bridges["stored"] == len(steps(stored, "bridge")[0]["entities"]) > 0 and bridges["encoded"] == 0
    assert "names" in stored.trace.timings_ms
    with kb.db.transaction() as conn:
        conn.execute("DELETE FROM pgrag.entity_vector WHERE corpus_id = %s", (kb.id,))
    encoded = kb.retrieve(QUESTION, method="threadrag", k=6, llm=False)
    assert [s["stored"] for s in steps(encoded, "name_vectors")] == [0, 0]
    assert [h.provenance.chunk_id for h in encoded] == [h.provenance.chunk_id for h in stored]
    assert [round(h.score, 5) for h in encoded] == [round(h.score, 5) for h in stored]
    assert steps(encoded, "bridge") == steps(stored, "bridge")


def script_for(verdicts, answer="Ermengarde of Tours"):
    """Entities first, then the given sufficiency verdicts in turn, then the answer."""
    queue = list(verdicts)

    def script(request):
        content = request["messages"][-1]["content"]
        if "List every entity" in content:
            return '{"entities": ["Lothair II"]}'
        if "every fact needed" in content:
            return queue.pop(0) if len(queue) > 1 else queue[0]
        return answer

    return script


def run_with(kb, script, **options):
    with FakeLLM(script) as fake:
        llm = kb.llm(LLMSettings(base_url=fake.base_url, model="fake-model", max_retries=0))
        hits = kb.retrieve(QUESTION, method="threadrag", k=5, llm=llm, **options)
        return hits, fake.requests


def test_agent_retrieves_what_is_missing_then_answers(kb):
    hits, requests = run_with(kb, script_for(
        ['{"sufficient": false, "missing": ["Ermengarde of Tours"]}', '{"sufficient": true}']),
        documents=1, entity_documents=0)
    assert hits.trace.outcome["finish"] == "sufficient" and hits.answer == "Ermengarde of Tours"
    assert len(requests) == 4                 # entities, two verdicts, answer
    (targeted,) = steps(hits, "targeted retrieval")
    assert targeted["missing"] == ["Ermengarde of Tours"] and len(targeted["documents"]) == 1
    rounds = steps(hits, "pathfinding")
    assert len(rounds) == 2
    assert "Ermengarde of Tours" in {p["title"] for p in rounds[1]["paths"]} | {h.title for h in hits}
    assert hits.trace.llm_calls == 4 and hits.trace.prompt_tokens > 0 and hits.trace.completion_tokens > 0
    # the second verdict saw the new document in its evidence
    assert "Ermengarde of Tours" in requests[2]["messages"][-1]["content"]


def test_agent_stops_after_the_maximum_iterations(kb):
    never = '{"sufficient": false, "missing": ["Nicki Minaj", "Lil Wayne", "Teutberga"]}'
    hits, requests = run_with(kb, script_for([never]), documents=1, entity_documents=0, iterations=3)
    assert hits.trace.outcome["finish"] == "max_iterations"
    assert len(steps(hits, "sufficiency")) == 3 and len(steps(hits, "pathfinding")) == 3
    assert len(steps(hits, "targeted retrieval")) == 2
    assert len(requests) == 1 + 3 + 1


def test_agent_stops_when_nothing_new_can_be_retrieved(kb):
    hits, _ = run_with(kb, script_for(['{"sufficient": false, "missing": ["Lothair II"]}']),
                       documents=5, entity_documents=5)
    assert hits.trace.outcome["finish"] == "no_new_documents"
    assert len(steps(hits, "pathfinding")) == 1


def test_garbage_and_errors_degrade_without_crashing(kb):
    hits, requests = run_with(kb, lambda request: "not json at all")
    assert hits.trace.outcome["finish"] == "llm_error" and hits.answer is None
    assert steps(hits, "entities")[-1]["source"] == "spacy"     # entity step fell back
    assert len(hits) > 0 and len(requests) == 4                # 2 x (call + repair)
    down, _ = run_with(kb, lambda request: Status(500, "down"))
    assert down.trace.outcome["finish"] == "llm_error" and len(down) > 0


def test_real_local_llm_drives_the_loop(db, wiki_docs, local_llm_url):
    from pgrag.local_llm import MODEL_ALIAS
    from tests.fake_llm import RecordingProxy

    kb = db.corpus("thread-real", methods=["threadrag"])
    kb.ingest(wiki_docs[:4], progress=False)
    with RecordingProxy(local_llm_url) as proxy:
        llm = kb.llm(LLMSettings(base_url=proxy.base_url, model=MODEL_ALIAS, max_tokens=32, timeout=120))
        # one round and a short context keep this quick on a CPU (the loop itself is
        # tested against the scripted fake above)
        hits = kb.retrieve(QUESTION, method="threadrag", k=3, llm=llm, iterations=1, max_context_chars=500)
    trace = hits.trace
    # whatever the model said: every call reached the server, and the tokens are the server's
    assert trace.llm_calls == len(proxy.exchanges) >= 3
    assert (trace.prompt_tokens, trace.completion_tokens) == proxy.usage()
    assert QUESTION in json.dumps(proxy.exchanges[0][0]["messages"])
    assert trace.outcome["finish"] in {"sufficient", "max_iterations", "nothing_missing",
                                       "no_new_documents", "llm_error"}
    assert steps(hits, "pathfinding") and steps(hits, "sufficiency") and len(hits) > 0
    json.dumps(trace.steps, default=str)      # the trace is serialisable for reports


def test_without_an_llm_the_pass_is_recomputed_with_numpy_from_the_stored_rows(kb, db):
    """Independently of pgrag's graph code: given the documents the pass
    retrieved (hybrid retrieval is pinned to the SQL functions above) and the
    question's entities, everything after is recomputed here from the stored
    nodes, edges, entities, token frequencies and vectors with dense numpy:
    the Semantic Topology Graph, anchors, energy diffusion, pruning,
    linearisation and the hits with their scores."""
    from pgrag.methods.threadrag_settings import ThreadragSettings
    from pgrag.nlp import NAME_LABELS

    s = ThreadragSettings()
    question = "When did Lothair II's mother die?"
    # two documents for the question leave room for targeted and bridge retrieval
    hits = kb.retrieve(question, method="threadrag", k=12, llm=False, documents=2)
    (documents,) = steps(hits, "documents")
    bridged = [d for b in steps(hits, "bridge") for d in b["documents"]]
    remote = set(documents["targeted"]) | set(bridged)
    order = documents["all"]
    assert remote and len(order) > len(remote)        # both provenance weights are exercised
    entities = documents["entities"]
    q = kb.embedder.encode([question])[0].astype(np.float64)

    with db.transaction() as conn:
        nodes = conn.execute(
            "SELECT n.node_id, n.document_id, d.title, n.ordinal, n.char_start, n.char_end, n.text, n.embedding, "
            "       n.terms FROM pgrag.semantic_node n JOIN pgrag.document d USING (corpus_id, document_id) "
            "WHERE n.corpus_id = %s AND n.document_id = ANY (%s) ORDER BY n.document_id, n.ordinal",
            (kb.id, order)).fetchall()
        nodes.sort(key=lambda n: order.index(n[1]))
        keys = []
        for _node_id, doc, _t, _o, start, end, _text, _v, terms in nodes:
            named = {e for (e,) in conn.execute(
                "SELECT lower(e.entity) FROM pgrag.chunk_entity e JOIN pgrag.chunk c USING (corpus_id, chunk_id) "
                "WHERE c.corpus_id = %s AND c.document_id = %s AND e.char_start >= %s AND e.char_end <= %s "
                "AND e.label = ANY (%s)", (kb.id, doc, start, end, list(NAME_LABELS)))}
            rare = {t for (t,) in conn.execute("SELECT term FROM pgrag.token WHERE corpus_id = %s "
                                               "AND term = ANY (%s) AND df <= %s", (kb.id, terms, s.rare_df))}
            keys.append(named | rare)
        ids = [n[0] for n in nodes]
        narrative = conn.execute("SELECT node_a, node_b, weight FROM pgrag.semantic_edge WHERE corpus_id = %s "
                                 "AND kind = 'narrative' AND node_a = ANY (%s) AND node_b = ANY (%s)",
                                 (kb.id, ids, ids)).fetchall()
        chunks = conn.execute("SELECT chunk_id, document_id, char_start, char_end FROM pgrag.chunk "
                              "WHERE corpus_id = %s ORDER BY document_id, ordinal", (kb.id,)).fetchall()

    n = len(nodes)
    doc = [r[1] for r in nodes]
    vectors = np.array([r[7].to_numpy() for r in nodes], dtype=np.float64)
    w = np.zeros((n, n))
    at = {node_id: i for i, node_id in enumerate(ids)}
    for a, b, weight in narrative:
        w[at[a], at[b]] += s.narrative_weight * weight
        w[at[b], at[a]] += s.narrative_weight * weight
    sims = vectors @ vectors.T
    semantic = set()
    for i in range(n):
        others = sorted((j for j in range(n) if j != i), key=lambda j: -sims[i, j])[: s.semantic_top_m]
        semantic |= {(min(i, j), max(i, j)) for j in others if sims[i, j] >= s.semantic_threshold}
    for a, b in semantic:
        w[a, b] += s.semantic_weight * sims[a, b]
        w[b, a] += s.semantic_weight * sims[a, b]
    for a in range(n):
        for b in range(n):
            if a != b and doc[a] != doc[b] and keys[a] & keys[b]:
                w[a, b] += s.lexical_weight * min(1.0, len(keys[a] & keys[b]) / s.lexical_saturation)

    def match(r) -> float:
        text = f"{r[2]}\n{r[6]}".casefold()
        return sum(e.casefold() in text for e in entities) / len(entities)

    scores = vectors @ q + s.entity_weight * np.array([match(r) for r in nodes])
    anchors = sorted(range(n), key=lambda i: (-scores[i], ids[i]))[: s.anchors]
    energy = np.zeros(n)
    for i in anchors:
        energy[i] = scores[i] * (s.remote_weight if doc[i] in remote else s.local_weight)
    energy /= energy.sum()
    out = w.sum(axis=1, keepdims=True)
    shares = np.divide(w, out, out=np.zeros_like(w), where=out > 0).T     # column i: what node i passes on
    wave = energy.copy()
    for _ in range(s.steps):
        wave = s.decay * shares @ wave
        energy = energy + wave
    keep = (energy >= s.threshold) | np.isin(np.arange(n), anchors)
    kept, frontier = set(anchors), list(anchors)
    while frontier:
        i = frontier.pop()
        for j in np.flatnonzero(w[i] > 0):
            if keep[j] and j not in kept:
                kept.add(int(j))
                frontier.append(int(j))

    spans = []                                   # (document, start, end, score)
    relevance = {}
    for i in kept:
        relevance[doc[i]] = max(relevance.get(doc[i], 0.0), energy[i])
    for d in sorted(relevance, key=lambda d: (-relevance[d], d)):
        run = []
        for i in sorted((i for i in kept if doc[i] == d), key=lambda i: nodes[i][3]):
            if run and nodes[i][3] != nodes[run[-1]][3] + 1:
                spans.append((d, nodes[run[0]][4], nodes[run[-1]][5], relevance[d]))
                run = []
            run.append(i)
        spans.append((d, nodes[run[0]][4], nodes[run[-1]][5], relevance[d]))
    best = {}
    for i in range(n):
        if doc[i] not in relevance:
            best[doc[i]] = max(best.get(doc[i], (0.0, -1.0)), (energy[i], scores[i]))
    spans += [(d, 0, 2**31 - 1, e) for d, (e, _) in sorted(best.items(), key=lambda x: (-x[1][0], -x[1][1], x[0]))]
    expected: dict[int, float] = {}
    for d, start, end, score in spans:
        for chunk_id, chunk_doc, c_start, c_end in chunks:
            if chunk_doc == d and c_start < end and start < c_end:
                expected.setdefault(chunk_id, score)
    expected_hits = list(expected.items())[:12]

    assert len(relevance) >= 2 and best               # paths over several documents, and fill after them
    assert [h.provenance.chunk_id for h in hits] == [c for c, _ in expected_hits]
    assert np.allclose([h.score for h in hits], [e for _, e in expected_hits], atol=1e-6)
