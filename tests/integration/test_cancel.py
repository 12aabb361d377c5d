"""Cancel and timeout (issue 18): ``statement_timeout`` and ``pg_cancel_backend``
during a retrieval held up in the database and during an ingest batch. Each gives
a clean ``QueryCanceled`` (a ``PgragError``), leaves nothing half-written, and the
same client works afterwards."""

from __future__ import annotations

import threading
import time
from urllib.parse import quote

import psycopg
import pytest

import pgrag
from tests.conftest import WIKI, seeded_database
from tests.integration.test_ingest import state

RETRIEVAL_TABLES = "pgrag.chunk, pgrag.token, pgrag.chunk_token, pgrag.token_edge, pgrag.document"
QUESTION = "Who was the mother of Lothair II?"


def with_timeout(uri: str, ms: int) -> str:
    return uri + ("&" if "?" in uri else "?") + "options=" + quote(f"-c statement_timeout={ms}")


database_uri = seeded_database("cancel", docs=WIKI[:3])


@pytest.fixture
def kb(db):
    """Corpus "cancel", built once (conftest.seeded_database)."""
    return db.corpus("cancel")


def wait_for_backend(uri: str, condition: str, timeout: float = 60) -> int:
    """The pid of the one other backend matching ``condition`` (pg_stat_activity)."""
    with psycopg.connect(uri, autocommit=True) as conn:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            rows = conn.execute(f"SELECT pid FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
                                f"AND datname = current_database() AND {condition}").fetchall()
            if len(rows) == 1:
                return rows[0][0]
            time.sleep(0.02)
    raise AssertionError(f"no backend with {condition}")


def in_thread(fn):
    out: dict = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - checked by the caller
            out["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


@pytest.mark.parametrize("method", ["bm25", "dense", "tigrag"])
def test_statement_timeout_during_a_retrieval(database_uri, kb, method):
    expected = [h.provenance.chunk_id for h in kb.retrieve(QUESTION, method=method, k=3)]
    timed = pgrag.connect(with_timeout(database_uri, 300))
    corpus = timed.corpus("cancel")
    _ = corpus.embedder
    with psycopg.connect(database_uri) as blocker:                  # a writer holding the tables
        blocker.execute(f"LOCK TABLE {RETRIEVAL_TABLES} IN ACCESS EXCLUSIVE MODE")
        t0 = time.monotonic()
        with pytest.raises(pgrag.QueryCanceled, match="statement timeout"):
            corpus.retrieve(QUESTION, method=method, k=3)
        assert time.monotonic() - t0 < 30
        blocker.rollback()
    # the same client, the same pool: usable, and the answer is unchanged
    assert [h.provenance.chunk_id for h in corpus.retrieve(QUESTION, method=method, k=3)] == expected
    timed.close()


def test_pg_cancel_backend_during_a_retrieval(database_uri, kb):
    expected = [h.provenance.chunk_id for h in kb.retrieve(QUESTION, method="bm25", k=3)]
    with psycopg.connect(database_uri) as blocker:
        blocker.execute(f"LOCK TABLE {RETRIEVAL_TABLES} IN ACCESS EXCLUSIVE MODE")
        thread, out = in_thread(lambda: kb.retrieve(QUESTION, method="bm25", k=3))
        pid = wait_for_backend(database_uri, "wait_event_type = 'Lock'")
        with psycopg.connect(database_uri, autocommit=True) as admin:
            assert admin.execute("SELECT pg_cancel_backend(%s)", (pid,)).fetchone()[0]
        thread.join(timeout=60)
        blocker.rollback()
    assert isinstance(out.get("error"), pgrag.QueryCanceled), out
    assert "canceling statement due to user request" in str(out["error"])
    assert [h.provenance.chunk_id for h in kb.retrieve(QUESTION, method="bm25", k=3)] == expected


# The ingest batch is held up inside PostgreSQL at the third document's postings
# (after the rows of the first two are written) by a trigger that sleeps.
SLEEPER = """CREATE FUNCTION public.slow_postings() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM pgrag.chunk c JOIN pgrag.document d USING (corpus_id, document_id)
               WHERE c.corpus_id = NEW.corpus_id AND c.chunk_id = NEW.chunk_id AND d.external_id = 'long') THEN
        PERFORM pg_sleep(60);
    END IF;
    RETURN NEW;
END $$"""


@pytest.fixture
def slow_postings(database_uri):
    with psycopg.connect(database_uri, autocommit=True) as conn:
        conn.execute(SLEEPER)
        conn.execute("CREATE TRIGGER slow_postings BEFORE INSERT ON pgrag.chunk_token "
                     "FOR EACH ROW EXECUTE FUNCTION public.slow_postings()")
    yield
    with psycopg.connect(database_uri, autocommit=True) as conn:
        conn.execute("DROP TRIGGER IF EXISTS slow_postings ON pgrag.chunk_token")


def batch(wiki_docs):
    replaced = dict(wiki_docs[0], text="Lothair II ruled Lotharingia. Quokkas appear only in this version.")
    return [replaced, wiki_docs[3], wiki_docs[4]]                    # 'long' is the third


def finish_and_compare(db, database_uri, kb, wiki_docs):
    with psycopg.connect(database_uri, autocommit=True) as conn:
        conn.execute("DROP TRIGGER slow_postings ON pgrag.chunk_token")
    report = kb.ingest(batch(wiki_docs), progress=False)             # the same client completes it
    assert (report.added, report.replaced) == (2, 1)
    fresh = db.corpus("cancel-fresh")
    fresh.ingest([*batch(wiki_docs), *wiki_docs[1:3]], progress=False)
    from tests.integration.test_ingest import statistics

    assert statistics(db, kb.id) == statistics(db, fresh.id)


def test_statement_timeout_during_an_ingest_batch(db, database_uri, kb, wiki_docs, slow_postings):
    before = state(db, kb)
    timed = pgrag.connect(with_timeout(database_uri, 2000))
    corpus = timed.corpus("cancel")
    t0 = time.monotonic()
    with pytest.raises(pgrag.QueryCanceled, match="statement timeout"):
        corpus.ingest(batch(wiki_docs), progress=False)
    assert time.monotonic() - t0 < 50                               # not the trigger's 60 s
    assert state(db, kb) == before                                  # nothing of the batch, the replace undone
    finish_and_compare(db, database_uri, corpus, wiki_docs)
    timed.close()


def test_pg_cancel_backend_during_an_ingest_batch(db, database_uri, kb, wiki_docs, slow_postings):
    before = state(db, kb)
    _ = kb.embedder
    thread, out = in_thread(lambda: kb.ingest(batch(wiki_docs), progress=False))
    pid = wait_for_backend(database_uri, "wait_event = 'PgSleep'")
    with psycopg.connect(database_uri, autocommit=True) as admin:
        assert admin.execute("SELECT pg_cancel_backend(%s)", (pid,)).fetchone()[0]
    thread.join(timeout=60)
    assert isinstance(out.get("error"), pgrag.QueryCanceled), out
    assert state(db, kb) == before
    finish_and_compare(db, database_uri, kb, wiki_docs)
