"""The in-server runtime: pgrag's own Python inside PostgreSQL (PL/Python), asked
from plain psycopg connections that import nothing of pgrag, as an application
in any other language would."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import numpy as np
import psycopg
import pytest
from psycopg import errors

import pgrag
from pgrag import methods
from tests.conftest import TEMPLATE, WIKI, scratch_database

QUESTIONS = ["When did Lothair II's mother die?", "Who is the mother of Lothair II?",
             "Where was the rapper of Changed It born?"]
# Methods whose options are worth one more comparison each.
OPTIONS = {"tigrag": {"hops": 1, "gamma": 5}, "cirag": {"rounds": 1, "documents": 3},
           "threadrag": {"documents": 2}, "t2rag": {"unique_chunks": 2}}


@pytest.fixture(scope="module")
def wiki_uri(pg_uri: str, template_uri: str) -> Iterator[str]:
    """One database with the sample corpus, its triples and semantic nodes, for the module."""
    with scratch_database(pg_uri, "pgrag_inserver_", TEMPLATE) as uri:
        db = pgrag.connect(uri)
        kb = db.corpus("wiki", methods=["threadrag"])
        kb.ingest(WIKI, progress=False, extract_triples="spacy")
        db.corpus("empty", methods=["threadrag"])
        db.corpus("no-nodes")                          # threadrag never enabled
        db.close()
        yield uri


@pytest.fixture(scope="module")
def kb(wiki_uri: str) -> Iterator[pgrag.Corpus]:
    db = pgrag.connect(wiki_uri)
    yield db.corpus("wiki", create=False)
    db.close()


@pytest.fixture(scope="module")
def conn(wiki_uri: str) -> Iterator[psycopg.Connection]:
    """One backend for the module: it loads the model and the graph once, as an
    application's pooled connection would."""
    with psycopg.connect(wiki_uri, autocommit=True) as c:
        yield c


def _sql_hits(conn: psycopg.Connection, corpus: str, question: str, method: str, k: int = 5,
              options: str = "{}") -> list[tuple]:
    return conn.execute("SELECT chunk_id, score, rank, title, external_id, char_start, char_end, text, details "
                        "FROM pgrag.retrieve(%s, %s, %s, %s, %s::jsonb)",
                        (corpus, question, method, k, options)).fetchall()


def test_the_server_runs_pgrag_from_the_recorded_path(conn):
    runtime, path = conn.execute("SELECT pgrag.runtime(), pgrag_internal._python_path()").fetchone()
    assert runtime == "plpython3u"
    ping = conn.execute("SELECT pgrag_internal._py('ping', '{}')").fetchone()[0]
    assert ping["pgrag"] == str(__import__("pathlib").Path(pgrag.__file__).parent)
    assert path and ping["pgrag"].startswith(path[0])


def _model_threads_after_a_call(uri: str, options: str = "") -> int:
    """A fresh backend embeds a question in process (not through the session's
    model runtime), then says how many threads its model computes on: torch's,
    or ONNX Runtime's where the backend can read the export cache."""
    with psycopg.connect(uri, autocommit=True, options=f"-c pgrag.model_runtime=inprocess {options}") as c:
        c.execute("SELECT pgrag.embed('wiki', 'Lothair II')").fetchone()
        (model,) = c.execute("SELECT pgrag_internal._py('ping', '{}')").fetchone()[0]["models"]
        return model["threads"]


@pytest.mark.slow
def test_a_backend_runs_its_model_on_one_thread_unless_its_session_asks(wiki_uri):
    # One thread a backend by default: many backends share the cores (on a
    # multi-core machine torch or ONNX Runtime would start one thread per core in each).
    assert _model_threads_after_a_call(wiki_uri) == 1
    assert _model_threads_after_a_call(wiki_uri, options="-c pgrag.torch_threads=3") == 3


@pytest.mark.parametrize("method", methods.names())
def test_every_method_through_sql_equals_the_python_call(conn, kb, method):
    """Same chunks, same order, scores within 1e-6, same details, for every
    registered method (t2rag, threadrag and cirag without an LLM in both homes)."""
    runs = [(q, {}) for q in QUESTIONS] + [(QUESTIONS[0], OPTIONS.get(method.split("-")[0], {}))]
    for question, options in runs:
        python = kb.retrieve(question, method=method, k=5, llm=False, **options) \
            if methods.get(method).takes_llm else kb.retrieve(question, method=method, k=5, **options)
        import json

        rows = _sql_hits(conn, "wiki", question, method, 5, json.dumps(options))
        assert [r[0] for r in rows] == [h.provenance.chunk_id for h in python], (method, question, options)
        assert np.allclose([r[1] for r in rows], [h.score for h in python], atol=1e-6, rtol=0)
        for r, h in zip(rows, python):
            assert r[2] == h.rank and r[3] == h.title and r[4] == h.provenance.external_id
            assert (r[5], r[6], r[7]) == (h.provenance.char_start, h.provenance.char_end, h.text)
            assert r[8].keys() == h.details.keys()
        assert rows, (method, question)


def test_multi_hop_tigrag_from_sql_finds_both_supporting_passages(conn):
    rows = conn.execute("SELECT rank, title, details FROM pgrag.retrieve('wiki', "
                        "'When did Lothair II''s mother die?', 'tigrag', 5)").fetchall()
    titles = [r[1] for r in rows]
    assert titles[:2] == ["Lothair II", "Ermengarde of Tours"] or set(titles[:2]) == {"Lothair II",
                                                                                       "Ermengarde of Tours"}
    # Lothair II, which the question names, is linked and scores best in hop 1 (title_weight);
    # without that bonus its best score is the second hop's: both hops ran in the server
    assert rows[0][2]["linked"] and rows[0][2]["hop"] == 1
    rows = conn.execute("SELECT rank, title, details FROM pgrag.retrieve('wiki', "
                        "'When did Lothair II''s mother die?', 'tigrag', 5, '{\"title_weight\": 0}')").fetchall()
    assert any(r[2]["hop"] == 2 for r in rows)


def test_trace_comes_back_as_json(conn, kb):
    out = conn.execute("SELECT pgrag.retrieve_trace('wiki', %s, 'tigrag', 3)", (QUESTIONS[0],)).fetchone()[0]
    python = kb.retrieve(QUESTIONS[0], method="tigrag", k=3)
    assert [h["chunk_id"] for h in out["hits"]] == [h.provenance.chunk_id for h in python]
    assert out["trace"]["method"] == "tigrag"
    assert [s["step"] for s in out["trace"]["steps"]] == [s["step"] for s in python.trace.steps]
    assert {"graph", "embed", "expand", "pool", "rerank", "provenance"} <= out["trace"]["timings_ms"].keys()


def test_embed_uses_the_corpus_model(conn, kb):
    vector = conn.execute("SELECT pgrag.embed('wiki', 'Lothair II')::text").fetchone()[0]
    mine = kb.embedder.encode(["Lothair II"])[0]
    theirs = np.array([float(x) for x in vector.strip("[]").split(",")])
    assert theirs.shape == mine.shape and np.allclose(theirs, mine, atol=1e-6)
    # ... and feeds the functions that take a vector, all in SQL
    rows = conn.execute("SELECT chunk_id FROM pgrag.dense('wiki', pgrag.embed('wiki', %s), 3)",
                        (QUESTIONS[1],)).fetchall()
    assert [r[0] for r in rows] == [h.provenance.chunk_id for h in kb.retrieve(QUESTIONS[1], method="dense", k=3)]


def test_ppr_in_the_server_equals_the_pure_sql_one(conn, kb):
    seeds = ["lothair", "ermengarde", "notaword"]
    fast = conn.execute("SELECT term, score FROM pgrag.ppr('wiki', %s, 0.5, 15, 1e-9, 200)", (seeds,)).fetchall()
    slow = conn.execute("SELECT term, score FROM pgrag_internal.ppr_sql('wiki', %s, 0.5, 15, 1e-9, 200)",
                        (seeds,)).fetchall()
    assert [t for t, _ in fast] == [t for t, _ in slow] and len(fast) == 15
    assert np.allclose([s for _, s in fast], [s for _, s in slow], atol=1e-9)
    assert conn.execute("SELECT count(*) FROM pgrag.ppr('wiki', ARRAY['zzqx'])").fetchone()[0] == 0


def _counts(conn: psycopg.Connection) -> tuple:
    return conn.execute("SELECT (SELECT count(*) FROM pgrag.document), (SELECT count(*) FROM pgrag.chunk), "
                        "(SELECT count(*) FROM pgrag.llm_cache), (SELECT max(version) FROM pgrag.graph_version)"
                        ).fetchone()


@pytest.mark.parametrize("call, state, message", [
    ("SELECT * FROM pgrag.retrieve('wiki', 'Lothair', 'nope')", "PR004", "unknown method 'nope'"),
    ("SELECT * FROM pgrag.retrieve('wiki', 'Lothair', 'tigrag', 5, '{\"gama\": 3}')", "PR008",
     "does not take option"),
    ("SELECT * FROM pgrag.retrieve('wiki', 'Lothair', 'tigrag', 5, '{\"hops\": 0}')", "PR008", "at least 1"),
    ("SELECT * FROM pgrag.retrieve('wiki', 'Lothair', 'dense', 5, '{\"hops\": 2}')", "PR008", "(it takes none)"),
    ("SELECT * FROM pgrag.retrieve('nowhere', 'Lothair')", "PR001", "'nowhere' does not exist"),
    ("SELECT * FROM pgrag.retrieve('wiki', 'Lothair', 'bm25', 5, '[1, 2]')", "PR005", "must be a JSON object"),
    ("SELECT * FROM pgrag.retrieve('wiki', 'Lothair', 'bm25', 5, '\"x\"')", "PR005", "must be a JSON object"),
    ("SELECT * FROM pgrag.retrieve('wiki', NULL)", "PR005", "question must not be NULL"),
    ("SELECT * FROM pgrag.retrieve('wiki', '   ')", "PR005", "question is empty"),
    ("SELECT * FROM pgrag.retrieve('wiki', 'Lothair', 'bm25', 0)", "PR005", "k must be"),
    ("SELECT * FROM pgrag.retrieve(NULL, 'Lothair')", "PR005", "corpus must be"),
    ("SELECT pgrag.embed('wiki', NULL)", "PR005", "text must not be NULL"),
    ("SELECT * FROM pgrag.ppr('wiki', ARRAY['lothair'], 1.5)", "PR005", "damping"),
])
def test_bad_input_gets_its_sqlstate_and_writes_nothing(conn, call, state, message):
    before = _counts(conn)
    with pytest.raises(psycopg.Error) as caught:
        conn.execute(call)
    assert caught.value.sqlstate == state, caught.value
    assert message in str(caught.value)
    assert str(caught.value).startswith("pgrag: "), caught.value   # pgrag's message, not Python's
    assert _counts(conn) == before
    assert conn.execute("SELECT 1").fetchone() == (1,)   # the session goes on


def test_an_empty_corpus_gives_no_rows_for_every_method(conn):
    for method in ("dense", "bm25", "hybrid", "tigrag", "threadrag", "cirag"):
        assert _sql_hits(conn, "empty", "Who is the mother of Lothair II?", method) == [], method


def test_the_python_client_maps_the_sqlstates_back(wiki_uri):
    db = pgrag.connect(wiki_uri)
    try:
        with pytest.raises(pgrag.UnknownMethod):
            db.fetchall("retrieve_sql", {"corpus": "wiki", "question": "x", "method": "nope", "k": 5,
                                         "options": "{}"})
        with pytest.raises(pgrag.CorpusNotFound):
            db.fetchall("retrieve_sql", {"corpus": "nowhere", "question": "x", "method": "bm25", "k": 5,
                                         "options": "{}"})
        with pytest.raises(pgrag.MethodNotBuilt, match=r"SELECT pgrag\.threadrag_index\('no-nodes'\)"):
            db.fetchall("retrieve_sql", {"corpus": "no-nodes", "question": "x", "method": "threadrag", "k": 5,
                                         "options": "{}"})
    finally:
        db.close()


def test_a_role_without_grants_is_refused_and_a_reader_is_served(wiki_uri, conn):
    conn.execute("DROP ROLE IF EXISTS pgrag_nobody")
    conn.execute("DROP ROLE IF EXISTS pgrag_inreader")
    conn.execute("CREATE ROLE pgrag_nobody LOGIN")
    conn.execute("CREATE ROLE pgrag_inreader LOGIN")
    db = pgrag.connect(wiki_uri)
    db.grant_reader("pgrag_inreader")
    db.close()
    base = wiki_uri.replace("postgres:@", "{}:@")
    try:
        with psycopg.connect(base.format("pgrag_nobody")) as other:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                other.execute("SELECT * FROM pgrag.retrieve('wiki', 'Lothair', 'bm25')")
        with psycopg.connect(base.format("pgrag_inreader")) as reader:
            rows = reader.execute("SELECT chunk_id FROM pgrag.retrieve('wiki', %s, 'tigrag')",
                                  (QUESTIONS[0],)).fetchall()
            assert rows
            # the runtime's path is the owner's to set, not a reader's
            with pytest.raises(psycopg.Error):
                reader.execute("SELECT pgrag_internal._record_python_path(ARRAY['/tmp'])")
    finally:
        db = pgrag.connect(wiki_uri)
        db.revoke_role("pgrag_inreader")
        db.close()
        for role in ("pgrag_nobody", "pgrag_inreader"):
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")


def test_statement_timeout_ends_the_call_and_the_backend_stays_usable(conn, kb):
    expected = [h.provenance.chunk_id for h in kb.retrieve(QUESTIONS[0], method="tigrag", k=5)]
    conn.execute("SET statement_timeout = '1ms'")
    with pytest.raises(errors.QueryCanceled):
        _sql_hits(conn, "wiki", QUESTIONS[0], "tigrag")
    conn.execute("RESET statement_timeout")
    assert [r[0] for r in _sql_hits(conn, "wiki", QUESTIONS[0], "tigrag")] == expected


def test_cancel_from_another_backend_ends_the_call(wiki_uri, conn, kb):
    """The cancel lands inside pgrag.retrieve itself: the statement is nothing
    else, and a fresh backend's first call with its models in process takes
    seconds (it loads the runtime, the model and the graph), so the call is
    still running when it comes."""
    expected = [h.provenance.chunk_id for h in kb.retrieve(QUESTIONS[0], method="cirag", k=5, llm=False)]
    with psycopg.connect(wiki_uri, autocommit=True) as fresh, psycopg.connect(wiki_uri, autocommit=True) as admin:
        pid = fresh.execute("SELECT pg_backend_pid()").fetchone()[0]
        # not the model runtime the embedded server starts: a call through it
        # would be over before the cancel comes
        fresh.execute("SELECT set_config('pgrag.model_runtime', 'inprocess', false)")

        def cancel() -> None:
            deadline = time.monotonic() + 60
            while admin.execute("SELECT state FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone() != ("active",):
                assert time.monotonic() < deadline
                time.sleep(0.01)
            time.sleep(0.05)   # inside pgrag.retrieve by now; on ONNX Runtime the whole call can end within 0.3 s
            admin.execute("SELECT pg_cancel_backend(%s)", (pid,))

        canceller = threading.Thread(target=cancel)
        canceller.start()
        with pytest.raises(errors.QueryCanceled):
            fresh.execute("SELECT count(*) FROM pgrag.retrieve('wiki', %s, 'cirag')", (QUESTIONS[0],))
        canceller.join()
        assert fresh.execute("SELECT 1").fetchone() == (1,)      # the backend lives on
    assert [r[0] for r in _sql_hits(conn, "wiki", QUESTIONS[0], "cirag")] == expected


@pytest.mark.slow
def test_a_graph_change_seen_by_another_backend(pg_uri, template_uri):
    """A backend with the graph cached sees a change made by another (the graph
    version moves), and one that rebuilds while the other queries gets results
    equal to the Python call on the new graph."""
    with scratch_database(pg_uri, "pgrag_inserver_graph_", TEMPLATE) as uri:
        db = pgrag.connect(uri)
        kb = db.corpus("g")
        kb.ingest(WIKI[:2], progress=False)
        with psycopg.connect(uri, autocommit=True) as a, psycopg.connect(uri, autocommit=True) as b:
            before = _sql_hits(a, "g", QUESTIONS[2], "tigrag")
            assert "Nicki Minaj" not in [r[3] for r in before]
            kb.ingest(WIKI[2:4], progress=False)          # bumps the graph version
            errors_seen: list[BaseException] = []

            def query_b() -> None:
                try:
                    for _ in range(3):
                        _sql_hits(b, "g", QUESTIONS[2], "tigrag")
                except BaseException as exc:  # reported below, not swallowed
                    errors_seen.append(exc)

            worker = threading.Thread(target=query_b)
            worker.start()
            after_a = _sql_hits(a, "g", QUESTIONS[2], "tigrag")
            worker.join()
            assert not errors_seen
            python = [h.provenance.chunk_id for h in kb.retrieve(QUESTIONS[2], method="tigrag", k=5)]
            assert [r[0] for r in after_a] == python == [r[0] for r in _sql_hits(b, "g", QUESTIONS[2], "tigrag")]
            assert "Nicki Minaj" in [r[3] for r in after_a]
        db.close()


def test_a_server_without_plpython_says_what_to_do(pg_uri, template_uri):
    """Where plpython3u is absent (as on a managed service), the entry points that
    need it raise PR003 naming the alternative; the pure-SQL functions keep working."""
    with scratch_database(pg_uri, "pgrag_noplpy_", TEMPLATE) as uri:
        db = pgrag.connect(uri)
        db.corpus("wiki").ingest(WIKI[:2], progress=False)
        ppr = "SELECT term, score FROM pgrag.ppr('wiki', ARRAY['lothair'], 0.5, 5, 1e-9, 200)"
        with psycopg.connect(uri, autocommit=True) as c:
            by_runtime = c.execute(ppr).fetchall()          # scipy in the server, before it goes
            c.execute("DROP EXTENSION plpython3u CASCADE")
        db.upgrade()   # what a migration on such a server installs
        assert db.runtime() == (None, [])
        with psycopg.connect(uri, autocommit=True) as c:
            assert c.execute("SELECT pgrag.runtime()").fetchone() == (None,)
            for call in ("SELECT * FROM pgrag.retrieve('wiki', 'Lothair')", "SELECT pgrag.embed('wiki', 'x')",
                         "SELECT pgrag.retrieve_trace('wiki', 'x')"):
                with pytest.raises(psycopg.Error) as caught:
                    c.execute(call)
                assert caught.value.sqlstate == "PR003"
                assert "PL/Python" in str(caught.value) and "pgrag.connect(dsn)" in caught.value.diag.message_hint
            assert c.execute("SELECT count(*) FROM pgrag.bm25('wiki', 'Lothair')").fetchone()[0] > 0
            plain = c.execute(ppr).fetchall()                # now the pure-SQL fallback
            assert plain and [t for t, _ in plain] == [t for t, _ in by_runtime]
            assert np.allclose([s for _, s in plain], [s for _, s in by_runtime], atol=1e-9)
        with pytest.raises(pgrag.RuntimeMissing):
            db.fetchall("retrieve_sql", {"corpus": "wiki", "question": "x", "method": "bm25", "k": 5,
                                         "options": "{}"})
        db.close()


def test_a_sql_identifier_in_the_question_is_only_text(conn):
    rows = _sql_hits(conn, "wiki", "Lothair'); DROP TABLE pgrag.chunk; --", "tigrag")
    assert rows and conn.execute("SELECT count(*) FROM pgrag.chunk").fetchone()[0] > 0


@pytest.mark.slow
def test_index_from_sql_equals_an_ingest_from_python(pg_uri, template_uri):
    """An application INSERTs rows and calls pgrag.index(): the corpus equals one
    ingested from Python (documents, chunks, postings, graph, entities, nodes, name vectors)."""
    tables = ("document", "sentence", "chunk", "chunk_token", "token", "token_edge", "chunk_entity",
              "semantic_node", "semantic_edge", "entity_vector")

    def snapshot(c: psycopg.Connection, corpus: str) -> dict[str, list[tuple]]:
        cid = c.execute("SELECT corpus_id FROM pgrag.corpus WHERE name = %s", (corpus,)).fetchone()[0]
        return {"chunk": c.execute("SELECT d.external_id, ch.ordinal, ch.text, ch.char_start, ch.char_end, "
                                   "ch.embedding::text FROM pgrag.chunk ch JOIN pgrag.document d USING "
                                   "(corpus_id, document_id) WHERE ch.corpus_id = %s ORDER BY 1, 2", (cid,)).fetchall(),
                "postings": c.execute("SELECT d.external_id, ch.ordinal, t.term, ct.tf FROM pgrag.chunk_token ct "
                                      "JOIN pgrag.chunk ch USING (corpus_id, chunk_id) JOIN pgrag.document d USING "
                                      "(corpus_id, document_id) JOIN pgrag.token t USING (corpus_id, token_id) "
                                      "WHERE ct.corpus_id = %s ORDER BY 1, 2, 3", (cid,)).fetchall(),
                "edges": c.execute("SELECT ta.term, tb.term, e.weight FROM pgrag.token_edge e JOIN pgrag.token ta "
                                   "ON ta.corpus_id = e.corpus_id AND ta.token_id = e.token_a JOIN pgrag.token tb "
                                   "ON tb.corpus_id = e.corpus_id AND tb.token_id = e.token_b WHERE e.corpus_id = %s "
                                   "ORDER BY 1, 2", (cid,)).fetchall(),
                "names": c.execute("SELECT d.external_id, v.key, v.sentence FROM pgrag.entity_vector v JOIN "
                                   "pgrag.document d USING (corpus_id, document_id) WHERE v.corpus_id = %s "
                                   "ORDER BY 1, 2", (cid,)).fetchall(),
                "counts": [c.execute(f"SELECT count(*) FROM pgrag.{t} WHERE corpus_id = %s", (cid,)).fetchone()
                           for t in tables]}

    with scratch_database(pg_uri, "pgrag_inserver_index_", TEMPLATE) as uri:
        db = pgrag.connect(uri)
        db.corpus("py", methods=["threadrag"]).ingest(WIKI, progress=False)
        db.corpus("sql", methods=["threadrag"])     # then pgrag.index() maintains the nodes in the server
        db.close()
        with psycopg.connect(uri, autocommit=True) as c:
            for d in WIKI:
                c.execute("INSERT INTO pgrag.document (corpus_id, external_id, title, body) "
                          "SELECT corpus_id, %s, %s, %s FROM pgrag.corpus WHERE name = 'sql'",
                          (d["id"], d["title"], d["text"]))
            report = c.execute("SELECT pgrag.index('sql')").fetchone()[0]
            assert report["documents"] == report["replaced"] == len(WIKI), report   # the rows existed, unindexed
            assert report["chunks"] > len(WIKI) and report["nodes"] > 0, report
            assert snapshot(c, "py")["names"] and snapshot(c, "sql") == snapshot(c, "py")
            assert c.execute("SELECT pgrag.index('sql')").fetchone()[0]["documents"] == 0   # nothing pending
            # a bad row fails the call with its SQLSTATE and writes nothing
            before = snapshot(c, "sql")
            c.execute("INSERT INTO pgrag.document (corpus_id, external_id, title, body) "
                      "SELECT corpus_id, 'blank', 'Blank', '   ' FROM pgrag.corpus WHERE name = 'sql'")
            with pytest.raises(psycopg.Error) as caught:
                c.execute("SELECT pgrag.index('sql')")
            assert caught.value.sqlstate == "PR005" and "no text" in str(caught.value)
            c.execute("DELETE FROM pgrag.document WHERE external_id = 'blank'")
            assert snapshot(c, "sql") == before
            # a reader may not index
            c.execute("DROP ROLE IF EXISTS pgrag_idxreader")
            c.execute("CREATE ROLE pgrag_idxreader LOGIN")
            db = pgrag.connect(uri)
            db.grant_reader("pgrag_idxreader")
            c.execute("INSERT INTO pgrag.document (corpus_id, external_id, title, body) "
                      "SELECT corpus_id, 'late', 'Late', 'A late document about Lotharingia.' "
                      "FROM pgrag.corpus WHERE name = 'sql'")
            with psycopg.connect(uri.replace("postgres:@", "pgrag_idxreader:@")) as reader:
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    reader.execute("SELECT pgrag.index('sql')")
            assert c.execute("SELECT count(*) FROM pgrag.document WHERE indexed_hash IS NULL").fetchone() == (1,)
            db.revoke_role("pgrag_idxreader")
            db.close()
            c.execute("DROP OWNED BY pgrag_idxreader")
            c.execute("DROP ROLE pgrag_idxreader")


def test_extract_from_sql_equals_the_python_extraction_and_resumes(pg_uri, template_uri):
    """pgrag.extract('c', 'spacy') gives the triples, offsets and proposition
    embeddings that kb.extract_triples() gives; a second call finds nothing left."""
    with scratch_database(pg_uri, "pgrag_inserver_extract_", TEMPLATE) as uri:
        db = pgrag.connect(uri)
        py, sq = db.corpus("py"), db.corpus("sq")
        py.ingest(WIKI[:3], progress=False, extract_triples="spacy")
        sq.ingest(WIKI[:3], progress=False)
        with psycopg.connect(uri, autocommit=True) as c:
            report = c.execute("SELECT pgrag.extract('sq', 'spacy')").fetchone()[0]
            assert report["chunks"] > 0 and report["triples"] > 0
            assert c.execute("SELECT pgrag.extract('sq')").fetchone()[0]["chunks"] == 0   # resumed: nothing left

            def triples(corpus: str) -> list[tuple]:
                return c.execute(
                    "SELECT d.external_id, ch.ordinal, t.ordinal, t.subject, t.predicate, t.object, t.char_start, "
                    "t.char_end, t.extractor, t.embedding::text FROM pgrag.triple t JOIN pgrag.chunk ch USING "
                    "(corpus_id, chunk_id) JOIN pgrag.document d USING (corpus_id, document_id) "
                    "JOIN pgrag.corpus k USING (corpus_id) WHERE k.name = %s ORDER BY 1, 2, 3", (corpus,)).fetchall()

            sq_rows, py_rows = triples("sq"), triples("py")
            assert [r[:-1] for r in sq_rows] == [r[:-1] for r in py_rows] and len(py_rows) == report["triples"]
            # The embeddings agree to float noise, not bit for bit: this client embeds
            # on ONNX Runtime, a backend that cannot read the export cache on torch.
            sq_vectors, py_vectors = (np.array([json.loads(r[-1]) for r in rows]) for rows in (sq_rows, py_rows))
            assert np.max(1 - np.sum(sq_vectors * py_vectors, axis=1)) < 1e-5
            with pytest.raises(psycopg.Error) as caught:
                c.execute("SELECT pgrag.extract('sq', 'gpt')")
            assert caught.value.sqlstate == "PR005"
            with pytest.raises(psycopg.Error) as caught:
                c.execute("SELECT pgrag.extract('sq', 'llm')")   # no LLM set for this session
            assert caught.value.sqlstate == "PR005" and "needs an LLM" in str(caught.value)
        db.close()


THREADED_SWEEP = """
import numpy as np, scipy.sparse as sp, signal
from pgrag.index import sweep
rng = np.random.default_rng(1)
m = sp.coo_matrix((rng.uniform(1, 5, 300000), (rng.integers(0, 20000, 300000), rng.integers(0, 20000, 300000))),
                  shape=(20000, 20000)).tocsr()
x = rng.random(20000)
with sweep.pool():
    if not np.array_equal(sweep.product(m, sweep.row_blocks(m, 2), x), m @ x):
        plpy.error("threaded product differs")
    mask = sweep._current.get().get().submit(lambda: signal.pthread_sigmask(signal.SIG_BLOCK, [])).result()
if signal.SIGINT not in mask or signal.SIGALRM not in mask or signal.SIGUSR1 not in mask:
    plpy.error("a sweep thread takes signals: %s" % sorted(mask))
"""


def test_threaded_sweeps_in_a_backend_leave_it_cancellable(wiki_uri, kb):
    """A PPR sweep's threads inside a server backend (pgrag.index.sweep): the product
    is the single one, the threads block the signals PostgreSQL uses, and after
    them the backend still obeys a statement timeout and a cancel, and answers."""
    expected = [h.provenance.chunk_id for h in kb.retrieve(QUESTIONS[0], method="tigrag", k=5)]
    with psycopg.connect(wiki_uri, autocommit=True) as c, psycopg.connect(wiki_uri, autocommit=True) as admin:
        c.execute("SELECT pgrag.embed('wiki', 'warm up')")        # the runtime's sys.path
        c.execute(f"DO $$ {THREADED_SWEEP} $$ LANGUAGE plpython3u")
        c.execute("SET statement_timeout = '100ms'")
        with pytest.raises(errors.QueryCanceled):
            c.execute("SELECT pg_sleep(2)")
        c.execute("RESET statement_timeout")
        pid = c.execute("SELECT pg_backend_pid()").fetchone()[0]
        canceller = threading.Timer(0.2, lambda: admin.execute("SELECT pg_cancel_backend(%s)", (pid,)))
        canceller.start()
        with pytest.raises(errors.QueryCanceled):
            c.execute("SELECT pg_sleep(3)")
        canceller.join()
        assert [r[0] for r in _sql_hits(c, "wiki", QUESTIONS[0], "tigrag")] == expected
