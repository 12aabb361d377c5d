"""Upgrade of a populated database (issue 18): a corpus stored at each earlier
revision is upgraded to head; the stored rows survive, the tables added later
are back-filled by the documented resumable commands, every SQL function is
head's, and every method retrieves exactly what it retrieves from the same
corpus built at head. Two processes upgrading one database at once serialise on
the migration lock.

The rows at revision R are written as head writes them (copied from a corpus
built at head, for the tables that exist at R): the migrations are what is under
test, not the ingest code of older releases."""

from __future__ import annotations

import os
import subprocess
import sys

import psycopg
import pytest
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from psycopg import sql
from sqlalchemy import create_engine

import pgrag
from pgrag import methods
from pgrag.db import sqlalchemy_url
from pgrag.resources import resource_dir
from pgrag.schema import MIGRATION_LOCK
from tests.conftest import scratch_database
from tests.integration.test_reliability import assert_same, everything

# Several minutes in all: a corpus with triples is built and compared per revision.
pytestmark = pytest.mark.slow


def alembic_config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(resource_dir("migrations")))
    return cfg


HEAD = ScriptDirectory.from_config(alembic_config()).get_current_head()
EARLIER = [rev.revision for rev in ScriptDirectory.from_config(alembic_config()).walk_revisions()
           if rev.revision != HEAD][::-1]
QUESTIONS = ["Who was the mother of Lothair II?", "Where was the performer of Changed It born?",
             "Which river runs through the valley?"]


def migrate_to(uri: str, revision: str) -> None:
    engine = create_engine(sqlalchemy_url(uri))
    cfg = alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
    engine.dispose()


def tables(conn: psycopg.Connection) -> list[str]:
    return [r[0] for r in conn.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'pgrag' "
        "AND table_type = 'BASE TABLE' AND table_name <> 'alembic_version' ORDER BY table_name")]


def copy_corpus(source_uri: str, target_uri: str) -> list[str]:
    """Copy every row of the tables the target has from the source (same columns),
    then move each identity sequence past the copied ids, as the old release's own
    inserts would have. Returns the tables copied."""
    with psycopg.connect(source_uri) as src, psycopg.connect(target_uri) as dst:
        dst.execute("SET session_replication_role = replica")     # foreign keys checked below, not per row
        names = tables(dst)
        for table in names:
            columns = [r[0] for r in dst.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = 'pgrag' "
                "AND table_name = %s AND is_generated = 'NEVER' ORDER BY ordinal_position", (table,))]
            cols = sql.SQL(", ").join(map(sql.Identifier, columns))
            ident = sql.Identifier("pgrag", table)
            with src.cursor().copy(sql.SQL("COPY (SELECT {} FROM {}) TO STDOUT (FORMAT BINARY)")
                                   .format(cols, ident)) as out, \
                    dst.cursor().copy(sql.SQL("COPY {} ({}) FROM STDIN (FORMAT BINARY)").format(ident, cols)) as into:
                for data in out:
                    into.write(data)
            for (column,) in dst.execute("SELECT column_name FROM information_schema.columns WHERE table_schema = "
                                         "'pgrag' AND table_name = %s AND is_identity = 'YES'", (table,)).fetchall():
                dst.execute(sql.SQL("SELECT setval(pg_get_serial_sequence({}, {}), coalesce(max({}), 0) + 1, false) "
                                    "FROM {}").format(sql.Literal(f"pgrag.{table}"), sql.Literal(column),
                                                      sql.Identifier(column), ident))
        dst.execute("SET session_replication_role = origin")
        dst.commit()
    return names


def functions(uri: str) -> dict[str, str]:
    with psycopg.connect(uri) as conn:
        return dict(conn.execute(
            "SELECT p.oid::regprocedure::text, md5(pg_get_functiondef(p.oid)) FROM pg_proc p "
            "WHERE p.pronamespace = 'pgrag'::regnamespace AND p.prokind = 'f'").fetchall())


def results(kb, method: str) -> list[list[tuple]]:
    options = {"llm": False} if methods.takes_option(method, "llm") else {}
    return [[(h.provenance.external_id, h.provenance.chunk_id, round(h.score, 6))
             for h in kb.retrieve(q, method=method, k=4, **options)] for q in QUESTIONS]


def sql_results(uri: str, kb) -> list[list[tuple]]:
    vec = kb.embedder.encode([QUESTIONS[0]])[0]
    out = []
    with psycopg.connect(uri) as conn:
        from pgvector.psycopg import register_vector

        register_vector(conn)
        for stmt in ("SELECT chunk_id, round(score::numeric, 6) FROM pgrag.bm25('up', %(q)s, 5)",
                     "SELECT chunk_id, round(score::numeric, 6) FROM pgrag.dense('up', %(v)s, 5)",
                     "SELECT chunk_id, round(score::numeric, 6) FROM pgrag.hybrid('up', %(q)s, %(v)s, 5)",
                     "SELECT chunk_id, round(score::numeric, 6) FROM pgrag.tigrag('up', %(q)s, %(v)s, k => 5)",
                     "SELECT term, round(score::numeric, 9) "
                     "FROM pgrag.ppr('up', ARRAY['lothair', 'mother'], top => 10)",
                     "SELECT triple_id, round(score::numeric, 6) "
                     "FROM pgrag.propositions('up', %(v)s, unique_chunks => 3)",
                     "SELECT triple_id, round(score::numeric, 6) FROM pgrag.cirag_candidates('up', %(v)s, 2, 5)"):
            out.append(conn.execute(stmt, {"q": QUESTIONS[0], "v": vec}).fetchall())
    return out


@pytest.fixture
def built_at_head(db, database_uri, wiki_docs):
    kb = db.corpus("up", methods=["threadrag"])
    kb.ingest(wiki_docs, progress=False, extract_triples="spacy")
    return kb


def upgrade_in_two_processes(uri: str) -> None:
    cmd = [sys.executable, "-m", "pgrag", "db", "upgrade", "--dsn", uri]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env={**os.environ, "TOKENIZERS_PARALLELISM": "false"}) for _ in range(2)]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    assert all("schema at head" in out for out in outputs), outputs


@pytest.mark.parametrize("revision", EARLIER)
def test_a_populated_database_upgrades_to_head(pg_uri, db, database_uri, built_at_head, revision):
    kb = built_at_head
    with scratch_database(pg_uri, "pgrag_up_") as old_uri:
        migrate_to(old_uri, revision)
        copied = copy_corpus(database_uri, old_uri)
        assert {"corpus", "document", "chunk", "token_edge"} <= set(copied)

        upgrade_in_two_processes(old_uri)                     # both at once: the advisory lock
        with psycopg.connect(old_uri) as conn:
            assert conn.execute("SELECT version_num FROM pgrag.alembic_version").fetchall() == [(HEAD,)]
        assert functions(old_uri) == functions(database_uri)  # every SQL function is head's

        upgraded_db = pgrag.connect(old_uri)
        upgraded = upgraded_db.corpus("up", create=False)
        # 0007: a corpus that had semantic nodes keeps maintaining them; one from
        # before they existed maintains none until the backfill below enables it.
        assert upgraded.families == (("threadrag",) if "semantic_node" in copied else ())
        # Tables added after `revision` are empty; the resumable back-fills fill them.
        extraction = upgraded.extract_triples("spacy", progress=False)
        nodes = upgraded.build_semantic_nodes(progress=False)
        assert (extraction.chunks > 0) == ("triple" not in copied)
        assert (nodes.documents > 0) == ("semantic_node" not in copied)
        assert_same(everything(upgraded_db, upgraded.id), everything(db, kb.id))

        for method in methods.names(variants=False):
            assert results(upgraded, method) == results(kb, method), method
        assert sql_results(old_uri, upgraded) == sql_results(database_uri, kb)
        # and it keeps working: a new document, a delete
        upgraded.ingest([{"id": "new", "text": "Teutberga founded a convent in Lotharingia."}], progress=False)
        assert upgraded.retrieve("Teutberga convent", method="bm25", k=1)[0].provenance.external_id == "new"
        assert upgraded.delete(["new", "minaj"]) == 2
        upgraded_db.close()


def test_the_migration_lock_serialises_upgraders(empty_uri):
    """A migrator holding the lock makes a second one wait, not fail or race."""
    import threading
    import time

    with psycopg.connect(empty_uri) as holder:
        holder.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        done = threading.Event()
        thread = threading.Thread(target=lambda: (pgrag.connect(empty_uri).close(), done.set()))
        thread.start()
        # Waiting on the lock, seen by the server: an advisory lock not granted
        # (connecting and checking the server alone would never show one).
        with psycopg.connect(empty_uri, autocommit=True) as observer:
            deadline = time.monotonic() + 120
            while not observer.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                                       "AND NOT granted").fetchone()[0]:
                assert not done.is_set(), "the second upgrader finished without waiting on the migration lock"
                assert time.monotonic() < deadline, "the second upgrader never waited on the migration lock"
                time.sleep(0.05)
        assert not done.is_set()
        holder.rollback()
    thread.join(timeout=120)
    assert done.is_set()


def test_0007_keeps_threadrag_only_for_corpora_that_have_semantic_nodes(pg_uri, db, database_uri, wiki_docs):
    """Corpora at 0006 all maintained semantic nodes; after 0007 the ones that
    have any keep the family, the others (here: none built) maintain none."""
    db.corpus("with", methods=["threadrag"]).ingest(wiki_docs[:2], progress=False)
    db.corpus("without").ingest(wiki_docs[:2], progress=False)
    db.corpus("empty")
    with scratch_database(pg_uri, "pgrag_up7_") as old_uri:
        migrate_to(old_uri, "0006")
        copy_corpus(database_uri, old_uri)
        migrate_to(old_uri, "head")
        with psycopg.connect(old_uri) as conn:
            families = dict(conn.execute("SELECT name, families FROM pgrag.corpus").fetchall())
    assert families == {"with": ["threadrag"], "without": [], "empty": []}
