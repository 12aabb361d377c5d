"""One change check for every way documents arrive (issue 46): client ingest
(``kb.ingest``), documents written in the tables then indexed (``kb.index``,
what SQL's ``pgrag.index`` runs: ``index_pending``) and the follow worker
(``kb.sync``: ``follow.process_batch``) give identical tables after every edit
of the same sequence: inserts, body changes, metadata-only changes, unchanged
re-ingests and deletes. Identical includes the work done: the graph version and
the log of removed chunks differ if one path re-indexes a document the others
skip."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from psycopg import sql
from psycopg.types.json import Jsonb

import pgrag
from tests.integration.test_follow import metadata
from tests.integration.test_reliability import VERSIONS, assert_same, everything

TABLE_DDL = "CREATE TABLE {} (id text PRIMARY KEY, title text, body text, author text)"

# (op, document, version, author): "put" writes document i at version v by author a
# (an insert, a body change, a metadata-only change or an unchanged re-ingest,
# depending on what is stored); "delete" removes it.
PUT = st.tuples(st.just("put"), st.integers(0, 2), st.integers(0, 2), st.integers(0, 1))
DELETE = st.tuples(st.just("delete"), st.integers(0, 2), st.just(0), st.just(0))
OPS = st.lists(st.one_of(PUT, DELETE), min_size=1, max_size=5)

EVERY_KIND = [("put", 0, 0, 0),     # insert
              ("put", 1, 1, 0),     # insert
              ("put", 0, 1, 0),     # change the body
              ("put", 0, 1, 1),     # change only the metadata
              ("put", 1, 1, 0),     # unchanged re-ingest
              ("delete", 0, 0, 0)]  # delete


def document(i: int, v: int, a: int) -> dict[str, Any]:
    return {"id": f"d{i}", "title": f"Document {i}", "text": VERSIONS[i][v], "metadata": {"author": f"a{a}"}}


class Paths:
    """The three corpora, one for each way in, each maintaining the threadrag family."""

    def __init__(self, db: pgrag.Database, app: psycopg.Connection) -> None:
        suffix = uuid.uuid4().hex[:8]
        self.db, self.app, self.table = db, app, sql.Identifier("app", f"t_{suffix}")
        app.execute(sql.SQL(TABLE_DDL).format(self.table))
        db.attach(f"follow-{suffix}", f"app.t_{suffix}", id_column="id", text_column="body",
                  title_column="title", metadata_columns=["author"])
        self.client = db.corpus(f"client-{suffix}")
        self.indexed = db.corpus(f"index-{suffix}")
        self.follow = db.corpus(f"follow-{suffix}", create=False)
        for kb in self.corpora():
            kb.enable("threadrag", progress=False)

    def corpora(self) -> list[pgrag.Corpus]:
        return [self.client, self.indexed, self.follow]

    def put(self, doc: dict[str, Any]) -> None:
        self.client.ingest([doc], progress=False)
        with self.db.transaction() as conn:   # an application writing pgrag.document itself
            conn.execute("""INSERT INTO pgrag.document (corpus_id, external_id, title, body, metadata)
                            VALUES (%s, %s, %s, %s, %s)
                            ON CONFLICT (corpus_id, external_id) DO UPDATE
                            SET title = EXCLUDED.title, body = EXCLUDED.body, metadata = EXCLUDED.metadata""",
                         (self.indexed.id, doc["id"], doc["title"], doc["text"], Jsonb(doc["metadata"])))
        self.indexed.index(progress=False)
        self.app.execute(sql.SQL("""INSERT INTO {} (id, title, body, author) VALUES (%s, %s, %s, %s)
                                    ON CONFLICT (id) DO UPDATE
                                    SET title = EXCLUDED.title, body = EXCLUDED.body, author = EXCLUDED.author""")
                         .format(self.table), (doc["id"], doc["title"], doc["text"], doc["metadata"]["author"]))
        self.follow.sync()

    def delete(self, external_id: str) -> None:
        self.client.delete([external_id])
        with self.db.transaction() as conn:
            conn.execute("SELECT pgrag.delete_documents(%s, %s)", (self.indexed.name, [external_id]))
        self.app.execute(sql.SQL("DELETE FROM {} WHERE id = %s").format(self.table), (external_id,))
        self.follow.sync()

    def close(self) -> None:
        self.db.detach(self.follow.name, drop_corpus=True)
        self.db.drop_corpus(self.client.name)
        self.db.drop_corpus(self.indexed.name)
        self.app.execute(sql.SQL("DROP TABLE {}").format(self.table))


def state(db: pgrag.Database, kb: pgrag.Corpus) -> dict[str, Any]:
    """Every table of the corpus keyed by content, its metadata, and the work it
    took: graph version and removed chunks (an extra re-index shows in both)."""
    out = everything(db, kb.id)
    out["metadata"] = metadata(db, kb.id)
    with db.transaction() as conn:
        out["sentences"] = sorted(conn.execute(
            """SELECT d.external_id, s.ordinal, s.text, s.char_start, s.char_end
               FROM pgrag.sentence s JOIN pgrag.document d USING (corpus_id, document_id)
               WHERE s.corpus_id = %s""", (kb.id,)).fetchall())
        out["removed_chunks"] = conn.execute(
            "SELECT count(*) FROM pgrag.chunk_removal WHERE corpus_id = %s", (kb.id,)).fetchone()[0]
    out["graph_version"] = kb.graph_version()
    return out


@pytest.fixture
def app(database_uri: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(database_uri, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA IF NOT EXISTS app")
        yield conn


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
@example(ops=EVERY_KIND)
def test_client_ingest_index_and_follow_give_identical_tables(db, app, ops):
    paths = Paths(db, app)
    stored: dict[str, dict[str, Any]] = {}
    for op, i, v, a in ops:
        doc = document(i, v, a)
        if op == "put":
            paths.put(doc)
            stored[doc["id"]] = doc
        elif doc["id"] in stored:      # deleting what was never stored is not an edit
            paths.delete(doc["id"])
            del stored[doc["id"]]
        client, *others = (state(db, kb) for kb in paths.corpora())
        assert sorted(d[0] for d in client["documents"]) == sorted(stored)
        for other in others:
            assert_same(dict(client), other)
    paths.close()
