"""pgrag where a managed service puts an application: the database's owner is a
role that is not a superuser, and it may not create PL/Python functions.

A superuser makes the role and its database and creates pgvector there (what a
service's console does); from then on everything is done as the role: connect
(which migrates), ingest the sample, every method through ``kb.retrieve``, a
filter, the plain SQL functions, the LangChain retriever (which moves to the
client when the server answers that it has no runtime). Each server the
``managed_admin`` fixture yields (tests/managed/conftest.py) runs the module."""

from __future__ import annotations

import warnings

import psycopg
import pytest
from psycopg import sql

import pgrag
from pgrag.demo import sample_documents, sample_questions
from pgrag.exceptions import ExtensionMissing, RuntimeNotice
from tests.managed.conftest import OwnedDatabase, owned_database

QUESTION = "When did Lothair II's mother die?"   # the sample's first question
METHODS = ("dense", "bm25", "hybrid", "tigrag", "t2rag", "threadrag", "cirag")


@pytest.fixture(scope="module")
def owned(managed_admin: str) -> OwnedDatabase:
    with owned_database(managed_admin, vector=True) as made:
        yield made


@pytest.fixture(scope="module")
def kb(owned: OwnedDatabase) -> pgrag.Corpus:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        database = pgrag.connect(owned.uri)
    notices = [w for w in seen if issubclass(w.category, RuntimeNotice)]
    # One notice, naming what is missing and what still works.
    assert len(notices) == 1, [str(w.message) for w in seen]
    assert "PL/Python" in str(notices[0].message) and "kb.retrieve" in str(notices[0].message)
    corpus = database.corpus("sample", methods=["threadrag"])
    report = corpus.ingest(sample_documents(), progress=False, extract_triples="spacy")
    assert report.documents == len(sample_documents())
    yield corpus
    database.close()


def test_the_owner_is_not_a_superuser_and_has_no_runtime(owned: OwnedDatabase, kb: pgrag.Corpus) -> None:
    with psycopg.connect(owned.uri) as conn:
        superuser, owner = conn.execute(
            "SELECT r.rolsuper, pg_get_userbyid(d.datdba) = current_user FROM pg_roles r, pg_database d "
            "WHERE r.rolname = current_user AND d.datname = current_database()").fetchone()
        assert (superuser, owner) == (False, True)
        assert conn.execute("SELECT pgrag.runtime()").fetchone() == (None,)
        with pytest.raises(psycopg.Error) as caught:
            conn.execute("SELECT * FROM pgrag.retrieve('sample', 'a question', 'bm25')")
        assert caught.value.sqlstate == "PR003"


def test_a_second_connect_applies_the_schema_again_as_the_owner(owned: OwnedDatabase, kb: pgrag.Corpus) -> None:
    again = pgrag.connect(owned.uri)      # the owner re-applies sql/ on every connect
    try:
        assert [h.provenance.chunk_id for h in again.corpus("sample").retrieve(QUESTION, method="bm25")] == \
            [h.provenance.chunk_id for h in kb.retrieve(QUESTION, method="bm25")]
    finally:
        again.close()


@pytest.mark.parametrize("method", METHODS)
def test_every_method_runs_through_kb_retrieve(kb: pgrag.Corpus, method: str) -> None:
    hits = kb.retrieve(QUESTION, method=method, k=5)
    assert 0 < len(hits) <= 5
    assert all(hit.provenance.external_id for hit in hits)


def test_a_filter_keeps_to_its_documents(kb: pgrag.Corpus) -> None:
    kept = {"$external_id": {"$in": ["Ermengarde of Tours"]}}    # the sample's ids are its titles
    for method in ("dense", "bm25", "hybrid", "tigrag"):
        hits = kb.retrieve(QUESTION, method=method, k=5, filter=kept)
        assert hits and {h.provenance.external_id for h in hits} == {"Ermengarde of Tours"}, method


def test_the_plain_sql_functions_rank_as_python_does(owned: OwnedDatabase, kb: pgrag.Corpus) -> None:
    question = sample_questions()[2]["question"]
    expected = [h.provenance.chunk_id for h in kb.retrieve(question, method="bm25", k=5)]
    with psycopg.connect(owned.uri) as conn:
        found = [r[0] for r in conn.execute("SELECT chunk_id FROM pgrag.bm25('sample', %s, 5)", (question,))]
    assert found == expected


def test_the_langchain_retriever_moves_to_the_client(owned: OwnedDatabase, kb: pgrag.Corpus) -> None:
    from psycopg_pool import ConnectionPool

    from pgrag.integrations.langchain import PgragRetriever

    expected = kb.retrieve(QUESTION, method="tigrag", k=5)
    with ConnectionPool(owned.uri, min_size=1, max_size=2, open=True) as pool:
        retriever = PgragRetriever(connection=pool, corpus="sample", method="tigrag", k=5)
        docs = retriever.invoke(QUESTION)
        assert [d.metadata["chunk_id"] for d in docs] == [h.provenance.chunk_id for h in expected]
        assert [d.page_content for d in docs] == [h.text for h in expected]
        assert docs[0].metadata["external_id"] == expected[0].provenance.external_id
        server_only = PgragRetriever(connection=pool, corpus="sample", method="tigrag", run_in="server")
        with pytest.raises(psycopg.Error) as caught:
            server_only.invoke(QUESTION)
        assert caught.value.sqlstate == "PR003"


def test_missing_pgvector_names_the_administrators_step(managed_admin: str) -> None:
    with owned_database(managed_admin, vector=False) as made:
        with pytest.raises(ExtensionMissing) as caught:
            pgrag.connect(made.uri)
    message = str(caught.value)
    assert "CREATE EXTENSION vector" in message and made.database in message and "administrator" in message


def test_the_owner_may_not_create_plpython_functions(owned: OwnedDatabase) -> None:
    """The premise of the tier: were the role able to, the runtime would be there."""
    with psycopg.connect(owned.uri, autocommit=True) as conn:
        with pytest.raises(psycopg.Error):
            conn.execute(sql.SQL("CREATE FUNCTION {}() RETURNS int LANGUAGE plpython3u AS 'return 1'").format(
                sql.Identifier("pgrag_probe")))


def test_the_llamaindex_retriever_moves_to_the_client_sync_and_async(owned: OwnedDatabase,
                                                                      kb: pgrag.Corpus) -> None:
    import asyncio

    from psycopg_pool import AsyncConnectionPool

    from pgrag.integrations.llamaindex import PgragRetriever

    kept = {"kind": {"$exists": False}}    # the sample has no metadata: every document
    expected = [h.provenance.chunk_id for h in kb.retrieve(QUESTION, method="hybrid", k=4, filter=kept)]
    with psycopg.connect(owned.uri) as conn:
        nodes = PgragRetriever(connection=conn, corpus="sample", method="hybrid", k=4, filters=kept).retrieve(QUESTION)
    assert [n.node.metadata["chunk_id"] for n in nodes] == expected

    async def ask() -> list:
        async with AsyncConnectionPool(owned.uri, min_size=1, max_size=1, open=False) as pool:
            retriever = PgragRetriever(async_connection=pool, corpus="sample", method="hybrid", k=4, filters=kept)
            return await retriever.aretrieve(QUESTION)

    assert [n.node.metadata["chunk_id"] for n in asyncio.run(ask())] == expected


def test_a_corpus_follows_the_owners_table_through_the_worker(owned: OwnedDatabase, kb: pgrag.Corpus) -> None:
    from pgrag.follow import Worker

    with psycopg.connect(owned.uri, autocommit=True) as conn:
        conn.execute("CREATE TABLE notes (id int PRIMARY KEY, title text, body text)")
        conn.execute("INSERT INTO notes VALUES (1, 'Hollstadt', 'Hollstadt is a municipality in Bavaria.')")
    database = pgrag.connect(owned.uri)
    try:
        assert database.attach("notes", "public.notes", id_column="id", text_column="body",
                               title_column="title") == 1
        with psycopg.connect(owned.uri, autocommit=True) as conn:
            conn.execute("INSERT INTO notes VALUES (2, 'Leipzig', 'Leipzig is a city in Saxony.')")
        report = Worker(database, corpus="notes").run(once=True)
        assert report.indexed == 2 and report.failed == 0
        hits = database.corpus("notes", create=False).retrieve("Which city is in Saxony?", method="bm25", k=1)
        assert hits[0].provenance.external_id == "2"
    finally:
        database.close()


def test_the_http_service_answers_every_method_with_a_filter(kb: pgrag.Corpus, owned: OwnedDatabase) -> None:
    """`pgrag serve` over the owner's database (as the service runs beside it):
    the hits of kb.retrieve for every main method, a filter where the method takes one."""
    from starlette.testclient import TestClient

    from pgrag import methods
    from pgrag.http_api import create_app

    kept = {"$external_id": {"$in": ["Lothair II", "Ermengarde of Tours"]}}
    database = pgrag.connect(owned.uri)
    try:
        client = TestClient(create_app(database), base_url="http://127.0.0.1:8765")
        for method in methods.MAIN:
            takes = methods.get(method).filters
            body = {"question": QUESTION, "method": method, "k": 4, **({"filter": kept} if takes else {})}
            response = client.post("/v1/corpora/sample/retrieve", json=body)
            assert response.status_code == 200, (method, response.text)
            expected = kb.retrieve(QUESTION, method=method, k=4, **({"filter": kept} if takes else {}))
            assert [h["chunk_id"] for h in response.json()["hits"]] == [h.provenance.chunk_id for h in expected]
        bad = client.post("/v1/corpora/sample/retrieve", json={"question": QUESTION, "options": {"hops": 1.5},
                                                               "method": "tigrag"})
        assert bad.status_code == 400 and bad.json()["error"]["sqlstate"] == "PR008"
    finally:
        database.close()
