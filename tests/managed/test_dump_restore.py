"""Moving a pgrag database (docs/managed.md, "Moving a database"): ``pg_dump`` of a
database on the embedded server, with PL/Python, restored into a database that
a role which is not a superuser owns on each server of the tier (another
PostgreSQL version, no PL/Python): every method returns the same hits, with the
same scores, and the per-corpus HNSW indexes and ranking files are rebuilt from
the tables.

``pytest tests/managed/test_dump_restore.py --dump-corpus 2wiki`` moves the 2Wiki
corpus instead and compares its 111 questions (docs/managed.md quotes the run)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import pgrag
from pgrag import server
from pgrag.demo import sample_documents, sample_questions
from tests.conftest import scratch_database
from tests.managed.conftest import OwnedDatabase, owned_database

METHODS = ("dense", "bm25", "hybrid", "tigrag", "t2rag", "threadrag", "cirag")
# T2RAG finds its propositions through the triples' HNSW index (pgrag.propositions), an
# approximate search, and the target builds that index anew: a graph built again is
# not the same graph. On the 2Wiki corpus moved to PostgreSQL 16 one of its 111
# questions differed so. The others rank exactly at that size and must agree; one
# threadrag question did not (its tokens are the same on both servers: an order of
# rows the restore changed is the suspect), so --dump-corpus 2wiki fails there today.
APPROXIMATE = {"t2rag": 0.95}    # the share of questions that must still agree


def ranked(kb: pgrag.Corpus, questions: list[str]) -> dict[tuple[str, str], list[tuple[int, float]]]:
    return {(method, q): [(h.provenance.chunk_id, round(h.score, 9)) for h in kb.retrieve(q, method=method, k=5)]
            for method in METHODS for q in questions}


@pytest.fixture(scope="module")
def moved(request: pytest.FixtureRequest) -> tuple[list[dict], list[str]]:
    """The corpus and questions that move: the sample's, or 2Wiki's (``--dump-corpus 2wiki``)."""
    if request.config.getoption("--dump-corpus") == "2wiki":
        bench = request.getfixturevalue("bench_2wiki")
        lines = (bench / "questions.jsonl").read_text(encoding="utf-8").splitlines()
        questions = [json.loads(line)["question"] for line in lines if line.strip()]
        return json.loads((bench / "corpus.json").read_text(encoding="utf-8")), questions
    return sample_documents(), [q["question"] for q in sample_questions()]


@pytest.fixture(scope="module")
def source(pg_uri: str, template_uri: str, moved: tuple[list[dict], list[str]]) -> Iterator[tuple[str, dict]]:
    """A database on the embedded server holding the corpus with every method's data, and its hits."""
    documents, questions = moved
    with scratch_database(pg_uri, "pgrag_dump_", "pgrag_template") as uri:
        database = pgrag.connect(uri)
        kb = database.corpus("sample", methods=["threadrag"])
        kb.ingest(documents, progress=False, extract_triples="spacy")
        hits = ranked(kb, questions)
        database.close()
        yield uri, hits


def dump(uri: str, path: Path) -> None:
    pg_dump = server.psql_path().parent / "pg_dump"
    subprocess.run([str(pg_dump), "--format=custom", "--data-only", "--schema=pgrag",
                    "--exclude-table-data=pgrag.alembic_version", "--file", str(path), "--dbname", uri],
                   check=True, capture_output=True, text=True, timeout=300)


# What pg_restore 18 sets that an older server does not know (docs/managed.md).
NEWER_SETTINGS = {"transaction_timeout": 170000}


def restore(path: Path, target: OwnedDatabase) -> None:
    pgrag.connect(target.uri).close()     # the schema at head, made for that server
    pg_restore = server.psql_path().parent / "pg_restore"
    with psycopg.connect(target.uri) as conn:
        version = int(conn.execute("SELECT current_setting('server_version_num')").fetchone()[0])
    if version >= min(NEWER_SETTINGS.values()):
        subprocess.run([str(pg_restore), "--data-only", "--single-transaction", "--dbname", target.uri, str(path)],
                       check=True, capture_output=True, text=True, timeout=300)
        return
    # To an older major: the archive as a script, without those settings, through psql.
    script = subprocess.run([str(pg_restore), "--data-only", "--file=-", str(path)],
                            check=True, capture_output=True, text=True, timeout=300).stdout
    unknown = tuple(f"SET {name} " for name, since in NEWER_SETTINGS.items() if version < since)
    script = "".join(line for line in script.splitlines(keepends=True) if not line.startswith(unknown))
    subprocess.run([str(server.psql_path()), "-X", "-q", "-v", "ON_ERROR_STOP=1", "--single-transaction",
                    "--dbname", target.uri], input=script, check=True, capture_output=True, text=True, timeout=300)


def test_a_dump_restored_on_another_server_gives_the_same_hits(source: tuple[str, dict], managed_admin: str,
                                                               moved: tuple[list[dict], list[str]],
                                                               tmp_path: Path) -> None:
    uri, expected = source
    questions = moved[1]
    dump(uri, tmp_path / "pgrag.dump")
    with owned_database(managed_admin, vector=True) as target:
        restore(tmp_path / "pgrag.dump", target)
        with psycopg.connect(target.uri) as conn:
            assert conn.execute("SELECT count(*) FROM pg_indexes WHERE schemaname = 'pgrag' "
                                "AND indexname LIKE '%%embedding_hnsw%%'").fetchone() == (0,)
        database = pgrag.connect(target.uri)      # the owner's connect builds what the rows lack
        try:
            with psycopg.connect(target.uri) as conn:
                indexes = {r[0] for r in conn.execute(
                    "SELECT indexname FROM pg_indexes WHERE schemaname = 'pgrag' AND indexname LIKE '%%hnsw%%'")}
                assert conn.execute("SELECT pgrag.runtime()").fetchone() == (None,)
            corpus_id = database.corpus("sample", create=False).id
            assert indexes == {f"chunk_embedding_hnsw_{corpus_id}", f"triple_embedding_hnsw_{corpus_id}"}
            found = ranked(database.corpus("sample", create=False), questions)
        finally:
            database.close()
    assert len(found) == len(METHODS) * len(set(questions))
    differ = {key: (expected[key], hits) for key, hits in found.items() if hits != expected[key]}
    exact = {key: pair for key, pair in differ.items() if key[0] not in APPROXIMATE}
    assert exact == {}, f"(method, question): (before, after), for {sorted(exact)}"
    for method, share in APPROXIMATE.items():
        agree = 1 - sum(key[0] == method for key in differ) / len(set(questions))
        assert agree >= share, f"{method}: {agree:.1%} of the questions agree: {differ}"
    print(f"moved: {len(found) - len(differ)} of {len(found)} (method, question) rankings the same; "
          f"differ: {sorted(differ)}")
