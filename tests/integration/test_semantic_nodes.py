"""ThreadRAG's semantic nodes at ingest: exact offsets, narrative edges, clean-up
on replace/delete, equality with a rebuild, and the resumable backfill; and the
threadrag family: built only for corpora that ask, enabled later by a backfill,
maintained by every ingest path once enabled, refused with the command that
builds it when missing, and disabled on request."""

from __future__ import annotations

import numpy as np
import pytest

from pgrag.nlp import NAME_LABELS, name_key
from pgrag.semantic import as_array, build_semantic_nodes


def nodes_of(db, kb, with_vectors=False):
    with db.transaction() as conn:
        return conn.execute(
            "SELECT d.external_id, n.ordinal, n.first_sentence, n.last_sentence, n.char_start, n.char_end, "
            "n.text, d.body" + (", n.embedding" if with_vectors else "") +
            " FROM pgrag.semantic_node n JOIN pgrag.document d USING (corpus_id, document_id) "
            "WHERE n.corpus_id = %s ORDER BY d.external_id, n.ordinal", (kb.id,)).fetchall()


def narrative_edges_of(db, kb):
    with db.transaction() as conn:
        return conn.execute(
            "SELECT da.external_id, a.ordinal, db.external_id, b.ordinal, e.kind, e.weight "
            "FROM pgrag.semantic_edge e "
            "JOIN pgrag.semantic_node a ON a.corpus_id = e.corpus_id AND a.node_id = e.node_a "
            "JOIN pgrag.semantic_node b ON b.corpus_id = e.corpus_id AND b.node_id = e.node_b "
            "JOIN pgrag.document da ON da.corpus_id = a.corpus_id AND da.document_id = a.document_id "
            "JOIN pgrag.document db ON db.corpus_id = b.corpus_id AND db.document_id = b.document_id "
            "WHERE e.corpus_id = %s ORDER BY 1, 2", (kb.id,)).fetchall()


def names_of(db, kb):
    """(document, key, sentence of the first mention, vector) of every stored name vector."""
    with db.transaction() as conn:
        return conn.execute(
            "SELECT d.external_id, v.key, v.sentence, v.embedding FROM pgrag.entity_vector v "
            "JOIN pgrag.document d USING (corpus_id, document_id) WHERE v.corpus_id = %s ORDER BY 1, 2",
            (kb.id,)).fetchall()


def same_names(a, b):
    assert [r[:3] for r in a] == [r[:3] for r in b]
    assert all(np.allclose(as_array(x[3]), as_array(y[3]), atol=1e-5) for x, y in zip(a, b))


def without_body(rows):
    return [r[:7] for r in rows]


def test_node_text_is_the_document_slice_and_nodes_tile_the_sentences(db, wiki_docs):
    kb = db.corpus("nodes")
    report = kb.ingest(wiki_docs, progress=False, methods=["threadrag"])
    rows = nodes_of(db, kb)
    assert report.nodes == len(rows) > len(wiki_docs)       # the long document is cut
    by_doc: dict[str, list] = {}
    for ext, ordinal, first, last, start, end, text, body in rows:
        assert body[start:end] == text and text.strip()
        by_doc.setdefault(ext, []).append((ordinal, first, last))
    with db.transaction() as conn:
        sentences = dict(conn.execute(
            "SELECT d.external_id, count(*) FROM pgrag.sentence s JOIN pgrag.document d USING (corpus_id, document_id) "
            "WHERE s.corpus_id = %s GROUP BY 1", (kb.id,)).fetchall())
    for ext, spans in by_doc.items():
        assert [o for o, _, _ in spans] == list(range(len(spans)))
        assert spans[0][1] == 0 and spans[-1][2] == sentences[ext] - 1
        assert all(b[1] == a[2] + 1 for a, b in zip(spans, spans[1:]))
    assert len(by_doc["long"]) >= 2
    edges = narrative_edges_of(db, kb)
    assert len(edges) == len(rows) - len(by_doc)
    assert all(a == b and ob == oa + 1 and kind == "narrative" and w == 1.0 for a, oa, b, ob, kind, w in edges)


def test_name_vectors_are_the_vectors_of_the_names_as_written(db, wiki_docs):
    """One row per distinct name-like entity of a document, at the sentence of
    its first mention, holding the vector of the name as the text writes it (the
    uncased model gives the lower-cased key the same vector)."""
    kb = db.corpus("names", methods=["threadrag"])
    kb.ingest(wiki_docs, progress=False)
    rows = names_of(db, kb)
    with db.transaction() as conn:
        mentions = conn.execute(
            "SELECT d.external_id, e.entity, s.ordinal FROM pgrag.chunk_entity e "
            "JOIN pgrag.chunk c ON c.corpus_id = e.corpus_id AND c.chunk_id = e.chunk_id "
            "JOIN pgrag.document d ON d.corpus_id = c.corpus_id AND d.document_id = c.document_id "
            "JOIN pgrag.sentence s ON s.corpus_id = c.corpus_id AND s.document_id = c.document_id "
            "     AND s.char_start <= e.char_start AND e.char_start < s.char_end "
            "WHERE e.corpus_id = %s AND e.label = ANY (%s) ORDER BY d.external_id, e.char_start",
            (kb.id, list(NAME_LABELS))).fetchall()
    first: dict[tuple[str, str], tuple[int, str]] = {}
    for ext, entity, sentence in mentions:
        first.setdefault((ext, name_key(entity)), (sentence, entity))
    assert len(rows) > len(wiki_docs)
    assert {(r[0], r[1]): r[2] for r in rows} == {k: v[0] for k, v in first.items()}
    written = [first[(r[0], r[1])][1] for r in rows]
    assert any(w != r[1] for w, r in zip(written, rows))          # some names are written with capitals
    for row, vector in zip(rows, kb.embedder.encode(written)):
        assert np.allclose(as_array(row[3]), vector, atol=1e-5), row[:2]


def test_replace_and_delete_clean_up_and_equal_a_rebuild(db, wiki_docs):
    kb = db.corpus("churn", methods=["threadrag"])
    kb.ingest(wiki_docs, progress=False)
    changed = dict(wiki_docs[4], text=wiki_docs[4]["text"].replace("valley", "canyon") + " A new last sentence.")
    kb.ingest([changed], progress=False)
    kb.delete(["minaj"])
    final = [d for d in wiki_docs if d["id"] not in ("minaj", "long")] + [changed]
    fresh = db.corpus("fresh", methods=["threadrag"])
    fresh.ingest(final, progress=False)
    assert without_body(nodes_of(db, kb)) == without_body(nodes_of(db, fresh))
    assert narrative_edges_of(db, kb) == narrative_edges_of(db, fresh)
    same_names(names_of(db, kb), names_of(db, fresh))
    assert not any(r[0] == "minaj" for r in nodes_of(db, kb))
    with db.transaction() as conn:   # no orphans: every node's document and edge's nodes exist
        assert conn.execute("SELECT count(*) FROM pgrag.semantic_edge e WHERE corpus_id = %s AND NOT EXISTS "
                            "(SELECT 1 FROM pgrag.semantic_node n WHERE n.corpus_id = e.corpus_id "
                            "AND n.node_id = e.node_a)", (kb.id,)).fetchone()[0] == 0


def test_backfill_builds_the_same_nodes_and_resumes(db, wiki_docs):
    kb = db.corpus("backfill", methods=["threadrag"])
    kb.ingest(wiki_docs, progress=False)
    before = nodes_of(db, kb, with_vectors=True)
    names = names_of(db, kb)
    edges = narrative_edges_of(db, kb)
    with db.transaction() as conn:
        conn.execute("DELETE FROM pgrag.semantic_node WHERE corpus_id = %s AND document_id IN "
                     "(SELECT document_id FROM pgrag.document WHERE corpus_id = %s AND external_id <> 'lothair')",
                     (kb.id, kb.id))
    report = build_semantic_nodes(kb, batch_size=2, progress=False)
    assert report.documents == len(wiki_docs) - 1 and report.nodes == len(before) - 1
    after = nodes_of(db, kb, with_vectors=True)
    assert without_body(after) == without_body(before)
    for a, b in zip(after, before):
        assert np.allclose(as_array(a[8]), as_array(b[8]), atol=1e-5)
    assert narrative_edges_of(db, kb) == edges
    same_names(names_of(db, kb), names)     # written again with the nodes, not twice
    assert build_semantic_nodes(kb, progress=False).documents == 0     # nothing left to do


def test_backfill_adds_the_name_vectors_of_documents_that_have_nodes(db, wiki_docs):
    """Documents indexed before name vectors existed (migration 0010) get them
    from the stored entities, the same rows as an ingest writes."""
    kb = db.corpus("namefill", methods=["threadrag"])
    kb.ingest(wiki_docs, progress=False)
    before = names_of(db, kb)
    with db.transaction() as conn:
        conn.execute("DELETE FROM pgrag.entity_vector WHERE corpus_id = %s AND document_id IN "
                     "(SELECT document_id FROM pgrag.document WHERE corpus_id = %s AND external_id <> 'lothair')",
                     (kb.id, kb.id))
    kept = len(names_of(db, kb))
    report = build_semantic_nodes(kb, batch_size=2, progress=False)
    assert report.documents == 0 and report.names == len(before) - kept > 0
    same_names(names_of(db, kb), before)
    assert build_semantic_nodes(kb, progress=False).names == 0


def test_backfill_from_sql_builds_the_same_nodes(db, database_uri, wiki_docs):
    """pgrag.threadrag_index(corpus): the backfill inside the server, for an
    application that talks SQL only."""
    import psycopg

    kb = db.corpus("sqlfill", methods=["threadrag"])
    kb.ingest(wiki_docs, progress=False)
    before = nodes_of(db, kb, with_vectors=True)
    with db.transaction() as conn:
        conn.execute("DELETE FROM pgrag.semantic_node WHERE corpus_id = %s", (kb.id,))
    with psycopg.connect(database_uri, autocommit=True) as c:
        report = c.execute("SELECT pgrag.threadrag_index('sqlfill')").fetchone()[0]
        assert report["documents"] == len(wiki_docs) and report["nodes"] == len(before)
        assert c.execute("SELECT pgrag.threadrag_index('sqlfill')").fetchone()[0]["documents"] == 0
    after = nodes_of(db, kb, with_vectors=True)
    assert without_body(after) == without_body(before)
    for a, b in zip(after, before):
        assert np.allclose(as_array(a[8]), as_array(b[8]), atol=1e-5)


def stored_terms(db, kb):
    """(document, ordinal, stored terms, pgrag.tokenize of the text) of every node."""
    with db.transaction() as conn:
        return conn.execute(
            "SELECT d.external_id, n.ordinal, n.terms, pgrag.tokenize(n.text) FROM pgrag.semantic_node n "
            "JOIN pgrag.document d USING (corpus_id, document_id) WHERE n.corpus_id = %s ORDER BY 1, 2",
            (kb.id,)).fetchall()


def query_terms(db, kb):
    """The terms threadrag_nodes gives each node of the corpus, by node id."""
    with db.transaction() as conn:
        ids = [r[0] for r in conn.execute("SELECT document_id FROM pgrag.document WHERE corpus_id = %s",
                                          (kb.id,)).fetchall()]
    rows = db.fetchall("threadrag_nodes", {"corpus_id": kb.id, "document_ids": ids, "labels": list(NAME_LABELS)})
    return {r[0]: list(r[9]) for r in rows}


def test_node_terms_are_stored_with_the_node_and_filled_for_older_nodes(db, database_uri, wiki_docs):
    """Each node's terms (migration 0011) are pgrag.tokenize of its text, whether a
    client or the server wrote the node; nodes without them (written before 0011)
    give the same terms to ThreadRAG's query, and the backfill stores them."""
    import psycopg

    kb = db.corpus("terms", methods=["threadrag"])
    kb.ingest(wiki_docs, progress=False)
    rows = stored_terms(db, kb)
    assert rows and all(stored == tokens for _, _, stored, tokens in rows)
    assert any(len(stored) > 5 for _, _, stored, _ in rows)
    expected = query_terms(db, kb)
    with db.transaction() as conn:                  # the server writes them too (SPI, no COPY)
        conn.execute("DELETE FROM pgrag.semantic_node WHERE corpus_id = %s", (kb.id,))
    with psycopg.connect(database_uri, autocommit=True) as c:
        c.execute("SELECT pgrag.threadrag_index('terms')")
    assert stored_terms(db, kb) == rows
    with db.transaction() as conn:                  # as a corpus from before 0011 has them
        older = conn.execute("UPDATE pgrag.semantic_node SET terms = NULL WHERE corpus_id = %s "
                             "AND ordinal = 0 RETURNING node_id", (kb.id,)).fetchall()
    assert 0 < len(older) < len(rows)
    assert sorted(query_terms(db, kb).values()) == sorted(expected.values())
    assert build_semantic_nodes(kb, progress=False).terms_filled == len(older)
    assert stored_terms(db, kb) == rows
    assert build_semantic_nodes(kb, progress=False).terms_filled == 0


# -- the threadrag family ---------------------------------------------------------

def node_count(db, kb) -> int:
    with db.transaction() as conn:
        return conn.execute("SELECT count(*) FROM pgrag.semantic_node WHERE corpus_id = %s", (kb.id,)).fetchone()[0]


def test_a_new_corpus_builds_no_nodes_and_threadrag_names_the_command(db, database_uri, wiki_docs):
    import psycopg

    import pgrag

    kb = db.corpus("plain")
    report = kb.ingest(wiki_docs, progress=False)
    assert kb.families == () and report.nodes == 0 and report.node_embedding_seconds == 0.0
    assert node_count(db, kb) == 0
    assert kb.retrieve("Who was the mother of Lothair II?", method="hybrid", k=2)     # the rest is unaffected
    command = "run `pgrag threadrag-index --corpus plain` (or SELECT pgrag.threadrag_index('plain'))"
    with pytest.raises(pgrag.MethodNotBuilt) as caught:
        kb.retrieve("Who was the mother of Lothair II?", method="threadrag", llm=False)
    assert str(caught.value) == f"corpus 'plain' has no ThreadRAG semantic nodes: {command}"
    with psycopg.connect(database_uri, autocommit=True) as c:                       # and from SQL
        with pytest.raises(psycopg.Error) as sql_caught:
            c.execute("SELECT * FROM pgrag.retrieve('plain', 'Who was the mother of Lothair II?', 'threadrag', 3)")
    assert sql_caught.value.sqlstate == "PR007" and command in str(sql_caught.value)


def test_enabling_later_backfills_what_an_ingest_would_have_built(db, wiki_docs):
    kb = db.corpus("later")
    kb.ingest(wiki_docs, progress=False)
    report = kb.enable("threadrag", progress=False)
    assert kb.families == ("threadrag",) and report.documents == len(wiki_docs)
    built = db.corpus("from-start", methods=["threadrag"])
    built.ingest(wiki_docs, progress=False)
    assert without_body(nodes_of(db, kb)) == without_body(nodes_of(db, built))
    assert narrative_edges_of(db, kb) == narrative_edges_of(db, built)
    # from now on every ingest maintains them
    extra = {"id": "extra", "title": "Extra", "text": "Teutberga founded a convent. It stood in Lotharingia."}
    assert kb.ingest([extra], progress=False).nodes == 1
    hits = kb.retrieve("Who was the mother of Lothair II?", method="threadrag", k=2, llm=False)
    assert hits[0].title == "Lothair II"
    assert db.corpus("later", create=False).families == ("threadrag",)                  # recorded in the table


def test_an_ingest_prepared_before_an_enable_still_writes_its_nodes(db, wiki_docs):
    """A Corpus opened before another session enabled the family: its ingest
    re-reads the family under the write lock and builds the nodes there, and its
    threadrag retrieval sees the enable."""
    stale = db.corpus("stale")
    db.corpus("stale", create=False).enable("threadrag", progress=False)
    assert stale.families == ()                                                           # the cached row
    report = stale.ingest(wiki_docs, progress=False)
    assert report.nodes == node_count(db, stale) > len(wiki_docs)
    assert stale.retrieve("Who was the mother of Lothair II?", method="threadrag", k=2, llm=False)


def test_ingest_methods_and_the_sql_index_maintain_the_nodes(db, database_uri, wiki_docs):
    import psycopg

    kb = db.corpus("sqlpath")
    kb.ingest(wiki_docs[:2], progress=False)
    report = kb.ingest(wiki_docs[2:], progress=False, methods=["threadrag", "dense"])
    assert report.nodes > 0 and report.node_embedding_seconds > 0
    assert report.backfill.documents == 2                                                 # the two older ones
    with psycopg.connect(database_uri, autocommit=True) as c:
        c.execute("INSERT INTO pgrag.document (corpus_id, external_id, title, body) VALUES (%s, 'sql', 'Sql', "
                  "'Hugh of Tours had a daughter. She was called Ermengarde.')", (kb.id,))
        assert c.execute("SELECT pgrag.index('sqlpath')").fetchone()[0]["nodes"] == 1
    assert any(r[0] == "sql" for r in nodes_of(db, kb))


def test_disabling_stops_the_maintenance_and_can_drop_the_nodes(db, wiki_docs):
    import pgrag

    kb = db.corpus("off", methods=["threadrag"])
    kb.ingest(wiki_docs, progress=False)
    count = node_count(db, kb)
    assert kb.disable("threadrag") == 0 and kb.families == ()
    assert kb.ingest([{"id": "new", "text": "A brand new document. It has two sentences."}], progress=False).nodes == 0
    assert node_count(db, kb) == count                                                    # kept, not maintained
    with pytest.raises(pgrag.MethodNotBuilt, match="pgrag threadrag-index --corpus off"):
        kb.retrieve("Who was the mother of Lothair II?", method="threadrag", llm=False)
    assert names_of(db, kb)
    assert kb.disable("threadrag", drop=True) == count and node_count(db, kb) == 0
    with db.transaction() as conn:
        assert conn.execute("SELECT count(*) FROM pgrag.semantic_edge WHERE corpus_id = %s",
                            (kb.id,)).fetchone() == (0,)
    assert names_of(db, kb) == []


def test_disabling_from_sql(db, database_uri, wiki_docs):
    """pgrag.threadrag_disable(corpus[, drop]): the same switch for an application
    that talks SQL only; pgrag corpora lists what a corpus maintains."""
    import psycopg

    kb = db.corpus("sqloff", methods=["threadrag"])
    kb.ingest(wiki_docs, progress=False)
    count = node_count(db, kb)
    assert count > 0 and next(c for c in db.corpora() if c["name"] == "sqloff")["families"] == ["threadrag"]
    with psycopg.connect(database_uri, autocommit=True) as c:
        assert c.execute("SELECT pgrag.threadrag_disable('sqloff')").fetchone()[0] == {"dropped": 0, "families": []}
        with pytest.raises(psycopg.Error, match="pgrag threadrag-index --corpus sqloff"):
            c.execute("SELECT * FROM pgrag.retrieve('sqloff', 'Who was the mother of Lothair II?', 'threadrag', 3)")
        assert c.execute("SELECT pgrag.threadrag_disable('sqloff', true)").fetchone()[0]["dropped"] == count
        with pytest.raises(psycopg.Error, match="drop must be true or false"):
            c.execute("SELECT pgrag_internal._checked(pgrag_internal._py('threadrag_disable', "
                      "'{\"corpus\": \"sqloff\", \"drop\": 1}'))")
    assert node_count(db, kb) == 0 and next(c for c in db.corpora() if c["name"] == "sqloff")["families"] == []
