"""Statements that stand alone (``Database.fetchall`` / ``fetchone``) run on one
autocommit connection per thread: no transaction stays open between them, a
connection the server closed is replaced before the next statement, and
``close`` ends every one of them."""

from __future__ import annotations

import threading
import time

import psycopg

import pgrag

TEXT = "Who was the mother of Lothair II?"


def readers(admin: psycopg.Connection) -> list[tuple[int, str]]:
    """(pid, state) of the backends whose last statement was pgrag's tokenize query."""
    return admin.execute(
        "SELECT pid, state FROM pg_stat_activity WHERE datname = current_database() "
        "AND pid <> pg_backend_pid() AND query LIKE 'SELECT pgrag.tokenize(%%' ORDER BY pid").fetchall()


def wait_for(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_statements_reuse_one_connection_and_leave_no_transaction_open(database_uri):
    db = pgrag.connect(database_uri)
    with psycopg.connect(database_uri, autocommit=True) as admin:
        for _ in range(3):
            assert "lothair" in db.fetch_row("tokenize", {"text": TEXT})[0]
        # one backend for the three, idle (not "idle in transaction"), so it holds no snapshot or lock
        assert [state for _, state in readers(admin)] == ["idle"]
    db.close()


def test_a_connection_the_server_closed_is_replaced_at_once(database_uri):
    db = pgrag.connect(database_uri)
    with psycopg.connect(database_uri, autocommit=True) as admin:
        db.fetch_row("tokenize", {"text": TEXT})
        [(pid, _)] = readers(admin)
        assert admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,)).fetchone()[0]
        # the very next statement, with no pause for a pool to notice
        assert "lothair" in db.fetch_row("tokenize", {"text": TEXT})[0]
        assert [p for p, _ in readers(admin)] != [pid]
    db.close()


def test_a_thread_reads_on_its_own_connection_and_close_ends_them_all(database_uri):
    db = pgrag.connect(database_uri)
    with psycopg.connect(database_uri, autocommit=True) as admin:
        db.fetch_row("tokenize", {"text": TEXT})
        errors: list[BaseException] = []

        def read() -> None:
            try:
                db.fetch_row("tokenize", {"text": TEXT})
            except BaseException as error:  # noqa: BLE001 - asserted below
                errors.append(error)

        threads = [threading.Thread(target=read) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        # the two threads read on connections of their own, closed when the threads ended
        wait_for(lambda: len(readers(admin)) == 1)
        db.close()
        wait_for(lambda: readers(admin) == [])
        assert "lothair" in db.fetch_row("tokenize", {"text": TEXT})[0]   # and a closed Database reopens one
    db.close()


def test_embeddings_read_in_binary_equal_their_text(db, wiki_docs):
    """Statements marked ``-- results: binary`` (pgrag.queries) return the
    vectors the text format gives, and every other column unchanged."""
    import numpy as np

    from pgrag.queries import query
    from pgrag.semantic import as_array

    kb = db.corpus("binary", methods=["threadrag"])
    kb.ingest(wiki_docs[:3], progress=False)
    for name, params in [("chunk_vectors", {"corpus_id": kb.id, "chunk_ids": None}),
                         ("threadrag_nodes", {"corpus_id": kb.id, "document_ids": [1, 2, 3],
                                              "labels": ["PERSON", "GPE"]})]:
        fast = db.fetchall(name, params)
        with db.transaction() as conn:
            text = conn.execute(query(name), params, binary=False).fetchall()
        assert len(fast) == len(text) > 0
        for a, b in zip(fast, text):
            vector = next(i for i, v in enumerate(b) if hasattr(v, "to_numpy"))
            assert np.array_equal(as_array(a[vector]), as_array(b[vector]))
            assert [v for i, v in enumerate(a) if i != vector] == [v for i, v in enumerate(b) if i != vector]
