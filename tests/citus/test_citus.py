"""pgrag on a running Citus cluster (coordinator + 2 workers): layout, identity
columns, partial HNSW indexes, tenant isolation, results equal to a single
PostgreSQL, one worker per corpus-scoped statement, and upgrades."""

from __future__ import annotations

import re

import numpy as np
import psycopg
import pytest

import pgrag
from pgrag import distribute, methods
from pgrag.queries import query

from .conftest import CORPORA, DATABASE, SHARDS, strict, workers_touched

QUESTIONS = ["Who is the father of Lothair II?", "Where was Nicki Minaj born?",
             "Which emperor did Ermengarde of Tours marry?"]
CORPUS_TABLES = {"document", "sentence", "chunk", "token", "chunk_token", "token_edge", "chunk_entity",
                 "graph_version", "llm_cache", "triple", "chunk_extraction", "semantic_node", "semantic_edge"}


def _vec(kb: pgrag.Corpus, text: str) -> np.ndarray:
    return kb.embedder.encode([text])[0]


def _ranked(hits) -> list[tuple[str, float]]:
    return [(h.title, float(h.score)) for h in hits]


def _same(a: list[tuple[str, float]], b: list[tuple[str, float]]) -> None:
    assert [t for t, _ in a] == [t for t, _ in b]
    assert np.allclose([s for _, s in a], [s for _, s in b], atol=1e-6, rtol=0)


def _explain(conn: psycopg.Connection, statement: str, params: dict) -> str:
    """EXPLAIN with the values inlined: Citus shows the worker's plan only for a
    statement without parameters."""
    cur = psycopg.ClientCursor(conn)
    return "\n".join(r[0] for r in cur.execute("EXPLAIN (COSTS OFF) " + statement, params).fetchall())


def _worker_of(db: pgrag.Database, corpus: str) -> int:
    ports = {port for _t, _s, _n, port in distribute.placement(db, corpus)}
    assert len(ports) == 1, f"corpus {corpus} is split over {ports}"
    return ports.pop()


# -- layout ---------------------------------------------------------------------

def test_every_corpus_table_is_distributed_by_corpus_and_colocated(citus_db):
    layout = {t: (kind, coloc, shards) for t, kind, coloc, shards in distribute.layout(citus_db)}
    assert layout["corpus"][0] == "reference" and layout["corpus_acl"][0] == "reference"
    assert layout["alembic_version"][0] == "local (coordinator)"
    distributed = {t for t, (kind, _c, _s) in layout.items() if kind == "distributed by corpus_id"}
    assert CORPUS_TABLES <= distributed
    # following an application table stays on the coordinator (sql/distribute.sql)
    assert {layout["follow"][0], layout["follow_queue"][0]} <= {"local (coordinator)", "citus local"}
    assert distributed == set(layout) - {"corpus", "corpus_acl", "alembic_version", "follow", "follow_queue"}
    assert len({layout[t][1] for t in distributed}) == 1          # one co-location group
    assert {layout[t][2] for t in distributed} == {SHARDS}


def test_distribute_is_idempotent_and_refuses_a_server_without_citus(citus_db, db):
    before = distribute.layout(citus_db)
    assert distribute.distribute(citus_db) == before
    with pytest.raises(pgrag.PgragError, match="citus extension is not installed"):
        distribute.distribute(db)                                    # the single-node test database


def test_six_corpora_spread_over_both_workers(citus_db, citus_cluster):
    placement = {name: _worker_of(citus_db, name) for name in CORPORA}
    assert set(placement.values()) == {w.port for w in citus_cluster.workers}, placement
    for name, port in placement.items():            # the rows really are on that worker, and only there
        cid = citus_db.fetch_row("corpus_by_name", {"name": name})[0]
        shard = next(s for t, s, _n, _p in distribute.placement(citus_db, name) if t == "chunk")
        for worker in citus_cluster.workers:
            found = worker.execute("SELECT to_regclass(%s) IS NOT NULL", (f"pgrag.chunk_{shard}",),
                                   database=DATABASE)[0][0]
            assert found == (worker.port == port)
            if found:
                n = worker.execute(f"SELECT count(*) FROM pgrag.chunk_{shard} WHERE corpus_id = %s", (cid,),
                                   database=DATABASE)[0][0]
                assert n == len(CORPORA[name])


# -- identity columns, partial HNSW indexes ----------------------------------------

def test_identity_columns_assign_unique_ids_through_the_coordinator(citus_db):
    with citus_db.transaction() as conn:
        rows = conn.execute("SELECT corpus_id, chunk_id FROM pgrag.chunk").fetchall()
        ids = conn.execute(query("allocate_chunk_ids"), {"n": 3}).fetchall()
        docs = conn.execute("SELECT count(DISTINCT document_id), count(*) FROM pgrag.document").fetchone()
    assert len({c for _, c in rows}) == len(rows) > 0                 # unique across corpora and workers
    assert len({i for (i,) in ids}) == 3 and min(i for (i,) in ids) > max(c for _, c in rows)
    assert docs[0] == docs[1]


def test_partial_hnsw_index_serves_dense_on_the_corpus_worker(citus_db, citus_cluster):
    kb = citus_db.corpus("wiki")
    port = _worker_of(citus_db, "wiki")
    dim = len(_vec(kb, "x"))
    cid = kb.id
    shard = next(s for t, s, _n, _p in distribute.placement(citus_db, "wiki") if t == "chunk")
    for worker in citus_cluster.workers:       # the index is on the shards, empty where the corpus is not
        names = {r[0] for r in worker.execute(      # (pg_indexes hides shards from clients)
            "SELECT indexrelid::regclass::text FROM pg_index WHERE indrelid = to_regclass(%s)",
            (f"pgrag.chunk_{shard}",), database=DATABASE)}
        assert (f"pgrag.chunk_embedding_hnsw_{cid}_{shard}" in names) == (worker.port == port), names
    with psycopg.connect(citus_db.dsn) as conn:
        from pgvector.psycopg import register_vector

        register_vector(conn)
        conn.execute("SET citus.propagate_set_commands = 'local'")  # SET LOCAL reaches the worker
        conn.execute("SET LOCAL enable_seqscan = off")
        plan = _explain(conn, f"SELECT chunk_id FROM pgrag.chunk WHERE corpus_id = %(c)s "
                              f"ORDER BY embedding::vector({dim}) <=> %(v)s LIMIT 5",
                        {"c": kb.id, "v": _vec(kb, "Lothair")})
    assert "Task Count: 1" in plan
    assert re.search(rf"Index Scan using chunk_embedding_hnsw_{kb.id}_\d+", plan), plan
    assert f"port={port}" in plan


# -- tenant isolation ---------------------------------------------------------------

def test_tenant_isolation_on_distributed_tables(citus_uri, citus_db):
    role = "pgrag_citus_tenant"
    with psycopg.connect(citus_uri, autocommit=True) as conn:
        conn.execute(f"DROP ROLE IF EXISTS {role}")
        conn.execute(f"CREATE ROLE {role} LOGIN")
    citus_db.grant_reader(role)
    try:
        assert citus_db.enable_tenant_isolation() >= len(CORPUS_TABLES) + 2
        citus_db.grant_corpus(role, "tenant1")
        uri = citus_uri.replace("postgres@", f"{role}@")
        tenant = pgrag.connect(uri)
        try:
            assert [c["name"] for c in tenant.corpora()] == ["tenant1"]
            hits = tenant.corpus("tenant1", create=False).retrieve("river Arden1", method="bm25")
            assert {h.title for h in hits} <= {"Tenant 1 river", "Tenant 1 king"} and hits
            with pytest.raises(pgrag.CorpusNotFound):
                tenant.corpus("wiki", create=False)
            with tenant.transaction() as conn:                     # rows of other corpora are invisible
                assert conn.execute("SELECT count(*) FROM pgrag.chunk WHERE corpus_id <> %s",
                                    (citus_db.corpus("tenant1").id,)).fetchone()[0] == 0
        finally:
            tenant.close()
    finally:
        citus_db.disable_tenant_isolation()
        citus_db.revoke_role(role)
        with psycopg.connect(citus_uri, autocommit=True) as conn:
            conn.execute(f"REVOKE ALL ON SCHEMA public FROM {role}")
            conn.execute(f"DROP ROLE IF EXISTS {role}")


# -- same results as a single node --------------------------------------------------

@pytest.mark.parametrize("method", ["dense", "bm25", "hybrid", "tigrag", "tigrag-paper", "t2rag", "cirag",
                                    "threadrag"])
def test_python_methods_match_a_single_node(citus_db, single_db, method):
    assert method in methods.names()
    for question in QUESTIONS:
        a = citus_db.corpus("wiki").retrieve(question, method=method, k=5, **({} if method in (
            "dense", "bm25", "hybrid", "tigrag", "tigrag-paper") else {"llm": False}))
        b = single_db.corpus("wiki").retrieve(question, method=method, k=5, **({} if method in (
            "dense", "bm25", "hybrid", "tigrag", "tigrag-paper") else {"llm": False}))
        assert a, (method, question)
        _same(_ranked(a), _ranked(b))


def _chunk_of(kb: pgrag.Corpus, external_id: str) -> int:
    with kb.db.transaction() as conn:
        return conn.execute(
            "SELECT c.chunk_id FROM pgrag.chunk c JOIN pgrag.document d ON d.corpus_id = c.corpus_id "
            "AND d.document_id = c.document_id WHERE c.corpus_id = %s AND d.external_id = %s "
            "ORDER BY c.ordinal LIMIT 1", (kb.id, external_id)).fetchone()[0]


def _sql_calls(kb: pgrag.Corpus) -> dict[str, tuple[str, dict]]:
    q = QUESTIONS[0]
    v = _vec(kb, q)
    return {
        "bm25": ("SELECT title, score FROM pgrag.bm25(%(c)s, %(q)s, 5)", {"c": kb.name, "q": q}),
        "dense": ("SELECT title, score FROM pgrag.dense(%(c)s, %(v)s, 5)", {"c": kb.name, "v": v}),
        "hybrid": ("SELECT title, score FROM pgrag.hybrid(%(c)s, %(q)s, %(v)s, 5)", {"c": kb.name, "q": q, "v": v}),
        "tigrag": ("SELECT title, score FROM pgrag.tigrag(%(c)s, %(q)s, %(v)s, 5)", {"c": kb.name, "q": q, "v": v}),
        "ppr": ("SELECT term, score FROM pgrag.ppr(%(c)s, ARRAY['lothair', 'father'])", {"c": kb.name}),
        "propositions": ("SELECT title || ': ' || proposition, score FROM pgrag.propositions(%(c)s, %(v)s, 3)",
                         {"c": kb.name, "v": v}),
        "cirag_documents": ("SELECT rank::text, score FROM pgrag_internal.cirag_documents(%(c)s, %(v)s, 3)",
                            {"c": kb.name, "v": v}),
        "cirag_candidates": ("SELECT title || ': ' || proposition || ' / ' || sentence, score "
                             "FROM pgrag.cirag_candidates(%(c)s, %(v)s, 3, 10)", {"c": kb.name, "v": v}),
        "chunk_sentences": ("SELECT s.text, s.char_start::float8 FROM pgrag.chunk_sentences(%(c)s, %(chunk)s) s",
                            {"c": kb.name, "chunk": _chunk_of(kb, "long")}),
        "tokenize": ("SELECT t, 0.0::float8 FROM unnest(pgrag.tokenize(%(q)s)) t", {"q": q}),
    }


@pytest.mark.parametrize("function", ["bm25", "dense", "hybrid", "tigrag", "ppr", "propositions",
                                      "cirag_documents", "cirag_candidates", "chunk_sentences", "tokenize"])
def test_sql_functions_match_a_single_node(citus_db, single_db, function):
    statement, params = _sql_calls(citus_db.corpus("wiki"))[function]
    with citus_db.transaction() as c1, single_db.transaction() as c2:
        a = [(str(x), float(y)) for x, y in c1.execute(statement, params).fetchall()]
        b = [(str(x), float(y)) for x, y in c2.execute(statement, params).fetchall()]
    assert a, function
    _same(a, b)


# -- routing: one worker per corpus-scoped statement ----------------------------------

@pytest.mark.parametrize("function", ["bm25", "dense", "hybrid", "tigrag", "ppr", "propositions",
                                      "cirag_documents", "cirag_candidates", "chunk_sentences"])
def test_sql_functions_run_on_the_corpus_worker_only(citus_db, function):
    statement, params = _sql_calls(citus_db.corpus("wiki"))[function]
    rows, ports = workers_touched(strict(citus_db.dsn), statement, params)
    assert rows
    assert ports == {_worker_of(citus_db, "wiki")}, ports


@pytest.mark.parametrize("method", ["dense", "bm25", "hybrid", "tigrag", "t2rag", "cirag", "threadrag"])
def test_methods_never_fan_out(citus_db, method):
    """Through a connection on which Citus raises an error for any statement
    that would run on more than one shard."""
    db = pgrag.connect(strict(citus_db.dsn))
    try:
        kb = db.corpus("wiki", create=False)
        opts = {} if method in ("dense", "bm25", "hybrid", "tigrag") else {"llm": False}
        for question in QUESTIONS:
            assert kb.retrieve(question, method=method, k=5, **opts)
    finally:
        db.close()


HOT = {  # named statements (sql/queries_*.sql) that the methods run per question, with values
    "hits": lambda kb, ids: {"corpus_id": kb.id, "chunk_ids": ids, "scores": [1.0] * len(ids)},
    # TIGRAG's postings matrix, read once per graph version (pgrag/index/postings.py)
    "token_df": lambda kb, ids: {"corpus_id": kb.id},
    "chunk_lengths": lambda kb, ids: {"corpus_id": kb.id},
    "postings_arrays": lambda kb, ids: {"corpus_id": kb.id},
    "graph_file_key": lambda kb, ids: {"corpus_id": kb.id},
    "chunk_vectors": lambda kb, ids: {"corpus_id": kb.id, "chunk_ids": None},
    "corpus_dim": lambda kb, ids: {"corpus_id": kb.id},
    # the delta after a small change (pgrag.index.delta.advance)
    "postings_of_chunks": lambda kb, ids: {"corpus_id": kb.id, "chunk_ids": ids[:2]},
    "delta_start": lambda kb, ids: {"corpus_id": kb.id},
    "chunks_after": lambda kb, ids: {"corpus_id": kb.id, "after": ids[-1]},
    "removals_since": lambda kb, ids: {"corpus_id": kb.id, "since": 0},
    "token_df_of": lambda kb, ids: {"corpus_id": kb.id, "token_ids": [1, 2, 3]},
    "chunk_entities": lambda kb, ids: {"corpus_id": kb.id, "chunk_ids": ids},
    "chunk_texts": lambda kb, ids: {"corpus_id": kb.id, "chunk_ids": ids},
    "graph_tokens": lambda kb, ids: {"corpus_id": kb.id},
    "graph_version": lambda kb, ids: {"corpus_id": kb.id},
    "threadrag_nodes": lambda kb, ids: {"corpus_id": kb.id, "document_ids": [1, 2], "labels": ["PERSON"]},
    "dense_many": lambda kb, ids: {"corpus": kb.name, "embeddings": [_vec(kb, "x"), _vec(kb, "y")], "k": 5},
    "entity_vectors": lambda kb, ids: {"corpus_id": kb.id, "keys": ["paris", "france"]},
    "threadrag_stored_edges": lambda kb, ids: {"corpus_id": kb.id, "node_ids": [1, 2, 3]},
    "threadrag_chunks": lambda kb, ids: {"corpus_id": kb.id, "document_ids": [1], "starts": [0], "ends": [50]},
    "cirag_unextracted": lambda kb, ids: {"corpus_id": kb.id, "document_ids": [1, 2], "extractor": "spacy"},
    "llm_cache_get": lambda kb, ids: {"corpus_id": kb.id, "key": "k"},
    "document_states": lambda kb, ids: {"corpus_id": kb.id, "ids": ["lothair"]},
}


@pytest.mark.parametrize("name", sorted(HOT))
def test_hot_queries_plan_one_task(citus_db, name):
    kb = citus_db.corpus("wiki")
    with citus_db.transaction() as conn:
        ids = [r[0] for r in conn.execute("SELECT chunk_id FROM pgrag.chunk WHERE corpus_id = %s", (kb.id,))]
        plan = _explain(conn, query(name), HOT[name](kb, ids))
    if "Custom Scan (Citus" in plan:
        assert re.findall(r"Task Count: (\d+)", plan) and set(re.findall(r"Task Count: (\d+)", plan)) == {"1"}, plan
    else:  # a function scan: its statements are checked by the strict connection above
        rows, ports = workers_touched(strict(citus_db.dsn), query(name), HOT[name](kb, ids))
        assert len(ports) <= 1


def test_admin_listing_fans_out_as_documented(citus_db):
    """Listing every corpus with its size is the one statement that reads every shard."""
    with pytest.raises(pgrag.PgragError, match="multi-task"):
        strict_db = pgrag.connect(strict(citus_db.dsn))
        try:
            strict_db.corpora()
        finally:
            strict_db.close()
    assert {c["name"] for c in citus_db.corpora()} >= set(CORPORA) | {"wiki"}


# -- writes through the coordinator -----------------------------------------------------

def test_ingest_replace_and_delete_match_a_single_node(citus_db, single_db):
    doc = {"id": "extra", "title": "Teutberga", "text": "Teutberga was a queen of Lotharingia. "
                                                        "She was the daughter of Boso the Elder."}
    changed = dict(doc, text=doc["text"] + " Her marriage to Lothair II was annulled.")
    for db in (citus_db, single_db):
        strict_db = pgrag.connect(strict(db.dsn)) if db is citus_db else db
        try:
            kb = strict_db.corpus("tenant3")
            kb.ingest([dict(doc)], progress=False)
            kb.ingest([dict(changed)], progress=False)
        finally:
            if strict_db is not db:
                strict_db.close()
    a = _ranked(citus_db.corpus("tenant3").retrieve("Teutberga marriage annulled", method="hybrid"))
    b = _ranked(single_db.corpus("tenant3").retrieve("Teutberga marriage annulled", method="hybrid"))
    _same(a, b)
    assert a[0][0] == "Teutberga"
    for db in (citus_db, single_db):
        assert db.corpus("tenant3").delete(["extra"]) == 1
    a = _ranked(citus_db.corpus("tenant3").retrieve("Teutberga marriage annulled", method="bm25"))
    b = _ranked(single_db.corpus("tenant3").retrieve("Teutberga marriage annulled", method="bm25"))
    _same(a, b)
    assert "Teutberga" not in {t for t, _ in a}
    with citus_db.transaction() as c1, single_db.transaction() as c2:
        stats = "SELECT count(*), coalesce(sum(df), 0) FROM pgrag.token WHERE corpus_id = %s"
        assert (c1.execute(stats, (citus_db.corpus("tenant3").id,)).fetchone()
                == c2.execute(stats, (single_db.corpus("tenant3").id,)).fetchone())


# -- the in-server runtime (PL/Python) on Citus -------------------------------------------

@pytest.mark.parametrize("method", ["dense", "bm25", "tigrag"])
def test_inserver_retrieve_runs_on_the_coordinator_and_routes_per_statement(citus_db, single_db, method):
    """pgrag.retrieve's Python runs where it is called, the coordinator; each SPI
    statement it issues is routed by Citus to the corpus's worker (strict
    connection: none may fan out), with the single node's results."""
    language, _path = citus_db.runtime()
    if language is None:
        pytest.skip("no in-server runtime (plpython3u) on this server")
    statement = "SELECT title, score FROM pgrag.retrieve(%(c)s, %(q)s, %(m)s, 5)"
    for question in QUESTIONS[:2]:
        params = {"c": "wiki", "q": question, "m": method}
        rows, ports = workers_touched(strict(citus_db.dsn), statement, params)
        with single_db.transaction() as conn:
            expected = [(t, float(s)) for t, s in conn.execute(statement, params).fetchall()]
        assert rows
        _same([(t, float(s)) for t, s in rows], expected)
        assert ports == {_worker_of(citus_db, "wiki")}, ports
