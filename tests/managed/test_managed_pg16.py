"""pgrag on PostgreSQL 16 with pgvector 0.6, as a managed service runs it (a
NOSUPERUSER owner, no PL/Python; tests/managed/conftest.py), gives the hits the
default embedded PostgreSQL 18 with pgvector 0.8 gives: the sample corpus is
ingested once into each, and every retrieval below is asked of both."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.conftest import MANAGED_BIN, TEMPLATE, scratch_database
from tests.managed.conftest import owned_database

CORPUS = "sample"
FILTER = {"half": "even"}
K = 5


def documents() -> list[dict[str, Any]]:
    """The bundled sample corpus, with a metadata value to filter on."""
    from pgrag.demo import sample_documents

    return [dict(d, metadata={"half": "even" if i % 2 == 0 else "odd"}) for i, d in enumerate(sample_documents())]


def questions() -> list[str]:
    from pgrag.demo import sample_questions

    return [q["question"] for q in sample_questions()[:6]]


def _ingested(uri: str) -> "Iterator[Any]":
    import pgrag

    db = pgrag.connect(uri)
    try:
        db.corpus(CORPUS).ingest(documents(), progress=False)
        yield db
    finally:
        db.close()


@pytest.fixture(scope="module")
def pg16(pg16_admin_uri: str) -> Iterator[Any]:
    """The sample corpus on PostgreSQL 16, migrated and ingested by a NOSUPERUSER owner."""
    with owned_database(pg16_admin_uri, vector=True) as made:
        yield from _ingested(made.uri)


@pytest.fixture(scope="module")
def pg18(pg_uri: str, template_uri: str) -> Iterator[Any]:
    """The same corpus on the session's embedded PostgreSQL 18."""
    with scratch_database(pg_uri, "pgrag_test_", TEMPLATE) as uri:
        yield from _ingested(uri)


def listing(hits: Any) -> list[tuple[str, int, float]]:
    """What must agree: each hit's document, chunk and score (float8 sums of the
    same float4 vectors: equal to 1e-6), in order."""
    return [(h.provenance.external_id, h.provenance.chunk_ordinal, round(h.score, 6)) for h in hits]


def even(db: Any) -> set[str]:
    """External ids of the documents inside FILTER."""
    with psycopg.connect(db.dsn) as conn:
        return {r[0] for r in conn.execute("SELECT external_id FROM pgrag.document WHERE metadata->>'half' = 'even'")}


def server_version(db: Any) -> int:
    with psycopg.connect(db.dsn) as conn:
        return int(conn.execute("SELECT current_setting('server_version_num')").fetchone()[0])


def test_the_oldest_server_is_16_with_pgvector_06(pg16: Any) -> None:
    """pgserver's PostgreSQL 16.2 with pgvector 0.6.2 (unless PGRAG_TEST_MANAGED_BIN
    names another server), without the collation and the index scan pgrag uses on 18."""
    with psycopg.connect(pg16.dsn) as conn:
        vector, builtin = conn.execute(
            "SELECT (SELECT extversion FROM pg_extension WHERE extname = 'vector'),"
            "       EXISTS (SELECT FROM pg_collation WHERE collname = 'pg_c_utf8')").fetchone()
    if MANAGED_BIN:
        pytest.skip(f"PGRAG_TEST_MANAGED_BIN: PostgreSQL {server_version(pg16)}, pgvector {vector}")
    assert 160000 <= server_version(pg16) < 170000 and vector.startswith("0.6.") and not builtin


@pytest.mark.parametrize("method", ["dense", "bm25", "hybrid", "tigrag"])
@pytest.mark.parametrize("filtered", [False, True], ids=["all", "filter"])
def test_retrieve_gives_the_hits_of_18(pg16: Any, pg18: Any, method: str, filtered: bool) -> None:
    options = {"filter": FILTER} if filtered else {}
    for question in questions():
        old = pg16.corpus(CORPUS).retrieve(question, method=method, k=K, **options)
        new = pg18.corpus(CORPUS).retrieve(question, method=method, k=K, **options)
        assert old and listing(old) == listing(new), question
        if filtered:
            assert {h.provenance.external_id for h in old} <= even(pg16)


@pytest.mark.parametrize("method", ["dense", "tigrag"])
def test_past_the_in_memory_size_the_filtered_scan_gives_the_hits_of_18(monkeypatch, pg16: Any, pg18: Any,
                                                                       method: str) -> None:
    """Past the in-memory index's size, dense search inside a filter goes through
    pgrag_internal.dense_within: HNSW with pgvector 0.8's iterative scan on 18,
    an exact scan of the filter's chunks on pgvector 0.6. Same hits."""
    import pgrag.index.postings as postings

    monkeypatch.setattr(postings, "EXACT_SEARCH_MAX_VECTORS", 0)
    for question in questions():
        old = pg16.corpus(CORPUS).retrieve(question, method=method, k=K, filter=FILTER)
        new = pg18.corpus(CORPUS).retrieve(question, method=method, k=K, filter=FILTER)
        assert len(old) == K and listing(old) == listing(new), question
        if method == "dense":
            assert old.trace.steps[-1]["search"] == "hnsw, filtered"


SQL = {
    "bm25": "SELECT external_id, chunk_ordinal, score FROM pgrag.bm25(%(c)s, %(q)s, %(k)s)",
    "dense": "SELECT external_id, chunk_ordinal, score FROM pgrag.dense(%(c)s, %(v)s::vector, %(k)s)",
    "hybrid": "SELECT external_id, chunk_ordinal, score FROM pgrag.hybrid(%(c)s, %(q)s, %(v)s::vector, %(k)s)",
    # the filtered scan itself, over the even half's documents
    "dense_within": """SELECT d.external_id, c.ordinal, w.score
                       FROM pgrag_internal.dense_within(pgrag_internal.corpus_id(%(c)s), %(v)s::vector, %(k)s,
                            ARRAY(SELECT document_id FROM pgrag.document
                                  WHERE metadata->>'half' = 'even')) w
                       JOIN pgrag.chunk c USING (chunk_id) JOIN pgrag.document d ON d.document_id = w.document_id""",
}


@pytest.mark.parametrize("function", sorted(SQL))
def test_the_sql_functions_give_the_rows_of_18(pg16: Any, pg18: Any, function: str) -> None:
    embedder = pg18.corpus(CORPUS).embedder
    for question in questions():
        vector = "[" + ",".join(map(str, embedder.encode([question])[0])) + "]"
        rows = []
        for db in (pg16, pg18):
            with psycopg.connect(db.dsn) as conn:
                found = conn.execute(SQL[function], {"c": CORPUS, "q": question, "v": vector, "k": K}).fetchall()
            rows.append([(ext, ordinal, round(score, 6)) for ext, ordinal, score in found])
        assert rows[0] and rows[0] == rows[1], question


# Text in several scripts, and what pgrag.tokenize gives for it on every server.
# PostgreSQL 16 lowercases and classifies through glibc's C.UTF-8, 17 and 18
# through the builtin pg_c_utf8 (sql/10_tokenize.sql): the same, letter for
# letter, but for the digits of other scripts (DIGITS), which glibc counts as
# alphanumeric and pg_c_utf8 does not.
TOKENS = [
    ("Größe der STRASSE: Straße, ẞTRASSE, ÄPFEL", ["größe", "der", "strasse", "straße", "ßtrasse", "äpfel"]),
    ("L'ÉLÉPHANT, l’œuvre; ÉCOLE — façade", ["éléphant", "œuvre", "école", "façade"]),
    ("ΟΔΥΣΣΕΥΣ στην Ἀθήνα· ΣΟΦΊΑ", ["οδυσσευσ", "στην", "ἀθήνα", "σοφία"]),
    ("İSTANBUL, Istanbul, ılık DİYARBAKIR", ["istanbul", "istanbul", "ılık", "diyarbakir"]),
    ("Cafe\u0301 Zoe\u0308 naïve", ["café", "zoë", "naïve"]),    # NFC first
]
DIGITS = "abc\u0663def \u0661\u0662\u0663"   # Arabic-Indic 3 inside a word, and 123


def test_tokenize_gives_the_tokens_of_18_in_other_scripts(pg16: Any, pg18: Any) -> None:
    for text, tokens in TOKENS:
        assert pg16.corpus(CORPUS).tokenize(text) == tokens == pg18.corpus(CORPUS).tokenize(text), text
    assert pg18.corpus(CORPUS).tokenize(DIGITS) == ["abc", "def"]
    if server_version(pg16) < 170000:   # the documented difference
        assert pg16.corpus(CORPUS).tokenize(DIGITS) == ["abc\u0663def", "\u0661\u0662\u0663"]
    else:
        assert pg16.corpus(CORPUS).tokenize(DIGITS) == ["abc", "def"]


def test_the_tokenizer_names_its_collation(pg16: Any, pg18: Any) -> None:
    """The default collation of the managed tier's databases is plain "C" (ASCII
    only): the token pipeline must have chosen its collation itself, C.utf8 on 16."""
    definitions = []
    for db in (pg16, pg18):
        with psycopg.connect(db.dsn) as conn:
            definitions.append(conn.execute("SELECT pg_get_functiondef('pgrag.tokenize(text)'::regprocedure),"
                                            "       datcollate FROM pg_database WHERE datname = current_database()"
                                            ).fetchone())
    assert definitions[0][1] == "C"
    expected = 'COLLATE "C.utf8"' if server_version(pg16) < 170000 else "COLLATE pg_c_utf8"
    assert expected in definitions[0][0]
    assert "COLLATE pg_c_utf8" in definitions[1][0]


def test_without_a_unicode_collation_the_default_one_serves_with_a_warning(pg16_admin_uri: str) -> None:
    """A server whose OS has no C.UTF-8 locale (here: the collation dropped from
    a 16 database before pgrag migrates it) gets the database's default
    collation (plain "C" here: ASCII only), and applying the file says so."""
    import pgrag
    from pgrag import sqlscript
    from pgrag.resources import sql_file

    with owned_database(pg16_admin_uri, vector=True) as made:
        uri = made.uri
        with psycopg.connect(pg16_admin_uri, dbname=made.database, autocommit=True) as conn:
            if int(conn.execute("SELECT current_setting('server_version_num')").fetchone()[0]) >= 170000:
                pytest.skip("pg_c_utf8 is built in from PostgreSQL 17: nothing to take away")
            conn.execute('DROP COLLATION IF EXISTS pg_catalog."C.utf8"')
            conn.execute('DROP COLLATION IF EXISTS pg_catalog."C.UTF-8"')
        db = pgrag.connect(uri)
        try:
            tokens = db.corpus(CORPUS).tokenize("ÉCOLE und Straße")
        finally:
            db.close()
        notices: list[str] = []
        with psycopg.connect(uri) as conn:   # the file again, as every upgrade applies it
            conn.add_notice_handler(lambda d: notices.append(f"{d.severity_nonlocalized}: {d.message_primary}"))
            sqlscript.run(conn, sql_file("00_search_path.sql"))
            sqlscript.run(conn, sql_file("10_tokenize.sql"))
    assert tokens == ["cole", "und", "stra"]   # É and ß neither lowercased nor letters
    assert any(n.startswith("WARNING: pgrag.tokenize: this server has neither") for n in notices), notices

