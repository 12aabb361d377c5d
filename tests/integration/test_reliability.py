"""Reliability (issue 9, items 1-3): incremental maintenance equals a rebuild for
any sequence of adds, replacements and deletes (every derived table: statistics,
postings, edges, entities, triples, semantic nodes and edges, embeddings); a SIGKILLed ingest leaves every
document fully indexed or absent and a re-run completes it; concurrent ingests,
deletes and queries neither deadlock, duplicate, lose updates nor see a stale
token graph."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pgrag
from pgrag.index.cache import token_graph
from pgrag.index.graph import load_graph
from tests.integration.test_ingest import counts, statistics

# Real subprocesses, long ingests and hypothesis sequences: minutes, not seconds.
pytestmark = pytest.mark.slow

# Five documents, three versions each: shared names (Lothair, Ermengarde, Tours)
# make edges, document frequencies and triples overlap across documents.
VERSIONS = [
    ["Lothair II was king of Lotharingia. He married Teutberga in 855.",
     "Lothair II ruled Lotharingia until his death. Teutberga was his wife.",
     "Lothair II founded an abbey in Tours. The abbey housed monks from Lotharingia."],
    ["Ermengarde of Tours married Lothair I in Thionville. She died in 851.",
     "Ermengarde of Tours was the daughter of Hugh of Tours.",
     "Hugh of Tours belonged to the Etichonen family. Ermengarde was his daughter."],
    ["Nicki Minaj is a rapper. She was born in Port of Spain.",
     "Nicki Minaj moved to Queens. Queens is a borough of New York.",
     "Lil Wayne signed Nicki Minaj. Lil Wayne is a rapper from New Orleans."],
    ["Teutberga was the daughter of Boso the Elder. Boso ruled in Burgundy.",
     "Boso the Elder had a daughter named Teutberga. Lothair II married her.",
     "Burgundy was ruled by Boso the Elder. Teutberga lived in Lotharingia."],
    ["Thionville is a town in Lorraine. Lothair I held court in Thionville.",
     "The court of Thionville saw the marriage of Lothair I and Ermengarde of Tours.",
     # Long enough (over 1,000 characters) to be cut into several semantic nodes.
     "Lorraine takes its name from Lotharingia. Thionville lies in Lorraine. "
     + " ".join(f"The river Moselle floods the meadows of Thionville in spring number {n}." for n in range(8))
     + " Nicki Minaj performed a concert in New York. The rapper sang with Lil Wayne on stage. "
     + " ".join(f"Queens cheered the rapper for song number {n} of the evening." for n in range(8))],
]


def doc(i: int, v: int) -> dict:
    return {"id": f"d{i}", "title": f"Document {i}", "text": VERSIONS[i][v]}


def everything(db: pgrag.Database, corpus_id: int) -> dict:
    """statistics() plus triples, and the chunk and proposition embeddings, all
    keyed by content so that corpora built in different orders compare."""
    out = statistics(db, corpus_id)
    with db.transaction() as conn:
        out["triples"] = sorted(conn.execute(
            """SELECT d.external_id, c.ordinal, t.extractor, t.ordinal, t.subject, t.predicate, t.object,
                      t.proposition, t.char_start, t.char_end
               FROM pgrag.triple t
               JOIN pgrag.chunk c ON c.corpus_id = t.corpus_id AND c.chunk_id = t.chunk_id
               JOIN pgrag.document d ON d.corpus_id = c.corpus_id AND d.document_id = c.document_id
               WHERE t.corpus_id = %s""", (corpus_id,)).fetchall())
        out["extracted"] = sorted(conn.execute(
            """SELECT d.external_id, c.ordinal, x.extractor, x.triples, x.failed
               FROM pgrag.chunk_extraction x
               JOIN pgrag.chunk c ON c.corpus_id = x.corpus_id AND c.chunk_id = x.chunk_id
               JOIN pgrag.document d ON d.corpus_id = c.corpus_id AND d.document_id = c.document_id
               WHERE x.corpus_id = %s""", (corpus_id,)).fetchall())
        out["nodes"] = sorted(conn.execute(
            """SELECT d.external_id, n.ordinal, n.first_sentence, n.last_sentence, n.char_start, n.char_end, n.text
               FROM pgrag.semantic_node n JOIN pgrag.document d USING (corpus_id, document_id)
               WHERE n.corpus_id = %s""", (corpus_id,)).fetchall())
        out["node_edges"] = sorted(conn.execute(
            """SELECT da.external_id, a.ordinal, db.external_id, b.ordinal, e.kind, e.weight
               FROM pgrag.semantic_edge e
               JOIN pgrag.semantic_node a ON a.corpus_id = e.corpus_id AND a.node_id = e.node_a
               JOIN pgrag.semantic_node b ON b.corpus_id = e.corpus_id AND b.node_id = e.node_b
               JOIN pgrag.document da ON da.corpus_id = a.corpus_id AND da.document_id = a.document_id
               JOIN pgrag.document db ON db.corpus_id = b.corpus_id AND db.document_id = b.document_id
               WHERE e.corpus_id = %s""", (corpus_id,)).fetchall())
        out["names"] = sorted(conn.execute(
            """SELECT d.external_id, v.key, v.sentence FROM pgrag.entity_vector v
               JOIN pgrag.document d USING (corpus_id, document_id) WHERE v.corpus_id = %s""",
            (corpus_id,)).fetchall())
        out["documents"] = sorted(conn.execute(
            "SELECT external_id, title, body, content_hash = indexed_hash FROM pgrag.document WHERE corpus_id = %s",
            (corpus_id,)).fetchall())
        vectors = conn.execute(
            """SELECT d.external_id || '/' || c.ordinal, c.embedding::text FROM pgrag.chunk c
               JOIN pgrag.document d USING (corpus_id, document_id) WHERE c.corpus_id = %s
               UNION ALL
               SELECT d.external_id || '/' || c.ordinal || '/' || t.ordinal, t.embedding::text FROM pgrag.triple t
               JOIN pgrag.chunk c ON c.corpus_id = t.corpus_id AND c.chunk_id = t.chunk_id
               JOIN pgrag.document d ON d.corpus_id = c.corpus_id AND d.document_id = c.document_id
               WHERE t.corpus_id = %s
               UNION ALL
               SELECT d.external_id || '#' || n.ordinal, n.embedding::text FROM pgrag.semantic_node n
               JOIN pgrag.document d USING (corpus_id, document_id) WHERE n.corpus_id = %s
               UNION ALL
               SELECT d.external_id || '@' || v.key, v.embedding::text FROM pgrag.entity_vector v
               JOIN pgrag.document d USING (corpus_id, document_id) WHERE v.corpus_id = %s""",
            (corpus_id, corpus_id, corpus_id, corpus_id)).fetchall()
    out["vectors"] = {key: np.array(json.loads(v)) for key, v in vectors}
    return out


def assert_same(a: dict, b: dict) -> None:
    va, vb = a.pop("vectors"), b.pop("vectors")
    assert a == b
    assert va.keys() == vb.keys()
    for key in va:  # embeddings of equal text, possibly batched differently
        assert np.allclose(va[key], vb[key], atol=1e-5), key


def test_the_long_version_has_several_nodes(db):
    """So that the sequences below exercise node splitting and narrative edges."""
    kb = db.corpus("long", methods=["threadrag"])
    kb.ingest([doc(4, 2)], progress=False)
    state = everything(db, kb.id)
    assert len(state["nodes"]) >= 2 and len(state["node_edges"]) == len(state["nodes"]) - 1


def document_of(put: tuple[int, int]) -> int:
    return put[0]


# Named functions, no lambdas: hypothesis describes a lambda by parsing the test
# file's source, and CPython 3.11's AST constructor is not safe while another
# thread parses (gh-106905; tests/leaks.py fails a test that leaves a thread).
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.lists(st.tuples(st.integers(0, 4), st.integers(0, 2)),
                                           min_size=1, max_size=3, unique_by=document_of)),
        st.tuples(st.just("delete"), st.lists(st.integers(0, 4), min_size=1, max_size=2, unique=True)),
    ),
    min_size=1, max_size=6)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_any_sequence_of_updates_equals_a_rebuild(db, ops):
    name = f"seq-{random.getrandbits(40):x}"
    kb = db.corpus(name, methods=["threadrag"])
    final: dict[int, int] = {}
    for op, args in ops:
        if op == "put":
            kb.ingest([doc(i, v) for i, v in args], progress=False, extract_triples="spacy")
            final.update(dict(args))
        else:
            kb.delete([f"d{i}" for i in args])
            for i in args:
                final.pop(i, None)
    fresh = db.corpus(name + "-fresh", methods=["threadrag"])
    if final:
        fresh.ingest([doc(i, v) for i, v in sorted(final.items())], progress=False, extract_triples="spacy")
    assert_same(everything(db, kb.id), everything(db, fresh.id))
    db.drop_corpus(name)
    db.drop_corpus(name + "-fresh")


# -- SIGKILL --------------------------------------------------------------------

CRASH_SCRIPT = """
import json, sys
import pgrag
db = pgrag.connect(sys.argv[1])
kb = db.corpus("crash", methods=["threadrag"])
docs = json.load(open(sys.argv[2]))
kb.ingest(docs[:1], progress=False)           # load the models before saying ready
print("ready", flush=True)
kb.ingest(docs, batch_size=1, progress=False)
kb.extract_triples("spacy", batch_size=4, progress=False)
print("done", flush=True)
"""


def many_docs() -> list[dict]:
    return [dict(doc(i, v), id=f"d{i}-{v}-{n}") for n in range(2) for i in range(5) for v in range(3)]


def crash_progress(conn: psycopg.Connection) -> tuple[int, int]:
    """(documents, chunks with triples extracted) of corpus 'crash', as committed."""
    row = conn.execute(
        """SELECT (SELECT count(*) FROM pgrag.document d WHERE d.corpus_id = c.corpus_id),
                  (SELECT count(*) FROM pgrag.chunk_extraction x WHERE x.corpus_id = c.corpus_id)
           FROM pgrag.corpus c WHERE c.name = 'crash'""").fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


def run_crash_script(database_uri: str, docs_file: Path,
                     kill_when: "Callable[[tuple[int, int], tuple[int, int]], bool] | None") -> str:
    """Run the ingest in a child process. With ``kill_when(progress_at_ready,
    progress_now)``, SIGKILL the child as soon as the committed progress satisfies
    it; fail if the child finishes first. Returns "killed" or the child's output."""
    # as a context manager: its pipes are closed whatever the end
    with subprocess.Popen([sys.executable, "-c", CRASH_SCRIPT, database_uri, str(docs_file)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env={**os.environ, "TOKENIZERS_PARALLELISM": "false"}) as proc:
        return _until_killed(proc, database_uri, kill_when)


def _until_killed(proc: subprocess.Popen, database_uri: str,
                  kill_when: "Callable[[tuple[int, int], tuple[int, int]], bool] | None") -> str:
    assert proc.stdout is not None
    try:
        line = proc.stdout.readline().strip()
        assert line == "ready", proc.stderr.read() if proc.stderr else line
        if kill_when is None:
            out, err = proc.communicate(timeout=600)
            assert proc.returncode == 0, err
            return out.strip()
        with psycopg.connect(database_uri, autocommit=True) as conn:
            at_ready = crash_progress(conn)
            deadline = time.monotonic() + 300
            while not kill_when(at_ready, crash_progress(conn)):
                assert proc.poll() is None, "the ingest finished before the kill point"
                assert time.monotonic() < deadline, "the kill point was never reached"
                time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL, proc.returncode
        return "killed"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def check_whole(db: pgrag.Database, docs: list[dict], name: str) -> tuple[list[dict], dict]:
    """Every present document is fully indexed, the derived tables are exactly those
    of a corpus holding just these documents, and every chunk recorded as extracted
    has its triples. Returns the present documents and the corpus state."""
    state = everything(db, db.corpus(name, methods=["threadrag"]).id)
    present_ids = {row[0] for row in state["documents"]}
    present = [d for d in docs if d["id"] in present_ids]
    assert all(indexed for *_, indexed in state["documents"])
    fresh_name = f"{name}-fresh-{random.getrandbits(32):x}"
    fresh = db.corpus(fresh_name, methods=["threadrag"])
    fresh.ingest(present, progress=False)
    expected = statistics(db, fresh.id)
    assert {k: state[k] for k in expected} == expected
    per_chunk: dict[tuple, int] = {}
    for ext, ordinal, *_ in state["triples"]:
        per_chunk[(ext, ordinal)] = per_chunk.get((ext, ordinal), 0) + 1
    for ext, ordinal, _extractor, n, _failed in state["extracted"]:
        assert per_chunk.get((ext, ordinal), 0) == n
    db.drop_corpus(fresh_name)
    return present, state


def test_sigkill_mid_ingest_leaves_documents_whole_and_a_rerun_completes(db, database_uri, tmp_path):
    docs = many_docs()
    docs_file = tmp_path / "docs.json"
    docs_file.write_text(json.dumps(docs))
    total = len(docs)
    # Kill points from committed progress: early and late in the document batches,
    # then after the first triple-extraction batch of the third run.
    for threshold in (4, 16):
        assert run_crash_script(database_uri, docs_file, lambda _ready, now, t=threshold: now[0] >= t) == "killed"
        present, _ = check_whole(db, docs, "crash")
        assert threshold <= len(present) < total, (threshold, len(present))   # the kill landed mid-ingest
    assert run_crash_script(database_uri, docs_file, lambda ready, now: now[1] > ready[1]) == "killed"
    present, state = check_whole(db, docs, "crash")
    n_chunks = len(state["chunks"])
    assert len(present) == total and 0 < len(state["extracted"]) < n_chunks  # mid-extraction
    assert run_crash_script(database_uri, docs_file, None) == "done"
    fresh = db.corpus("crash-fresh", methods=["threadrag"])
    fresh.ingest(docs, progress=False, extract_triples="spacy")
    assert_same(everything(db, db.corpus("crash", methods=["threadrag"]).id), everything(db, fresh.id))


# -- concurrency ------------------------------------------------------------------

def test_queries_during_ingest_and_deletes_see_only_committed_documents(db, database_uri):
    """An ingest, a deleter and three query loops, each on its own connections:
    no errors or deadlocks; every hit is a document that was committed when the
    query ran (present in a snapshot taken just before it or just after it), so
    neither an uncommitted batch nor a document deleted before the query shows up;
    and the final corpus equals a rebuild of what is left."""
    docs = many_docs()[:12]
    writer_db, deleter_db, reader_db = (pgrag.connect(database_uri) for _ in range(3))
    kb, deleter, reader = (d.corpus("busy", methods=["threadrag"]) for d in (writer_db, deleter_db, reader_db))
    kb.ingest(docs[:2], progress=False, extract_triples="spacy")
    _ = reader.embedder
    errors: list[BaseException] = []
    seen_ids: set[str] = set()
    outside: list[tuple[str, str, set[str], set[str]]] = []   # (method, hit, before, after)
    queries = [0]
    done = threading.Event()

    def guard(fn):
        def run():
            try:
                fn()
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
        return run

    def ingest():
        kb.ingest(docs, batch_size=1, progress=False, extract_triples="spacy")

    def delete():
        for d in docs[:6:2]:
            time.sleep(0.2)
            deleter.delete([d["id"]])

    def query(method: str):
        def loop():
            with psycopg.connect(database_uri, autocommit=True) as snap:
                def committed() -> set[str]:
                    return {r[0] for r in snap.execute(
                        "SELECT external_id FROM pgrag.document WHERE corpus_id = %s", (kb.id,))}

                while not done.is_set():
                    before = committed()
                    hits = reader.retrieve("Lothair married Teutberga in Lotharingia", method=method, k=5)
                    after = committed()
                    queries[0] += 1
                    for hit in hits:
                        seen_ids.add(hit.provenance.external_id)
                        if hit.provenance.external_id not in before | after:
                            outside.append((method, hit.provenance.external_id, before, after))
        return loop

    workers = [threading.Thread(target=guard(f)) for f in (ingest, delete)]
    readers = [threading.Thread(target=guard(query(m))) for m in ("bm25", "tigrag", "t2rag")]
    for t in workers + readers:
        t.start()
    for t in workers:
        t.join(timeout=300)
        assert not t.is_alive(), "a writer is stuck (deadlock?)"
    done.set()
    for t in readers:
        t.join(timeout=60)
    assert errors == []
    assert outside == [], outside[:3]
    # The check was not vacuous: queries ran while documents were being added.
    assert queries[0] >= 6 and seen_ids - {d["id"] for d in docs[:2]}, (queries[0], seen_ids)
    for other in (writer_db, deleter_db, reader_db):
        other.close()
    # The deletes ran while the ingest was adding: each deleted id may have been
    # re-added afterwards, so compare against whatever documents are present.
    busy = db.corpus("busy", methods=["threadrag"])
    state = everything(db, busy.id)
    present = {row[0] for row in state["documents"]}
    assert present >= {d["id"] for d in docs[6:]} and counts(db, busy.id)["document"] == len(present)
    fresh = db.corpus("busy-fresh", methods=["threadrag"])
    fresh.ingest([d for d in docs if d["id"] in present], progress=False, extract_triples="spacy")
    assert_same(state, everything(db, fresh.id))


def test_the_graph_cache_is_never_stale_across_connections(db, database_uri):
    kb = db.corpus("cache", methods=["threadrag"])
    kb.ingest([doc(0, 0), doc(1, 0)], progress=False)
    first = token_graph(db, kb.id)
    other = pgrag.connect(database_uri)                 # a separate process's worth of connections
    other.corpus("cache", methods=["threadrag"]).ingest([doc(2, 1)], progress=False)
    other.corpus("cache", methods=["threadrag"]).delete(["d0"])
    other.close()
    cached = token_graph(db, kb.id)
    assert cached.version == kb.graph_version() > first.version
    reloaded = load_graph(db, kb.id)
    assert cached.terms == reloaded.terms and (cached.transition != reloaded.transition).nnz == 0
    hits = kb.retrieve("Lothair Lotharingia Teutberga", method="tigrag", k=3)
    assert "d0" not in {h.provenance.external_id for h in hits}


# -- the server crashes -------------------------------------------------------------

@pytest.fixture
def private_server():
    """An embedded server of this test's own (the session's must survive)."""
    import shutil
    import tempfile

    from pgrag import server

    root = Path(tempfile.mkdtemp(prefix="pgrag-crash-"))
    data_dir = root / "pg"
    uri = server.start(data_dir)
    yield data_dir, uri
    server.stop(data_dir)
    shutil.rmtree(root, ignore_errors=True)


def test_postmaster_killed_mid_ingest_then_restarted(private_server):
    """kill -9 of the postmaster (not the client) during an ingest: the client
    gets ConnectionFailed; after a restart (crash recovery) every document is
    fully indexed or absent, the derived tables equal a rebuild of the present
    documents, and re-running the ingest with the same client completes it."""
    from pgrag import server

    data_dir, uri = private_server
    docs = many_docs()
    db = pgrag.connect(uri)
    kb = db.corpus("crash", methods=["threadrag"])
    kb.ingest(docs[:1], progress=False)                    # models loaded, one document in
    failure: list[BaseException] = []

    def ingest():
        try:
            kb.ingest(docs, batch_size=1, progress=False)
        except BaseException as exc:  # noqa: BLE001 - checked below
            failure.append(exc)

    worker = threading.Thread(target=ingest)
    with psycopg.connect(uri, autocommit=True) as conn:
        worker.start()
        deadline = time.monotonic() + 300
        while crash_progress(conn)[0] < 6:
            assert worker.is_alive(), "the ingest finished before the kill point"
            assert time.monotonic() < deadline
            time.sleep(0.005)
        postmaster = server.status(data_dir).pid
        assert postmaster is not None
        os.kill(postmaster, signal.SIGKILL)
    worker.join(timeout=120)
    assert not worker.is_alive()
    assert len(failure) == 1 and isinstance(failure[0], pgrag.ConnectionFailed), failure
    # SIGKILL's exit is not instant: the postmaster's pipe closes (so its backends,
    # and the client, fail) before the process is gone or a zombie, and on a loaded
    # machine the test can look in between; a zombie postmaster counts as stopped.
    deadline = time.monotonic() + 30
    while server.status(data_dir).running and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not server.status(data_dir).running

    assert server.start(data_dir) == uri                    # restarted: crash recovery from the WAL
    state = everything(db, kb.id)                           # the same client reconnects
    present = [d for d in docs if d["id"] in {row[0] for row in state["documents"]}]
    assert 6 <= len(present) < len(docs)
    assert all(indexed for *_, indexed in state["documents"])
    rebuilt = db.corpus("crash-present", methods=["threadrag"])
    rebuilt.ingest(present, progress=False)
    assert_same(state, everything(db, rebuilt.id))

    report = kb.ingest(docs, batch_size=4, progress=False)  # the re-run completes the job
    assert report.unchanged == len(present) and report.added == len(docs) - len(present)
    full = db.corpus("crash-full", methods=["threadrag"])
    full.ingest(docs, progress=False)
    assert_same(everything(db, kb.id), everything(db, full.id))
    db.close()
