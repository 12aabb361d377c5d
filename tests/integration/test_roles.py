"""Roles and tenant isolation with real roles and real connections as them:
a reader retrieves but cannot write, a writer ingests, and under row-level
security each tenant sees only its own corpus, in both directions."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import errors, sql

import pgrag

TABLES = ("corpus", "document", "sentence", "chunk", "token", "chunk_token", "token_edge", "chunk_entity",
          "graph_version", "corpus_acl")


def as_role(uri: str, role: str) -> str:
    """The same database, connecting as ``role`` (the embedded server trusts local connections)."""
    parts = urlsplit(uri)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{role}:@{host}"))


@pytest.fixture
def make_role(database_uri: str) -> Iterator:
    """Create LOGIN roles with unique names; drop them (and their privileges) at teardown:
    roles outlive the test database."""
    created: list[str] = []

    def make(kind: str) -> str:
        name = f"pgrag_t_{kind}_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(database_uri, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
        created.append(name)
        return name

    yield make
    with psycopg.connect(database_uri, autocommit=True) as conn:
        for name in created:
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


@pytest.fixture
def wiki(db, wiki_docs):
    kb = db.corpus("wiki")
    kb.ingest(wiki_docs, progress=False)
    return kb


def embedding_literal(kb, text: str) -> str:
    return "[" + ",".join(f"{x:.6f}" for x in kb.embedder.encode([text])[0]) + "]"


def sql_retrievals(conn: psycopg.Connection, corpus: str, question: str, vec: str) -> dict[str, list[str]]:
    """Hit ids from the SQL retrieval functions, called directly as the connected role."""
    out = {}
    for name, stmt, params in [
        ("bm25", "SELECT external_id FROM pgrag.bm25(%s, %s, 3)", (corpus, question)),
        ("dense", "SELECT external_id FROM pgrag.dense(%s, %s::vector, 3)", (corpus, vec)),
        ("hybrid", "SELECT external_id FROM pgrag.hybrid(%s, %s, %s::vector, 3)", (corpus, question, vec)),
        ("tigrag", "SELECT external_id FROM pgrag.tigrag(%s, %s, %s::vector, 3)", (corpus, question, vec)),
    ]:
        out[name] = [r[0] for r in conn.execute(stmt, params)]
        conn.commit()
    return out


def test_reader_retrieves_through_sql_and_python_but_cannot_write(db, wiki, database_uri, make_role):
    reader = make_role("ro")
    db.grant_reader(reader)
    question = "Who is the mother of Lothair II?"
    vec = embedding_literal(wiki, question)
    with psycopg.connect(as_role(database_uri, reader)) as conn:
        hits = sql_retrievals(conn, "wiki", question, vec)
        assert all(hits[m] for m in hits), hits
        assert "lothair" in hits["bm25"]
        for stmt in ["INSERT INTO pgrag.corpus (name, embedding_model, embedding_dim) VALUES ('x', 'm', 3)",
                     "UPDATE pgrag.token SET df = df + 1",
                     "DELETE FROM pgrag.chunk",
                     "DELETE FROM pgrag.document"]:
            with pytest.raises(errors.InsufficientPrivilege):
                conn.execute(stmt)
            conn.rollback()
        with pytest.raises(errors.InsufficientPrivilege):
            conn.execute("SELECT pgrag_internal.ensure_hnsw_index(1, 'chunk')")
        conn.rollback()

    ro = pgrag.connect(as_role(database_uri, reader))  # not the owner: checks the schema, no migration
    try:
        assert not ro.can_migrate()
        kb = ro.corpus("wiki", create=False)
        for method in ("dense", "bm25", "hybrid", "tigrag"):
            assert kb.retrieve(question, method=method, k=3), method
        with pytest.raises(pgrag.PgragError, match="permission denied"):
            kb.ingest([{"id": "new", "title": "New", "text": "Reader roles cannot add documents."}],
                      progress=False)
        with pytest.raises(pgrag.PgragError, match="permission denied"):
            kb.delete(["lothair"])
    finally:
        ro.close()
    assert db.corpora()[0]["documents"] == 5


def test_writer_ingests_a_new_corpus_with_its_hnsw_index(db, database_uri, make_role, wiki_docs):
    writer = make_role("rw")
    db.grant_writer(writer)
    rw = pgrag.connect(as_role(database_uri, writer))
    try:
        kb = rw.corpus("tenant-notes")
        report = kb.ingest(wiki_docs, progress=False)
        assert report.added == 5
        assert kb.retrieve("Who married Lothair I?", method="dense", k=2)
        assert kb.delete(["minaj"]) == 1
        with pytest.raises(pgrag.PgragError, match="permission denied"):
            rw.grant_corpus(writer, "tenant-notes")  # the access list is the owner's
    finally:
        rw.close()
    with psycopg.connect(database_uri) as conn:
        index = conn.execute("SELECT to_regclass(format('pgrag.chunk_embedding_hnsw_%%s', %s::bigint))",
                             (kb.id,)).fetchone()[0]
    assert index is not None


def test_a_role_that_cannot_migrate_gets_a_clear_error_when_the_schema_is_behind(db, database_uri, make_role):
    reader = make_role("ro")
    db.grant_reader(reader)
    with psycopg.connect(database_uri, autocommit=True) as conn:
        conn.execute("UPDATE pgrag.alembic_version SET version_num = '0001'")
    with pytest.raises(pgrag.SchemaOutdated, match="at revision 0001.*pgrag db upgrade"):
        pgrag.connect(as_role(database_uri, reader))


def visible(conn: psycopg.Connection) -> dict[str, set[int]]:
    """corpus_id values visible in every table."""
    return {t: {r[0] for r in conn.execute(sql.SQL("SELECT DISTINCT corpus_id FROM pgrag.{}").format(
        sql.Identifier(t)))} for t in TABLES}


def test_row_level_security_isolates_tenants_in_both_directions(db, database_uri, make_role, wiki_docs):
    a_docs, b_docs = wiki_docs[:3], wiki_docs[3:]
    kb_a, kb_b = db.corpus("tenant-a"), db.corpus("tenant-b")
    kb_a.ingest(a_docs, progress=False)
    kb_b.ingest(b_docs, progress=False)
    role_a, role_b = make_role("a"), make_role("b")
    for role, corpus in [(role_a, "tenant-a"), (role_b, "tenant-b")]:
        db.grant_writer(role)
        db.grant_corpus(role, corpus)
    assert db.enable_tenant_isolation() >= len(TABLES)
    assert db.enable_tenant_isolation() >= len(TABLES)  # idempotent

    question = "Who is the mother of Lothair II and who sang Changed It?"
    vec = embedding_literal(kb_a, question)
    cases = [(role_a, kb_a, "tenant-a", "tenant-b", kb_b.id), (role_b, kb_b, "tenant-b", "tenant-a", kb_a.id)]
    for role, own, own_name, other_name, other_id in cases:
        own_ids = {d["id"] for d in (a_docs if own is kb_a else b_docs)}
        with psycopg.connect(as_role(database_uri, role)) as conn:
            seen = visible(conn)
            assert seen["corpus"] == {own.id}
            assert all(ids <= {own.id} for ids in seen.values()), seen
            assert seen["chunk_token"] == seen["token_edge"] == {own.id}
            conn.commit()
            hits = sql_retrievals(conn, own_name, question, vec)
            assert {h for ids in hits.values() for h in ids} <= own_ids
            assert hits["bm25"]
            # The other tenant's corpus does not exist for this role, even by name.
            for stmt in ("SELECT * FROM pgrag.bm25(%s, 'Lothair')", "SELECT * FROM pgrag.ppr(%s, ARRAY['lothair'])"):
                with pytest.raises(psycopg.Error, match="does not exist"):
                    conn.execute(stmt, (other_name,))
                conn.rollback()
            # ... and nothing can be written into it.
            with pytest.raises(errors.InsufficientPrivilege, match="row-level security"):
                conn.execute("INSERT INTO pgrag.document (corpus_id, external_id, body) VALUES (%s, 'x', 'y')",
                             (other_id,))
            conn.rollback()
            assert conn.execute("UPDATE pgrag.token SET df = df WHERE corpus_id = %s", (other_id,)).rowcount == 0
            conn.rollback()
        tenant = pgrag.connect(as_role(database_uri, role))
        try:
            with pytest.raises(pgrag.CorpusNotFound):
                tenant.corpus(other_name, create=False)
            assert [c["name"] for c in tenant.corpora()] == [own_name]
            kb = tenant.corpus(own_name, create=False)
            for method in ("dense", "bm25", "tigrag"):
                assert {h.provenance.external_id for h in kb.retrieve(question, method=method, k=5)} <= own_ids
            # PostgreSQL refuses COPY FROM under row-level security, and ingest copies:
            # under isolation the owner (or a BYPASSRLS role) ingests, tenants read and delete.
            with pytest.raises(pgrag.PgragError, match="row-level security"):
                kb.ingest([{"id": "extra", "title": "Extra", "text": "Tenants cannot COPY into their corpus."}],
                          progress=False)
            assert kb.delete([sorted(own_ids)[0]]) == 1
        finally:
            tenant.close()
    # The owner is not restricted; turning isolation off removes every policy.
    assert {c["name"] for c in db.corpora()} == {"tenant-a", "tenant-b"}
    assert db.disable_tenant_isolation() >= len(TABLES)
    with psycopg.connect(as_role(database_uri, role_a)) as conn:
        assert visible(conn)["corpus"] == {kb_a.id, kb_b.id}


def test_roles_cli_grants_and_lists(db, database_uri, make_role):
    from click.testing import CliRunner

    from pgrag.cli import main

    role = make_role("cli")
    db.corpus("cli-corpus", embedding_model=None)

    def run(*args: str) -> str:
        result = CliRunner().invoke(main, ["roles", *args, "--dsn", database_uri], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.output

    assert "reader" in run("grant-reader", role)
    run("grant-corpus", role, "cli-corpus")
    assert json.loads(run("list", "--json")) == [{"corpus": "cli-corpus", "role": role}]
    assert "tenant isolation on" in run("isolation", "on")
    with psycopg.connect(as_role(database_uri, role)) as conn:
        assert [r[0] for r in conn.execute("SELECT name FROM pgrag.corpus")] == ["cli-corpus"]
    assert "tenant isolation off" in run("isolation", "off")
    run("revoke", role)
    with psycopg.connect(as_role(database_uri, role)) as conn, pytest.raises(errors.InsufficientPrivilege):
        conn.execute("SELECT 1 FROM pgrag.corpus")
    result = CliRunner().invoke(main, ["roles", "grant-corpus", "no_such_role_x", "cli-corpus", "--dsn", database_uri])
    assert result.exit_code == 1 and "does not exist" in result.output


def test_revoke_corpus_hides_it_again_from_python_cli_and_sql(db, database_uri, make_role, wiki_docs):
    """Under isolation a granted corpus is visible; revoke_corpus (each of the
    three ways) hides it again, and only that grant goes. grant-writer from the CLI
    lets the role delete."""
    from click.testing import CliRunner

    from pgrag.cli import main

    db.corpus("one").ingest(wiki_docs[:2], progress=False)
    db.corpus("two").ingest(wiki_docs[2:4], progress=False)
    role = make_role("rev")
    result = CliRunner().invoke(main, ["roles", "grant-writer", role, "--dsn", database_uri], catch_exceptions=False)
    assert result.exit_code == 0 and f"{role}: writer" in result.output
    db.enable_tenant_isolation()

    def names() -> list[str]:
        with psycopg.connect(as_role(database_uri, role)) as conn:
            return [r[0] for r in conn.execute("SELECT name FROM pgrag.corpus ORDER BY name")]

    def revoke_python() -> None:
        db.revoke_corpus(role, "one")

    def revoke_cli() -> None:
        result = CliRunner().invoke(main, ["roles", "revoke-corpus", role, "one", "--dsn", database_uri],
                                    catch_exceptions=False)
        assert result.exit_code == 0 and f"{role}: no longer sees one" in result.output

    def revoke_sql() -> None:
        with psycopg.connect(database_uri) as conn:
            conn.execute("SELECT pgrag.revoke_corpus(%s, %s)", (role, "one"))

    for revoke in (revoke_python, revoke_cli, revoke_sql):
        db.grant_corpus(role, "one")
        db.grant_corpus(role, "two")
        assert names() == ["one", "two"]
        revoke()
        assert names() == ["two"], revoke.__name__
        assert db.corpus_access() == [("two", role)]
        db.revoke_corpus(role, "two")
        assert names() == [] and db.corpus_access() == []
    # the writer grant from the CLI: with a corpus granted, the role deletes in it
    db.grant_corpus(role, "two")
    tenant = pgrag.connect(as_role(database_uri, role))
    assert tenant.corpus("two", create=False).delete([wiki_docs[2]["id"]]) == 1
    tenant.close()
    db.disable_tenant_isolation()
