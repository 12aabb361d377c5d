"""Corpora that follow an application table (issue 16): attach validates and
changes nothing on a bad call; triggers enqueue in the application's
transaction (nothing on rollback, nothing for a non-attached column); any
interleaving of application writes and processing ends equal to a fresh build
from the table; failing rows are retried with backoff, parked, re-queueable;
two workers with concurrent writes lose and duplicate nothing; the worker wakes
on NOTIFY without polling; a SIGKILLed worker loses nothing; the application
role needs no rights on pgrag tables."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import datetime

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql

import pgrag
from pgrag import follow
from tests.integration.test_reliability import VERSIONS, assert_same, everything
from tests.integration.test_roles import as_role, make_role  # noqa: F401 - fixture

TABLE_DDL = """CREATE TABLE {} (id integer PRIMARY KEY, title text, body text, author text,
                                views integer NOT NULL DEFAULT 0)"""


def text(i: int, v: int) -> str:
    return VERSIONS[i % len(VERSIONS)][v % 3]


@pytest.fixture
def app(database_uri: str) -> Iterator[psycopg.Connection]:
    """The application's connection (autocommit) and its table app.articles."""
    with psycopg.connect(database_uri, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA IF NOT EXISTS app")
        conn.execute(sql.SQL(TABLE_DDL).format(sql.Identifier("app", "articles")))
        yield conn


def put(conn: psycopg.Connection, table: str, i: int, v: int, *, title: str | None = None) -> None:
    conn.execute(sql.SQL("INSERT INTO {} (id, title, body, author) VALUES (%s, %s, %s, %s)").format(
        sql.Identifier("app", table)), (i, title or f"Document {i}", text(i, v), f"author{i}"))


def source_docs(conn: psycopg.Connection, table: str) -> list[dict]:
    """What a fresh build of the corpus would ingest: every row with text."""
    rows = conn.execute(sql.SQL(
        "SELECT id::text, coalesce(title, ''), body, author FROM {} WHERE body IS NOT NULL ORDER BY id").format(
        sql.Identifier("app", table))).fetchall()
    return [{"id": i, "title": t, "text": b, "metadata": {"author": a}} for i, t, b, a in rows]


def metadata(db: pgrag.Database, corpus_id: int) -> list[tuple]:
    with db.transaction() as conn:
        return sorted(conn.execute("SELECT external_id, metadata::text FROM pgrag.document WHERE corpus_id = %s",
                                   (corpus_id,)).fetchall())


def server_clock(db: pgrag.Database) -> "datetime":
    with db.transaction() as conn:
        return conn.execute("SELECT clock_timestamp()").fetchone()[0]


def queue(db: pgrag.Database) -> list[tuple]:
    with db.transaction() as conn:
        return conn.execute("SELECT source_key, op, attempts, parked_at IS NOT NULL, last_error "
                            "FROM pgrag.follow_queue ORDER BY item_id").fetchall()


def assert_equals_rebuild(db: pgrag.Database, kb: pgrag.Corpus, docs: list[dict], *, triples: bool = False,
                          methods: tuple[str, ...] = ()) -> None:
    fresh_name = f"{kb.name}-fresh-{uuid.uuid4().hex[:6]}"
    fresh = db.corpus(fresh_name, methods=methods)
    if docs:
        fresh.ingest(docs, progress=False, extract_triples="spacy" if triples else False)
    assert metadata(db, kb.id) == metadata(db, fresh.id)
    assert_same(everything(db, kb.id), everything(db, fresh.id))
    db.drop_corpus(fresh_name)


def attach(db: pgrag.Database, corpus: str = "wiki", table: str = "app.articles", **options) -> int:
    return db.attach(corpus, table, id_column="id", text_column="body", title_column="title",
                     metadata_columns=["author"], **options)


# -- the basic flow -------------------------------------------------------------

# the client home is the slower and the one most other tests here cover: `make test` runs it
@pytest.mark.parametrize("home", [pytest.param("client", marks=pytest.mark.slow), "server"])
def test_an_attachment_with_triples_gets_them_in_both_homes(db, app, home):
    """kb.sync() in a client and pgrag.index() in the server do the same work:
    the queue, then the triples the attachment asks for (follow.sync)."""
    for i in range(3):
        put(app, "articles", i, 0)
    attach(db, triples="spacy")
    kb = db.corpus("wiki", create=False)
    if home == "client":
        kb.sync()
    else:
        report = app.execute("SELECT pgrag.index('wiki')").fetchone()[0]
        assert sum(b["indexed"] for b in report["queue"]) == 3, report
    assert queue(db) == []
    assert db.fetch_row("has_triples", {"corpus_id": kb.id})[0]
    assert_equals_rebuild(db, kb, source_docs(app, "articles"), triples=True)


def test_attach_queues_existing_rows_and_processing_follows_every_change(db, app):
    put(app, "articles", 1, 0)
    put(app, "articles", 2, 0)
    assert attach(db) == 2
    kb = db.corpus("wiki", create=False)
    [st_] = db.sync_status()
    assert (st_.corpus, st_.source, st_.pending, st_.parked) == ("wiki", "app.articles", 2, 0)
    kb.sync()
    assert queue(db) == []
    assert {h.provenance.external_id for h in kb.retrieve("Lothair Lotharingia", method="bm25")} >= {"1"}
    app.execute("UPDATE app.articles SET body = %s WHERE id = 1", (text(1, 1),))
    app.execute("INSERT INTO app.articles (id, title, body, author) VALUES (3, 'Three', %s, 'x')", (text(2, 1),))
    app.execute("DELETE FROM app.articles WHERE id = 2")
    assert [(k, op) for k, op, *_ in queue(db)] == [("1", "update"), ("3", "insert"), ("2", "delete")]
    kb.sync()
    hits = kb.retrieve("daughter of Hugh of Tours", method="bm25", k=1)
    assert hits[0].provenance.external_id == "1" and "Hugh of Tours" in hits[0].text
    [st_] = db.sync_status()
    assert (st_.pending, st_.in_progress, st_.parked, st_.lag_seconds) == (0, 0, 0, 0.0)
    assert st_.last_processed_at is not None
    assert_equals_rebuild(db, kb, source_docs(app, "articles"))


def test_a_rolled_back_application_transaction_enqueues_nothing(db, app):
    attach(db)
    with pytest.raises(RuntimeError):
        with app.transaction():
            put(app, "articles", 1, 0)
            app.execute("UPDATE app.articles SET body = 'changed' WHERE id = 1")
            raise RuntimeError("the application gives up")
    assert queue(db) == []
    put(app, "articles", 1, 0)
    assert len(queue(db)) == 1


def test_an_update_of_non_attached_columns_enqueues_nothing(db, app):
    put(app, "articles", 1, 0)
    attach(db)
    db.corpus("wiki", create=False).sync()
    app.execute("UPDATE app.articles SET views = views + 1")                 # not attached
    app.execute("UPDATE app.articles SET body = body, author = author")      # attached, unchanged
    assert queue(db) == []
    app.execute("UPDATE app.articles SET author = 'someone else'")          # a metadata column
    assert [(k, op) for k, op, *_ in queue(db)] == [("1", "update")]


def test_an_id_change_and_a_truncate_are_followed(db, app):
    for i in range(3):
        put(app, "articles", i, 0)
    attach(db)
    kb = db.corpus("wiki", create=False)
    kb.sync()
    app.execute("UPDATE app.articles SET id = 10 WHERE id = 0")
    kb.sync()
    assert_equals_rebuild(db, kb, source_docs(app, "articles"))
    app.execute("TRUNCATE app.articles")
    kb.sync()
    assert pgrag_count(db, kb.id) == 0


def pgrag_count(db: pgrag.Database, corpus_id: int) -> int:
    with db.transaction() as conn:
        return conn.execute("SELECT count(*) FROM pgrag.document WHERE corpus_id = %s", (corpus_id,)).fetchone()[0]


BAD_ATTACH = [
    (dict(table="app.missing"), "table app.missing does not exist"),
    (dict(table="app.articles_view"), "is not a table"),
    (dict(table="pgrag.document"), "not a system or pgrag table"),
    (dict(table="a.b.c"), "is not a table name"),
    (dict(id_column="nope"), "id_column nope: table app.articles has no such column"),
    (dict(id_column="author"), "is not unique"),
    (dict(id_column="created"), "must be text, varchar, smallint, integer, bigint or uuid"),
    (dict(text_column="views"), "text_column views is integer; it must be text"),
    (dict(title_column="views"), "title_column views is integer"),
    (dict(metadata_columns=["author", "missing"]), "metadata column missing: table app.articles has no such column"),
    (dict(metadata_columns=["author", "author"]), "named twice"),
    (dict(triples="openie"), "triples must be NULL, 'spacy' or 'llm'"),
    (dict(text_column='body"; DROP TABLE app.articles; --'), "has no such column"),
]


@pytest.mark.parametrize("change,message", BAD_ATTACH, ids=[m for _, m in BAD_ATTACH])
def test_a_bad_attach_call_gets_a_clear_error_and_changes_nothing(db, app, change, message):
    app.execute("ALTER TABLE app.articles ADD COLUMN created timestamptz DEFAULT now()")
    app.execute("CREATE VIEW app.articles_view AS SELECT * FROM app.articles")
    put(app, "articles", 1, 0)
    args = dict(table="app.articles", id_column="id", text_column="body", title_column="title",
                metadata_columns=["author"], triples=None) | change
    with pytest.raises(pgrag.AttachError, match=message.replace("(", r"\(").replace(".", r"\.")):
        db.attach("wiki", args.pop("table"), **args)
    assert db.corpora() == []
    assert queue(db) == []
    assert app.execute("SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'pgrag_follow%'").fetchone() == (0,)
    assert app.execute("SELECT count(*) FROM app.articles").fetchone() == (1,)


def test_attaching_a_corpus_twice_is_refused_and_detach_removes_everything(db, app):
    put(app, "articles", 1, 0)
    attach(db)
    with pytest.raises(pgrag.AttachError, match="already follows app.articles"):
        attach(db)
    db.corpus("wiki", create=False).sync()
    db.detach("wiki")
    assert app.execute("SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'pgrag_follow%'").fetchone() == (0,)
    put(app, "articles", 2, 0)
    assert queue(db) == [] and db.sync_status() == []
    assert [r["documents"] for r in db.corpora()] == [1]           # the corpus stays
    with pytest.raises(pgrag.AttachError, match="not attached"):
        db.detach("wiki")
    attach(db)                                                       # again: both rows queued
    assert sorted(k for k, *_ in queue(db)) == ["1", "1", "2"]
    db.detach("wiki", drop_corpus=True)
    assert db.corpora() == []
    attach(db)
    db.drop_corpus("wiki")                          # dropping an attached corpus detaches it
    assert app.execute("SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'pgrag_follow%'").fetchone() == (0,)
    assert queue(db) == [] and db.sync_status() == []


# -- exactness --------------------------------------------------------------------

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("insert"), st.integers(0, 5), st.integers(0, 2)),
        st.tuples(st.just("body"), st.integers(0, 5), st.integers(0, 2)),
        st.tuples(st.just("title"), st.integers(0, 5), st.integers(0, 2)),
        st.tuples(st.just("author"), st.integers(0, 5), st.integers(0, 2)),
        st.tuples(st.just("views"), st.integers(0, 5), st.integers(0, 2)),      # not attached
        st.tuples(st.just("null_body"), st.integers(0, 5), st.integers(0, 2)),  # no text: not indexed
        st.tuples(st.just("delete"), st.integers(0, 5), st.integers(0, 2)),
        st.tuples(st.just("reinsert"), st.integers(0, 5), st.integers(0, 2)),   # delete, then insert the id
        st.tuples(st.just("rekey"), st.integers(0, 5), st.integers(6, 8)),       # UPDATE id
        st.tuples(st.just("process"), st.integers(1, 4), st.integers(0, 2)),    # one worker batch
    ),
    min_size=1, max_size=12)


def apply(conn: psycopg.Connection, table: str, op: str, i: int, v: int) -> None:
    t = sql.Identifier("app", table)
    if op == "insert":
        conn.execute(sql.SQL("INSERT INTO {} (id, title, body, author) VALUES (%s, %s, %s, %s) "
                             "ON CONFLICT (id) DO NOTHING").format(t), (i, f"Document {i}", text(i, v), "a"))
    elif op == "body":
        conn.execute(sql.SQL("UPDATE {} SET body = %s WHERE id = %s").format(t), (text(i, v), i))
    elif op == "title":
        conn.execute(sql.SQL("UPDATE {} SET title = %s WHERE id = %s").format(t), (f"Title {v}", i))
    elif op == "author":
        conn.execute(sql.SQL("UPDATE {} SET author = %s WHERE id = %s").format(t), (f"author{v}", i))
    elif op == "views":
        conn.execute(sql.SQL("UPDATE {} SET views = views + 1 WHERE id = %s").format(t), (i,))
    elif op == "null_body":
        conn.execute(sql.SQL("UPDATE {} SET body = NULL WHERE id = %s").format(t), (i,))
    elif op == "delete":
        conn.execute(sql.SQL("DELETE FROM {} WHERE id = %s").format(t), (i,))
    elif op == "reinsert":
        with conn.transaction():
            conn.execute(sql.SQL("DELETE FROM {} WHERE id = %s").format(t), (i,))
            conn.execute(sql.SQL("INSERT INTO {} (id, title, body, author) VALUES (%s, %s, %s, %s)").format(t),
                         (i, f"Document {i}", text(i, v), "b"))
    elif op == "rekey":
        conn.execute(sql.SQL("UPDATE {} SET id = %s WHERE id = %s AND NOT EXISTS "
                             "(SELECT 1 FROM {} WHERE id = %s)").format(t, t), (v, i, v))


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS, initial=st.lists(st.integers(0, 5), max_size=3, unique=True))
def test_any_interleaving_of_writes_and_processing_equals_a_fresh_build(db, app, ops, initial):
    table = f"t_{uuid.uuid4().hex[:8]}"
    app.execute(sql.SQL(TABLE_DDL).format(sql.Identifier("app", table)))
    for i in initial:
        put(app, table, i, 0)
    name = f"follow-{table}"
    attach(db, name, f"app.{table}", triples="spacy")
    kb = db.corpus(name, create=False)
    for op, i, v in ops:
        if op == "process":
            follow.process_batch(db, kb.info, embedder=kb.embedder, spacy_model=kb.settings.spacy_model, limit=i)
        else:
            apply(app, table, op, i, v)
    kb.sync()
    assert queue(db) == []
    assert_equals_rebuild(db, kb, source_docs(app, table), triples=True)
    db.detach(name, drop_corpus=True)
    app.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier("app", table)))


# -- faults -----------------------------------------------------------------------

class FailingEmbedder:
    """The real embedder, failing on texts that contain a marker (a model error)."""

    def __init__(self, inner, marker: str) -> None:
        self.inner, self.marker = inner, marker
        self.name, self.dim = inner.name, inner.dim

    def encode(self, texts, *, batch_size: int = 32):
        if any(self.marker in t for t in texts):
            raise RuntimeError("model error: cannot embed this")
        return self.inner.encode(texts, batch_size=batch_size)


def test_failing_items_are_retried_with_backoff_then_parked_and_can_be_requeued(db, app):
    put(app, "articles", 1, 0)
    put(app, "articles", 2, 0)
    app.execute("INSERT INTO app.articles (id, title, body) VALUES (3, 'Blank', '   ')")       # bad text
    app.execute("INSERT INTO app.articles (id, title, body) VALUES (4, 'Boom', 'EXPLODE here. Again.')")
    attach(db, max_attempts=3, retry_seconds=0.5)
    kb = db.corpus("wiki", create=False)
    embedder = FailingEmbedder(kb.embedder, "EXPLODE")

    def run() -> list[follow.BatchReport]:
        return follow.process_queue(db, kb.info, embedder=embedder, spacy_model=kb.settings.spacy_model)

    def timed_run() -> tuple[list[follow.BatchReport], dict[str, tuple[int, float, float]]]:
        """run(), and each waiting key's attempts and its retry delay as bounds:
        run_after minus the server's clock just after and just before the run
        (exact however slow the machine: no window of wall time is assumed)."""
        before = server_clock(db)
        reports = run()
        after = server_clock(db)
        with db.transaction() as conn:
            rows = conn.execute("SELECT source_key, attempts, run_after FROM pgrag.follow_queue "
                                "WHERE run_after IS NOT NULL ORDER BY source_key").fetchall()
        return reports, {k: (a, (r - after).total_seconds(), (r - before).total_seconds()) for k, a, r in rows}

    [first], delays = timed_run()
    assert (first.indexed, first.failed, first.parked) == (2, 2, 0)        # the rest went on
    assert list(delays) == ["3", "4"] and all(lo <= 0.5 <= hi for _, lo, hi in delays.values()), delays
    assert run() == []                                                     # not due yet: nothing taken
    [st_] = db.sync_status()
    assert (st_.pending, st_.retrying, st_.parked) == (2, 2, 0)
    time.sleep(0.55)
    _, delays = timed_run()
    assert list(delays) == ["3", "4"] and all(a == 2 and lo <= 1.0 <= hi for a, lo, hi in delays.values()), \
        delays                                                             # doubled
    time.sleep(1.05)
    run()
    assert sorted((k, a, p) for k, _, a, p, _ in queue(db)) == [("3", 3, True), ("4", 3, True)]
    [st_] = db.sync_status()
    assert (st_.pending, st_.parked) == (0, 2) and st_.last_error
    errors = {p["key"]: p["error"] for p in follow.parked(db, "wiki")}
    assert "no text" in errors["3"] and "model error" in errors["4"]
    time.sleep(2.1)
    assert run() == []                                                     # parked stays parked
    # Re-queue: the model is fixed; the blank row still fails and goes back to waiting.
    assert follow.requeue(db, "wiki") == 2
    [r] = follow.process_queue(db, kb.info, embedder=kb.embedder, spacy_model=kb.settings.spacy_model)
    assert (r.indexed, r.failed) == (1, 1)
    # The application fixes the row: its new item settles the parked one too.
    app.execute("UPDATE app.articles SET body = 'Now there is text. It is fine.' WHERE id = 3")
    kb.sync()
    assert queue(db) == []
    assert_equals_rebuild(db, kb, source_docs(app, "articles"))


@pytest.mark.slow
def test_two_workers_and_concurrent_writes_lose_and_duplicate_nothing(db, app, database_uri):
    seconds = float(os.environ.get("FOLLOW_TEST_SECONDS", "15"))
    # Audit every item the triggers enqueue (test instrumentation on a scratch database).
    app.execute("CREATE TABLE public.enqueued (item_id bigint PRIMARY KEY)")
    app.execute("""CREATE FUNCTION public.audit_enqueue() RETURNS trigger LANGUAGE plpgsql AS $$
                   BEGIN INSERT INTO public.enqueued VALUES (NEW.item_id); RETURN NULL; END $$""")
    app.execute("CREATE TRIGGER audit AFTER INSERT ON pgrag.follow_queue FOR EACH ROW "
                "EXECUTE FUNCTION public.audit_enqueue()")
    for i in range(4):
        put(app, "articles", i, 0)
    attach(db)
    dbs = [pgrag.connect(database_uri) for _ in range(2)]
    workers = [follow.Worker(d, corpus="wiki", batch_size=3, idle_seconds=30) for d in dbs]
    errors: list[BaseException] = []
    stop = threading.Event()

    def write() -> None:
        rng = random.Random(16)
        ops = ["insert", "body", "title", "author", "views", "delete", "reinsert", "null_body"]
        try:
            with psycopg.connect(database_uri, autocommit=True) as conn:
                while not stop.is_set():
                    apply(conn, "articles", rng.choice(ops), rng.randrange(8), rng.randrange(3))
                    time.sleep(rng.uniform(0.0, 0.05))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    writer = threading.Thread(target=write)
    with follow.running(workers[0]), follow.running(workers[1]):
        writer.start()
        time.sleep(seconds)
        stop.set()
        writer.join(timeout=30)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and (queue(db) or not all(w.idle.is_set() for w in workers)):
            time.sleep(0.5)
    assert errors == []
    assert queue(db) == []
    done = [i for w in workers for i in w.report.done_item_ids]
    assert all(w.report.batches > 0 for w in workers)
    assert len(done) == len(set(done))                                     # nothing processed twice
    enqueued = [r[0] for r in app.execute("SELECT item_id FROM public.enqueued").fetchall()]
    assert sorted(done) == sorted(enqueued)                                # nothing lost
    for d in dbs:
        d.close()
    assert_equals_rebuild(db, db.corpus("wiki", create=False), source_docs(app, "articles"))


class PausingEmbedder:
    """The real embedder, pausing on its first call until told to go on: holds a
    worker between reading its rows and taking the write lock."""

    def __init__(self, inner) -> None:
        self.inner, self.name, self.dim = inner, inner.name, inner.dim
        self.reached, self.go = threading.Event(), threading.Event()

    def encode(self, texts, *, batch_size: int = 32):
        if not self.reached.is_set():
            self.reached.set()
            assert self.go.wait(120)
        return self.inner.encode(texts, batch_size=batch_size)


def test_a_row_changed_while_a_worker_prepares_it_is_not_overwritten_with_the_old_text(db, app):
    """Worker A reads version 0 and is held while embedding; the application writes
    version 1 and worker B indexes it; A must not then write version 0 over it."""
    put(app, "articles", 1, 0)
    attach(db)
    kb = db.corpus("wiki", create=False)
    slow = PausingEmbedder(kb.embedder)
    result: list = []
    a = threading.Thread(target=lambda: result.append(follow.process_batch(
        db, kb.info, embedder=slow, spacy_model=kb.settings.spacy_model)))
    a.start()
    assert slow.reached.wait(120)
    app.execute("UPDATE app.articles SET body = %s WHERE id = 1", (text(1, 1),))
    b = follow.process_batch(db, kb.info, embedder=kb.embedder, spacy_model=kb.settings.spacy_model)
    assert b is not None and b.indexed == 1
    slow.go.set()
    a.join(timeout=120)
    kb.sync()
    assert queue(db) == []
    assert_equals_rebuild(db, kb, source_docs(app, "articles"))   # version 1, not 0
    assert result[0].stale == 1 and result[0].indexed == 0        # A saw the change under the lock


def test_the_worker_sleeps_until_notified(db, app, database_uri):
    attach(db)
    other = pgrag.connect(database_uri)
    worker = follow.Worker(other, corpus="wiki", idle_seconds=300)
    with follow.running(worker):
        assert worker.idle.wait(60)
        time.sleep(2.0)
        assert worker.report.wakeups == 0 and worker.report.batches == 0   # no polling while idle
        put(app, "articles", 1, 0)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and worker.report.items == 0:
            time.sleep(0.1)
        assert worker.report.items == 1 and worker.report.wakeups == 1
    other.close()
    hits = db.corpus("wiki", create=False).retrieve("Lothair", method="bm25")
    assert [h.provenance.external_id for h in hits] == ["1"]


@pytest.mark.slow
def test_a_sigkilled_worker_loses_nothing(db, app, database_uri):
    for i in range(24):
        put(app, "articles", i, i)
    attach(db)
    cmd = [sys.executable, "-m", "pgrag", "worker", "--dsn", database_uri, "--corpus", "wiki",
           "--batch-size", "2", "--no-progress"]
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    with subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env) as proc:
        assert proc.stderr is not None
        assert json.loads(proc.stderr.readline())["event"] == "start"
        assert json.loads(proc.stderr.readline())["event"] == "batch"        # one batch committed
        time.sleep(random.Random(3).uniform(0.0, 0.3))                          # somewhere in a later batch
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    left = queue(db)
    assert 0 < len(left) < 24
    state = everything(db, db.corpus("wiki", create=False).id)
    assert all(indexed for *_, indexed in state["documents"])               # whole documents only
    out = subprocess.run(cmd + ["--once"], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr
    assert queue(db) == []
    assert_equals_rebuild(db, db.corpus("wiki", create=False), source_docs(app, "articles"))


# -- roles ------------------------------------------------------------------------

def test_the_application_needs_no_rights_on_pgrag_and_the_worker_runs_as_a_writer(db, app, database_uri,
                                                                                  make_role):  # noqa: F811
    app_role, worker_role, other_role = make_role("app"), make_role("worker"), make_role("other")
    for stmt in ("GRANT USAGE ON SCHEMA app TO {}", "GRANT SELECT, INSERT, UPDATE, DELETE ON app.articles TO {}"):
        app.execute(sql.SQL(stmt).format(sql.Identifier(app_role)))
    attach(db)
    db.grant_writer(worker_role)
    db.grant_corpus(worker_role, "wiki")
    db.grant_reader(other_role)
    db.enable_tenant_isolation()
    for stmt in ("GRANT USAGE ON SCHEMA app TO {}", "GRANT SELECT ON app.articles TO {}"):
        app.execute(sql.SQL(stmt).format(sql.Identifier(worker_role)))
    with psycopg.connect(as_role(database_uri, app_role), autocommit=True) as conn:
        put(conn, "articles", 1, 0)
        conn.execute("UPDATE app.articles SET body = %s WHERE id = 1", (text(1, 1),))
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT * FROM pgrag.follow_queue")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT pgrag_internal.follow_enqueue()")
    assert len(queue(db)) == 2
    with psycopg.connect(as_role(database_uri, other_role)) as conn:                 # not granted: sees nothing
        assert conn.execute("SELECT count(*) FROM pgrag.sync_status").fetchone() == (0,)
    as_worker = pgrag.connect(as_role(database_uri, worker_role))
    assert [(s.corpus, s.pending) for s in as_worker.sync_status()] == [("wiki", 2)]   # its corpus only
    # Ingest's COPY cannot run under row-level security (PostgreSQL refuses COPY
    # FROM into a table with policies), so writing happens with isolation off.
    db.disable_tenant_isolation()
    reports = as_worker.corpus("wiki", create=False).sync()
    assert sum(r.indexed for r in reports) == 1
    [st_] = as_worker.sync_status()
    assert st_.pending == 0
    as_worker.close()
    assert_equals_rebuild(db, db.corpus("wiki", create=False), source_docs(app, "articles"))


# -- command line -----------------------------------------------------------------

def test_the_commands_attach_process_report_requeue_and_detach(db, app, database_uri):
    from click.testing import CliRunner

    from pgrag.cli import main

    def run(*args: str):
        return CliRunner().invoke(main, [*args, "--dsn", database_uri], catch_exceptions=False)

    put(app, "articles", 1, 0)
    app.execute("INSERT INTO app.articles (id, title, body) VALUES (2, 'Blank', '')")
    result = run("attach", "wiki", "app.articles", "--id-column", "id", "--text-column", "body",
                 "--title-column", "title", "--metadata-column", "author", "--max-attempts", "1")
    assert result.exit_code == 0 and "2 rows queued" in result.output, result.output
    result = run("attach", "other", "app.articles", "--id-column", "nope", "--text-column", "body")
    assert result.exit_code == 1 and "id_column nope: table app.articles has no such column" in result.output
    result = run("worker", "--corpus", "wiki", "--once", "--no-progress")
    assert result.exit_code == 0, result.output
    events = [json.loads(line) for line in result.output.splitlines() if line.startswith("{")]
    assert events[0]["event"] == "start" and events[-1] == {
        "event": "stop", "batches": 1, "items": 2, "indexed": 1, "deleted": 0, "failed": 1, "parked": 1}
    [status] = json.loads(run("status", "--json").stdout)
    assert (status["corpus"], status["pending"], status["parked"]) == ("wiki", 0, 1)
    assert "no text" in status["last_error"]
    assert "1 parked" in run("status").output
    assert "1 item(s) re-queued" in run("requeue", "wiki").output
    assert run("detach", "wiki", "--drop-corpus").exit_code == 0
    assert db.corpora() == [] and "no attached corpora" in run("status").output


def test_a_followed_corpus_with_threadrag_maintains_its_nodes_in_both_workers(db, app):
    """Enabled on an attached corpus: the Python worker and pgrag.index() in the
    server build the nodes of what they index, equal to a fresh build."""
    put(app, "articles", 1, 0)
    put(app, "articles", 2, 0)
    attach(db)
    kb = db.corpus("wiki", create=False)
    kb.enable("threadrag", progress=False)
    kb.sync()
    app.execute("UPDATE app.articles SET body = %s WHERE id = 1", (text(1, 1),))
    put(app, "articles", 3, 1)
    assert app.execute("SELECT pgrag.index('wiki')").fetchone()[0]["queue"][0]["ingest"]["nodes"] > 0
    with db.transaction() as conn:
        assert conn.execute("SELECT count(DISTINCT document_id) FROM pgrag.semantic_node WHERE corpus_id = %s",
                            (kb.id,)).fetchone() == (3,)
    assert_equals_rebuild(db, kb, source_docs(app, "articles"), methods=("threadrag",))


def test_pgrag_index_in_the_server_processes_the_queue(db, app):
    """SELECT pgrag.index(corpus) runs the worker's code inside PostgreSQL (SPI):
    the application needs nothing but SQL to keep its corpus in sync."""
    put(app, "articles", 1, 0)
    put(app, "articles", 2, 0)
    attach(db)
    app.execute("UPDATE app.articles SET body = %s WHERE id = 1", (text(1, 1),))
    app.execute("DELETE FROM app.articles WHERE id = 2")
    put(app, "articles", 3, 1)
    report = app.execute("SELECT pgrag.index('wiki')").fetchone()[0]
    assert sum(b["items"] for b in report["queue"]) == 5      # 2 attached rows, then 3 changes
    assert queue(db) == []
    kb = db.corpus("wiki", create=False)
    assert sorted(r[0] for r in metadata(db, kb.id)) == ["1", "3"]
    assert_equals_rebuild(db, kb, source_docs(app, "articles"))
    assert app.execute("SELECT pgrag.index('wiki')").fetchone()[0]["queue"] == []
