"""Operations on a distributed pgrag: upgrading from an earlier revision, and
moving a corpus to the other worker while queries run."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory

import pgrag
from pgrag import distribute, sqlscript
from pgrag.resources import resource_dir, sql_file

from .conftest import SHARDS, strict
from .test_citus import CORPUS_TABLES, _ranked, _same


def _previous_head() -> str:
    cfg = Config()
    cfg.set_main_option("script_location", str(resource_dir("migrations")))
    script = ScriptDirectory.from_config(cfg)
    return str(script.get_revision(script.get_current_head()).down_revision)


@pytest.mark.parametrize("start", ["previous", "0002"])
def test_upgrading_a_distributed_database_distributes_new_tables(citus_cluster, start):
    """A database distributed at an older revision, then `pgrag db upgrade`d:
    the same migrations run (tables they create with foreign keys to distributed
    tables included), and every new table ends up distributed and co-located."""
    revision = _previous_head() if start == "previous" else start
    name = f"pgrag_upgrade_{revision}"
    citus_cluster.drop(name)
    uri = citus_cluster.form(name)
    db = pgrag.Database(uri)
    try:
        cfg = Config()
        cfg.set_main_option("script_location", str(resource_dir("migrations")))
        with db.engine.begin() as sa:
            cfg.attributes["connection"] = sa
            command.upgrade(cfg, revision)
            raw = sa.connection.driver_connection
            # that revision's SQL API, as its upgrade installed it (today's file,
            # bodies not checked against tables that do not exist yet; before 0012
            # the helpers lived in schema pgrag, and 0012 moves them)
            raw.execute("SET LOCAL check_function_bodies = off")
            for name in ("00_search_path.sql", "10_tokenize.sql", "20_index.sql", "30_search.sql",
                         "40_tigrag_sql.sql", "50_triples.sql", "60_roles.sql"):   # what functions.sql held
                sqlscript.run(raw, sql_file(name).replace("pgrag_internal.", "pgrag."))
        before = {t for t, kind, _c, _s in distribute.distribute(db, shard_count=SHARDS)
                  if kind == "distributed by corpus_id"}
        db.upgrade()
        layout = {t: (kind, coloc) for t, kind, coloc, _s in distribute.layout(db)}
        distributed = {t for t, (kind, _c) in layout.items() if kind == "distributed by corpus_id"}
        assert CORPUS_TABLES <= distributed and before <= distributed
        if revision == "0002":
            assert {"semantic_node", "semantic_edge"} <= distributed - before
        assert layout["corpus_acl"][0] == "reference"
        assert len({layout[t][1] for t in distributed}) == 1
        with db.transaction() as conn:
            assert conn.execute("SELECT version_num FROM pgrag.alembic_version").fetchone()[0] != revision
            n_fk = conn.execute("SELECT count(*) FROM pg_constraint WHERE contype = 'f' "
                                "AND connamespace = 'pgrag'::regnamespace").fetchone()[0]
        assert n_fk >= 19                                   # every foreign key survived
        db.close()
        strict_db = pgrag.connect(strict(uri))               # and it works, one worker per statement
        try:
            kb = strict_db.corpus("up")
            kb.ingest([{"id": "a", "title": "Arden", "text": "The river Arden flows to the sea. It is long."}],
                      progress=False)
            assert [h.title for h in kb.retrieve("river Arden", method="hybrid")] == ["Arden"]
            with pytest.raises(pgrag.PgragError, match="foreign key"):   # enforced on the shards
                with strict_db.transaction() as conn:
                    conn.execute("INSERT INTO pgrag.semantic_node (corpus_id, document_id, ordinal, first_sentence,"
                                 " last_sentence, char_start, char_end, text, embedding)"
                                 " VALUES (%s, 999999, 0, 0, 0, 0, 1, 'x', '[1,2,3]')", (kb.id,))
        finally:
            strict_db.close()
    finally:
        db.close()
        citus_cluster.drop(name)


def test_moving_a_corpus_to_the_other_worker_while_queries_run(citus_db, citus_cluster):
    name = "tenant2"
    kb = citus_db.corpus(name)
    questions = ["river Arden2", "King Osric2 daughter", "town of Bel2"]
    vectors = {q: kb.embedder.encode([q])[0] for q in questions}
    expected = {q: _ranked(kb.retrieve(q, method="hybrid")) for q in questions}
    placement = distribute.placement(citus_db, name)
    source = placement[0][3]
    target = next(w.port for w in citus_cluster.workers if w.port != source)
    shard = next(s for t, s, _n, _p in placement if t == "document")

    errors: list[BaseException] = []
    done = threading.Event()
    counts = {"queries": 0}

    def reader() -> None:
        with psycopg.connect(strict(citus_db.dsn), autocommit=True) as conn:
            from pgvector.psycopg import register_vector

            register_vector(conn)
            while not done.is_set():
                for q in questions:
                    try:
                        rows = conn.execute("SELECT title, score FROM pgrag.hybrid(%s, %s, %s, 5)",
                                            (name, q, vectors[q])).fetchall()
                        _same([(t, float(s)) for t, s in rows], expected[q])
                        counts["queries"] += 1
                    except BaseException as error:  # noqa: BLE001 - every failure counts
                        errors.append(error)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        time.sleep(1.0)
        t0 = time.perf_counter()
        with psycopg.connect(citus_db.dsn, autocommit=True) as conn:
            conn.execute("SELECT citus_move_shard_placement(%s, '127.0.0.1', %s, '127.0.0.1', %s)",
                         (shard, source, target))
        moved_in = time.perf_counter() - t0
        time.sleep(1.0)
    finally:
        done.set()
        for t in threads:
            t.join()
    assert not errors, errors[:3]
    assert counts["queries"] > 10
    assert {p for _t, _s, _n, p in distribute.placement(citus_db, name)} == {target}
    for q in questions:                                          # results unchanged after the move
        _same(_ranked(citus_db.corpus(name).retrieve(q, method="hybrid")), expected[q])
    print(f"shard group of {name} moved {source} -> {target} in {moved_in:.2f} s, "
          f"{counts['queries']} queries during the test, 0 errors")
