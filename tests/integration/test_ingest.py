"""Ingest against the real embedded PostgreSQL, embedding model and spaCy model."""

from __future__ import annotations

import pytest

import pgrag
from pgrag.models import Document

DERIVED = ["sentence", "chunk", "token", "chunk_token", "token_edge", "chunk_entity"]


def counts(db: pgrag.Database, corpus_id: int) -> dict[str, int]:
    out = {}
    with db.transaction() as conn:
        for table in ["document", *DERIVED]:
            # table names come from the list above, not from input
            out[table] = conn.execute(
                f"SELECT count(*) FROM pgrag.{table} WHERE corpus_id = %s", (corpus_id,)).fetchone()[0]
    return out


def statistics(db: pgrag.Database, corpus_id: int) -> dict[str, object]:
    """Every derived statistic keyed by content (terms, external ids), not by
    surrogate ids, so corpora built in different orders compare equal."""
    with db.transaction() as conn:
        df = dict(conn.execute("SELECT term, df FROM pgrag.token WHERE corpus_id = %s", (corpus_id,)).fetchall())
        edges = dict(((a, b), w) for a, b, w in conn.execute(
            """SELECT least(ta.term, tb.term), greatest(ta.term, tb.term), e.weight
               FROM pgrag.token_edge e
               JOIN pgrag.token ta ON ta.corpus_id = e.corpus_id AND ta.token_id = e.token_a
               JOIN pgrag.token tb ON tb.corpus_id = e.corpus_id AND tb.token_id = e.token_b
               WHERE e.corpus_id = %s""", (corpus_id,)).fetchall())
        postings = sorted(conn.execute(
            """SELECT d.external_id, c.ordinal, t.term, ct.tf, ct.positions
               FROM pgrag.chunk_token ct
               JOIN pgrag.token t ON t.corpus_id = ct.corpus_id AND t.token_id = ct.token_id
               JOIN pgrag.chunk c ON c.corpus_id = ct.corpus_id AND c.chunk_id = ct.chunk_id
               JOIN pgrag.document d ON d.corpus_id = c.corpus_id AND d.document_id = c.document_id
               WHERE ct.corpus_id = %s""", (corpus_id,)).fetchall())
        chunks = sorted(conn.execute(
            """SELECT d.external_id, c.ordinal, c.text, c.n_tokens, c.char_start, c.char_end
               FROM pgrag.chunk c JOIN pgrag.document d USING (corpus_id, document_id)
               WHERE c.corpus_id = %s""", (corpus_id,)).fetchall())
        entities = sorted(conn.execute(
            """SELECT d.external_id, c.ordinal, e.entity, e.label, e.char_start
               FROM pgrag.chunk_entity e
               JOIN pgrag.chunk c ON c.corpus_id = e.corpus_id AND c.chunk_id = e.chunk_id
               JOIN pgrag.document d ON d.corpus_id = c.corpus_id AND d.document_id = c.document_id
               WHERE e.corpus_id = %s""", (corpus_id,)).fetchall())
    return {"df": df, "edges": edges, "postings": postings, "chunks": chunks, "entities": entities}


def test_ingest_builds_every_table(db, wiki_docs):
    kb = db.corpus("wiki")
    report = kb.ingest(wiki_docs, progress=False)
    assert (report.added, report.replaced, report.unchanged) == (5, 0, 0)
    c = counts(db, kb.id)
    assert c["document"] == 5
    assert all(c[t] > 0 for t in DERIVED), c
    # the 16-sentence document is split into overlapping 6-sentence windows
    assert report.chunks > 5
    with db.transaction() as conn:
        rows = conn.execute(
            """SELECT c.text, substr(d.body, c.char_start + 1, c.char_end - c.char_start), c.first_sentence,
                      c.last_sentence
               FROM pgrag.chunk c JOIN pgrag.document d USING (corpus_id, document_id)
               WHERE c.corpus_id = %s""", (kb.id,)).fetchall()
        for text, span, first, last in rows:
            assert text == span  # offsets point into the body exactly
            assert last - first + 1 <= 6
        n_tokens = conn.execute(
            "SELECT bool_and(n_tokens = (SELECT coalesce(sum(tf), 0) FROM pgrag.chunk_token ct "
            "WHERE ct.corpus_id = c.corpus_id AND ct.chunk_id = c.chunk_id)) FROM pgrag.chunk c WHERE corpus_id = %s",
            (kb.id,)).fetchone()[0]
        assert n_tokens
        ents = {r[0] for r in conn.execute("SELECT entity FROM pgrag.chunk_entity WHERE corpus_id = %s", (kb.id,))}
    assert "Nicki Minaj" in ents or "Port of Spain" in ents


def test_document_frequency_and_edges_match_definitions(db):
    kb = db.corpus("defs")
    kb.ingest([{"id": "a", "text": "alpha beta gamma delta epsilon."},
               {"id": "b", "text": "alpha beta alpha."}], progress=False)
    stats = statistics(db, kb.id)
    assert stats["df"]["alpha"] == 2 and stats["df"]["gamma"] == 1
    # chunk a: 5 tokens, windows of 4 -> [alpha beta gamma delta], [beta gamma delta epsilon]
    # alpha-beta: window 1 of a + the single window of b (counted once per window)
    assert stats["edges"][("alpha", "beta")] == 2
    assert stats["edges"][("beta", "gamma")] == 2
    assert stats["edges"][("alpha", "delta")] == 1
    assert ("alpha", "epsilon") not in stats["edges"]


def test_reingest_same_content_is_a_noop(db, wiki_docs):
    kb = db.corpus("wiki")
    kb.ingest(wiki_docs, progress=False)
    before, version = statistics(db, kb.id), kb.graph_version()
    report = kb.ingest(wiki_docs, progress=False)
    assert (report.added, report.replaced, report.unchanged) == (0, 0, 5)
    assert statistics(db, kb.id) == before
    assert kb.graph_version() == version


def test_changed_content_replaces_and_delete_keeps_statistics_exact(db, wiki_docs):
    kb = db.corpus("incremental")
    kb.ingest(wiki_docs, progress=False)
    changed = dict(wiki_docs[0], text="Lothair II ruled Lotharingia. Zanzibar quokka xylophone appear only here.")
    v0 = kb.graph_version()
    report = kb.ingest([changed], progress=False)
    assert report.replaced == 1
    assert kb.graph_version() > v0
    assert kb.delete(["minaj", "does-not-exist"]) == 1

    final = [changed] + [d for d in wiki_docs[1:] if d["id"] != "minaj"]
    fresh = db.corpus("fresh")
    fresh.ingest(final, progress=False)
    assert statistics(db, kb.id) == statistics(db, fresh.id)
    assert "quokka" in statistics(db, kb.id)["df"]
    assert "teutberga" not in statistics(db, kb.id)["df"]  # only in the replaced text


def test_delete_from_sql_equals_kb_delete(db, database_uri, wiki_docs):
    """pgrag.delete_documents is what kb.delete runs: plain SQL, no PL/Python."""
    import psycopg

    by_sql, by_python = db.corpus("sqldel"), db.corpus("pydel")
    by_sql.ingest(wiki_docs, progress=False)
    by_python.ingest(wiki_docs, progress=False)
    before = statistics(db, by_sql.id)
    with psycopg.connect(database_uri, autocommit=True) as conn:
        deleted = conn.execute("SELECT pgrag.delete_documents('sqldel', ARRAY['minaj', 'nope'])").fetchone()[0]
        with pytest.raises(psycopg.Error) as caught:
            conn.execute("SELECT pgrag.delete_documents('no-such-corpus', ARRAY['minaj'])")
    assert caught.value.sqlstate == "PR001"
    assert deleted == 1 == by_python.delete(["minaj", "nope"])
    sql_stats, py_stats = statistics(db, by_sql.id), statistics(db, by_python.id)
    assert sql_stats == py_stats != before


def test_documents_inserted_through_the_orm_are_indexed_by_index(db, wiki_docs):
    kb = db.corpus("orm")
    with db.session() as session:
        session.add_all([
            Document(corpus_id=kb.id, external_id=d["id"], title=d["title"], body=d["text"]) for d in wiki_docs[:3]
        ])
        session.commit()
    assert db.corpora()[0]["pending"] == 3
    report = kb.index(progress=False)
    assert report.added == 0 and report.replaced == 3
    assert db.corpora()[0]["pending"] == 0
    hits = kb.retrieve("Where was Nicki Minaj born?", method="bm25", k=1)
    assert hits[0].provenance.external_id == "minaj"
    # editing the body through the ORM makes it pending again; index() rebuilds it
    with db.session() as session:
        doc = session.query(Document).filter_by(corpus_id=kb.id, external_id="minaj").one()
        doc.body = "Nicki Minaj recorded an album about quokkas."
        session.commit()
    kb.index(progress=False)
    fresh = db.corpus("orm-fresh")
    fresh.ingest([wiki_docs[0], wiki_docs[1], dict(wiki_docs[2], text="Nicki Minaj recorded an album about quokkas.")],
                 progress=False)
    assert statistics(db, kb.id) == statistics(db, fresh.id)


def test_failed_ingest_leaves_the_database_as_it_was(db, wiki_docs):
    kb = db.corpus("atomic")
    kb.ingest(wiki_docs[:2], progress=False)
    before = (counts(db, kb.id), statistics(db, kb.id), kb.graph_version())
    bad_batches = [
        wiki_docs[2:] + [{"id": "empty", "text": "  "}],
        wiki_docs[2:] + [dict(wiki_docs[3])],  # duplicate id within one batch
        [dict(wiki_docs[0], text="changed"), {"id": "nul", "text": "a\x00b"}],
    ]
    for bad in bad_batches:
        with pytest.raises(pgrag.InputError):
            kb.ingest(bad, progress=False)
        assert (counts(db, kb.id), statistics(db, kb.id), kb.graph_version()) == before


def test_corpora_are_isolated(db, wiki_docs):
    a, b = db.corpus("a"), db.corpus("b")
    a.ingest(wiki_docs[:2], progress=False)
    b.ingest(wiki_docs[2:4], progress=False)
    for method in ("bm25", "dense"):
        hits_a = a.retrieve("Nicki Minaj rapper Lothair", method=method, k=10)
        assert {h.provenance.external_id for h in hits_a} <= {"lothair", "ermengarde"}
        hits_b = b.retrieve("Nicki Minaj rapper Lothair", method=method, k=10)
        assert {h.provenance.external_id for h in hits_b} <= {"minaj", "changed"}
    a.delete(["lothair"])
    assert b.retrieve("Lothair", method="bm25", k=5) == []
    assert "lothair" in statistics(db, a.id)["df"]  # still in ermengarde's text


def test_ingest_with_small_batches_equals_one_batch(db, wiki_docs):
    one, many = db.corpus("one"), db.corpus("many")
    one.ingest(wiki_docs, progress=False)
    many.ingest(wiki_docs, batch_size=2, progress=False)
    assert statistics(db, one.id) == statistics(db, many.id)


def test_concurrent_ingests_into_one_corpus_equal_a_sequential_build(db, database_uri, wiki_docs):
    """Two processes' worth of connections ingesting overlapping documents at once:
    the corpus write lock serialises them, so nothing is duplicated or lost."""
    import threading

    kb = db.corpus("concurrent")
    other = pgrag.connect(database_uri)  # a second engine and connection pool
    kb2 = other.corpus("concurrent")
    _ = kb.embedder  # load the model once before the race
    errors: list[BaseException] = []

    def work(corpus, docs):
        try:
            corpus.ingest(docs, batch_size=1, progress=False)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(kb, wiki_docs[:4])),
               threading.Thread(target=work, args=(kb2, wiki_docs[1:]))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    other.close()
    assert errors == []
    fresh = db.corpus("sequential")
    fresh.ingest(wiki_docs, progress=False)
    assert counts(db, kb.id)["document"] == len(wiki_docs)
    assert statistics(db, kb.id) == statistics(db, fresh.id)


def test_reingest_with_new_metadata_updates_it_without_reindexing(db, wiki_docs):
    kb = db.corpus("meta")
    kb.ingest(wiki_docs, progress=False)
    version = kb.graph_version()
    wiki_docs[0]["metadata"] = {"source": "wikipedia", "year": 2020}
    report = kb.ingest(wiki_docs, progress=False)
    assert report.unchanged == 5 and report.chunks == 0
    assert kb.graph_version() == version
    with db.session() as session:
        doc = session.query(Document).filter_by(corpus_id=kb.id, external_id=wiki_docs[0]["id"]).one()
        assert doc.metadata_ == {"source": "wikipedia", "year": 2020}


def test_reingesting_the_original_after_an_orm_edit_restores_it(db, wiki_docs):
    kb = db.corpus("restore")
    kb.ingest(wiki_docs[:2], progress=False)
    with db.session() as session:
        doc = session.query(Document).filter_by(corpus_id=kb.id, external_id="lothair").one()
        doc.body = "Edited in the application, not yet indexed."
        session.commit()
    report = kb.ingest(wiki_docs[:2], progress=False)
    assert report.replaced == 1 and report.unchanged == 1
    fresh = db.corpus("restore-fresh")
    fresh.ingest(wiki_docs[:2], progress=False)
    assert statistics(db, kb.id) == statistics(db, fresh.id)
    assert db.corpora()[0]["pending"] == 0


# A failure inside PostgreSQL, part-way through a batch, after the earlier
# documents' rows are written: a trigger raises on the third document's postings
# (written by pgrag_internal.index_chunks) or on its final "indexed" mark.
FAIL_AT = {
    "postings": ("BEFORE INSERT ON pgrag.chunk_token",
                 "EXISTS (SELECT 1 FROM pgrag.chunk c JOIN pgrag.document d USING (corpus_id, document_id) "
                 "WHERE c.corpus_id = NEW.corpus_id AND c.chunk_id = NEW.chunk_id AND d.external_id = 'changed')"),
    "mark_indexed": ("BEFORE UPDATE ON pgrag.document",
                     "NEW.external_id = 'changed' AND NEW.indexed_hash IS DISTINCT FROM OLD.indexed_hash"),
}


def documents(db: pgrag.Database, corpus_id: int) -> list[tuple]:
    with db.transaction() as conn:
        return sorted(conn.execute("SELECT external_id, title, body, content_hash, indexed_hash FROM pgrag.document "
                                   "WHERE corpus_id = %s", (corpus_id,)).fetchall())


def state(db: pgrag.Database, kb) -> tuple:
    return counts(db, kb.id), statistics(db, kb.id), documents(db, kb.id), kb.graph_version()


@pytest.mark.parametrize("where", sorted(FAIL_AT))
def test_a_database_error_mid_batch_leaves_nothing_of_the_batch(db, database_uri, wiki_docs, where):
    import psycopg

    event, condition = FAIL_AT[where]
    with psycopg.connect(database_uri, autocommit=True) as conn:
        conn.execute(f"""CREATE FUNCTION public.forced_failure() RETURNS trigger LANGUAGE plpgsql AS $$
                         BEGIN IF {condition} THEN RAISE EXCEPTION 'forced failure at {where}'; END IF;
                         RETURN NEW; END $$""")
        conn.execute(f"CREATE TRIGGER forced_failure {event} FOR EACH ROW EXECUTE FUNCTION public.forced_failure()")
    kb = db.corpus("atomic-sql")
    kb.ingest(wiki_docs[:2], progress=False)
    before = state(db, kb)
    replaced = dict(wiki_docs[0], text="Lothair II ruled Lotharingia. Quokkas appear only in this version.")
    batch = [replaced, wiki_docs[2], wiki_docs[3], wiki_docs[4]]          # 'changed' is the third
    assert batch[2]["id"] == "changed"

    with pytest.raises(pgrag.PgragError, match=f"forced failure at {where}") as info:
        kb.ingest(batch, progress=False)                                   # one batch of four
    assert not isinstance(info.value, pgrag.InputError)                   # it failed in SQL, not in validate()
    assert state(db, kb) == before                                         # the replace is undone too

    # Two batches: the first commits whole, the second (holding 'changed') leaves nothing.
    with pytest.raises(pgrag.PgragError, match="forced failure"):
        kb.ingest(batch, batch_size=2, progress=False)
    assert [d[0] for d in documents(db, kb.id)] == ["ermengarde", "lothair", "minaj"]
    first = db.corpus("atomic-sql-first")
    first.ingest([replaced, wiki_docs[1], wiki_docs[2]], progress=False)
    assert statistics(db, kb.id) == statistics(db, first.id)

    with psycopg.connect(database_uri, autocommit=True) as conn:
        conn.execute(f"DROP TRIGGER forced_failure ON {event.split(' ON ')[1]}")
    report = kb.ingest(batch, progress=False)                              # a re-run completes the job
    assert (report.added, report.unchanged) == (2, 2)
    everything = db.corpus("atomic-sql-all")
    everything.ingest([replaced, *wiki_docs[1:]], progress=False)
    assert statistics(db, kb.id) == statistics(db, everything.id)
    assert all(content == indexed for *_, content, indexed in documents(db, kb.id))


class RecordingEmbedder:
    """The real embedder, recording the thread of each call, failing on a marker."""

    def __init__(self, inner, marker: str = "\x01never") -> None:
        self.inner, self.marker, self.threads = inner, marker, []
        self.name, self.dim = inner.name, inner.dim

    def encode(self, texts, *, batch_size: int = 32):
        import threading

        self.threads.append(threading.current_thread().name)
        if any(self.marker in t for t in texts):
            raise RuntimeError("model error: cannot embed this")
        return self.inner.encode(texts, batch_size=batch_size)


def test_a_client_prepares_the_next_batch_while_it_writes_this_one(db, wiki_docs, shared_models, monkeypatch):
    """Prefetch (a client's default with the model runtime): the models run in
    threads ahead of the writes, the tables equal a build without it, and a model
    error in a later batch keeps the batches written before it and reaches the
    caller."""
    from pathlib import Path

    from pgrag import model_client
    from pgrag.ingest import ingest, prefetches
    from pgrag.sources import validate

    plain, ahead = db.corpus("plain"), db.corpus("ahead")
    docs = validate(wiki_docs)
    local = plain.embedder                                          # in process (no runtime set yet)
    monkeypatch.setenv("PGRAG_MODEL_RUNTIME", shared_models)        # spaCy's parses go to the runtime too
    remote = model_client.RemoteEmbedder(model_client.Endpoint(socket=Path(shared_models.removeprefix("unix:"))),
                                         plain.embedder.name)
    assert prefetches(remote) and not prefetches(local)
    recording = RecordingEmbedder(remote)
    ingest(db, plain.info, docs, embedder=recording, spacy_model=plain.settings.spacy_model, batch_size=2,
           progress=False, prefetch=False)
    assert set(recording.threads) == {"MainThread"}
    recording.threads.clear()
    report = ingest(db, ahead.info, docs, embedder=recording, spacy_model=ahead.settings.spacy_model,
                    batch_size=2, progress=False, prefetch=True)
    assert len(recording.threads) == 3 and all(t.startswith("pgrag-prepare") for t in recording.threads)
    assert statistics(db, ahead.id) == statistics(db, plain.id)
    assert report.added == len(wiki_docs) and report.embedding_seconds > 0

    failing = db.corpus("failing")
    marked = validate([*wiki_docs[:4], dict(wiki_docs[4], text="EXPLODE here. " + wiki_docs[4]["text"])])
    with pytest.raises(RuntimeError, match="model error"):
        ingest(db, failing.info, marked, embedder=RecordingEmbedder(remote, "EXPLODE"),
               spacy_model=failing.settings.spacy_model, batch_size=2, progress=False, prefetch=True)
    assert counts(db, failing.id)["document"] == 4        # the two batches before the third


class PairedEmbedder(RecordingEmbedder):
    """The real embedder, whose first two calls each wait until the other has
    started: only an ingest that prepares two batches at once gets past them."""

    def __init__(self, inner) -> None:
        import threading

        super().__init__(inner)
        self.pair, self.lock, self.calls = threading.Barrier(2, timeout=20), threading.Lock(), 0

    def encode(self, texts, *, batch_size: int = 32):
        with self.lock:
            self.calls += 1
            paired = self.calls <= 2
        if paired:
            self.pair.wait()
        return super().encode(texts, batch_size=batch_size)


def test_prefetch_embeds_one_batch_while_it_parses_the_next(db, wiki_docs, shared_models, monkeypatch):
    """Two batches are prepared at once, so one's embeddings overlap the other's
    spaCy parse: with one batch ahead the first call would wait for a partner
    that never comes (docs/SCALING.md, "Ingest through the runtime")."""
    from pathlib import Path

    from pgrag import model_client
    from pgrag.ingest import ingest
    from pgrag.sources import validate

    kb = db.corpus("paired")
    monkeypatch.setenv("PGRAG_MODEL_RUNTIME", shared_models)
    remote = model_client.RemoteEmbedder(model_client.Endpoint(socket=Path(shared_models.removeprefix("unix:"))),
                                         kb.embedder.name)
    paired = PairedEmbedder(remote)
    report = ingest(db, kb.info, validate(wiki_docs), embedder=paired, spacy_model=kb.settings.spacy_model,
                    batch_size=2, progress=False, prefetch=True)
    assert report.added == len(wiki_docs) and paired.calls == len(paired.threads) == 3
    assert len(set(paired.threads[:2])) == 2          # the pair ran in two threads
    assert 0 <= report.other_seconds <= report.total_seconds


def planner_chunks(db: pgrag.Database, corpus_id: int) -> float:
    """The planner's estimate of a corpus's chunks: what its statistics know."""
    with db.transaction() as conn:
        plan = conn.execute("EXPLAIN (FORMAT JSON) SELECT 1 FROM pgrag.chunk WHERE corpus_id = %s",
                            (corpus_id,)).fetchone()[0]
    return float(plan[0]["Plan"]["Plan Rows"])


def test_an_ingest_beside_a_bigger_corpus_brings_it_into_the_planner_statistics(db):
    """Statistics that know only a bigger corpus estimate a new one at one row
    (autovacuum waits for a tenth of the table to change), and the foreign keys'
    checks then walk the whole corpus for each row a drop deletes: the ingest
    analyzes the tables itself."""
    from pgrag.demo import sample_documents

    docs = sample_documents()
    big = db.corpus("big")
    big.ingest(docs, progress=False)
    with db.transaction() as conn:
        conn.execute("ANALYZE pgrag.chunk")
    small = db.corpus("small")
    small.ingest(docs[:20], progress=False)
    chunks = counts(db, small.id)["chunk"]
    assert chunks >= 20
    assert planner_chunks(db, small.id) * 10 >= chunks


def test_refresh_statistics_analyzes_only_what_does_not_know_the_corpus_and_drop_corpus_runs_it(db):
    from pgrag.demo import sample_documents
    from pgrag.ingest import refresh_statistics

    kb = db.corpus("sample")
    kb.ingest(sample_documents(), progress=False)
    assert refresh_statistics(db, kb.id) is False      # the ingest did it
    chunks = counts(db, kb.id)["chunk"]
    clear = "SELECT pg_clear_attribute_stats('pgrag', 'chunk', 'corpus_id', false)"
    known = ("SELECT count(*) FROM pg_stats WHERE schemaname = 'pgrag' AND tablename = 'chunk' "
             "AND attname = 'corpus_id'")
    with db.transaction() as conn:
        conn.execute(clear)
    assert planner_chunks(db, kb.id) * 10 < chunks
    assert refresh_statistics(db, kb.id) is True
    assert planner_chunks(db, kb.id) * 10 >= chunks
    with db.transaction() as conn:
        conn.execute(clear)
        assert conn.execute(known).fetchone()[0] == 0
    db.drop_corpus("sample")
    with db.transaction() as conn:
        assert conn.execute(known).fetchone()[0] == 1
