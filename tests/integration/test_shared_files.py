"""One copy per machine of a corpus's graph and postings (pgrag.index.shared_files):
written once per graph version, mapped read-only by later processes (another
client process, the server's backends), replaced after an ingest, and never
taken from a folder another OS user could have written."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import psycopg
import pytest

from pgrag.index import cache, delta, graph, shared_files
from pgrag.index.cache import ranking_index
from tests.conftest import seeded_database

QUESTION = "When did the mother of Lothair II die?"


database_uri = seeded_database("files")


@pytest.fixture
def kb(db):
    """Corpus "files": the sample, built once (conftest.seeded_database)."""
    return db.corpus("files")


def mapped(array: np.ndarray) -> bool:
    """Whether the array's memory is a file mapping (scipy keeps a view of it)."""
    import mmap

    while array is not None:
        if isinstance(array, (np.memmap, mmap.mmap)):
            return True
        array = getattr(array, "base", None)
    return False


def forget() -> None:
    """This process's caches only: the files stay."""
    cache.clear_cache()


def folder(db, kb, version: int) -> Path:
    return shared_files.root() / f"uid-{os.geteuid()}" / f"{shared_files.corpus_key(db, kb.id)}-v{version}"


def test_a_version_is_written_once_then_mapped(db, kb):
    forget()
    first = ranking_index(db, kb.id)
    assert first.source == "database" and folder(db, kb, first.graph.version).is_dir()
    forget()
    mapped_index = ranking_index(db, kb.id)
    assert mapped_index.source == "files"
    assert all(mapped(a) for a in (mapped_index.graph.weights.data, mapped_index.graph.weights.indices,
                                   mapped_index.postings.tf.data, mapped_index.graph.terms.by_node))
    assert not mapped(first.graph.weights.data)
    assert (mapped_index.graph.weights != first.graph.weights).nnz == 0
    assert (mapped_index.postings.tf != first.postings.tf).nnz == 0
    assert [mapped_index.graph.terms[i] for i in range(mapped_index.graph.nodes)] == [
        first.graph.terms[i] for i in range(first.graph.nodes)]
    assert ranking_index(db, kb.id).source == "memory"
    forget()
    from_files = [(h.provenance.chunk_id, h.score) for h in kb.retrieve(QUESTION, method="tigrag", k=5)]
    assert kb.retrieve(QUESTION, method="tigrag", k=5).trace.steps[1]["source"] == "memory"
    graph_files_off = os.environ["PGRAG_GRAPH_DIR"]
    os.environ["PGRAG_GRAPH_DIR"] = "off"
    try:
        forget()
        hits = kb.retrieve(QUESTION, method="tigrag", k=5)
        assert hits.trace.steps[1]["source"] == "database"
        assert [(h.provenance.chunk_id, h.score) for h in hits] == from_files
    finally:
        os.environ["PGRAG_GRAPH_DIR"] = graph_files_off


def test_float32_weights_are_written_and_mapped_as_float32(db, kb, monkeypatch):
    """Counts stored as float32 (graph.compact_weights; the sample corpus is
    under its size threshold, so the threshold is lowered): the files hold
    float32 data and rank as the float64 graph does."""
    forget()
    float64 = [(h.provenance.chunk_id, h.score) for h in kb.retrieve(QUESTION, method="tigrag", k=5)]
    assert ranking_index(db, kb.id).graph.weights.dtype == np.float64
    monkeypatch.setattr(graph, "COMPACT_MIN_ENTRIES", 0)
    forget()
    for path in shared_files.root().glob(f"uid-{os.geteuid()}/{shared_files.corpus_key(db, kb.id)}-v*"):
        shutil.rmtree(path)
    assert ranking_index(db, kb.id).source == "database"
    forget()
    index = ranking_index(db, kb.id)
    assert index.source == "files" and mapped(index.graph.weights.data)
    assert index.graph.weights.dtype == np.float32
    float32 = [(h.provenance.chunk_id, h.score) for h in kb.retrieve(QUESTION, method="tigrag", k=5)]
    assert [c for c, _ in float32] == [c for c, _ in float64]
    assert np.allclose([s for _, s in float32], [s for _, s in float64], rtol=0, atol=1e-6)


def test_an_ingest_publishes_a_new_version_and_removes_the_old(db, kb):
    forget()
    old = ranking_index(db, kb.id).graph.version
    kb.ingest([{"id": "w", "title": "Waldrada", "text": "Waldrada was the mistress of Lothair II."}], progress=False)
    new = ranking_index(db, kb.id)
    assert new.graph.version > old and new.source == "database"
    assert folder(db, kb, new.graph.version).is_dir() and not folder(db, kb, old).exists()
    assert "waldrada" in new.graph.index


def test_a_process_maps_an_older_version_and_applies_the_delta(db, kb, monkeypatch):
    """After a small change a process without a cache maps the newest shared
    version before it and catches up by the delta: the base stays the mapped
    one, and it ranks as a full read does."""
    monkeypatch.setattr(delta, "DELTA_MAX_SHARE", 0.5)
    monkeypatch.setattr(delta, "FOLD_SHARE", 1.0)      # no fold: the overlay stays on the mapped base
    forget()
    base = ranking_index(db, kb.id).graph.version
    kb.ingest([{"id": "w", "title": "Waldrada", "text": "Waldrada was the mistress of Lothair II."}], progress=False)
    forget()
    index = ranking_index(db, kb.id)
    assert index.source == "delta" and index.graph.version > base and "waldrada" in index.graph.index
    assert mapped(index.graph.weights.data) and mapped(index.postings.tf.data)
    hits = [(h.provenance.chunk_id, h.score) for h in kb.retrieve(QUESTION, method="tigrag", k=5)]
    monkeypatch.setenv("PGRAG_GRAPH_DIR", "off")
    forget()
    again = kb.retrieve(QUESTION, method="tigrag", k=5)
    assert again.trace.steps[1]["source"] == "database"
    assert [c for c, _ in hits] == [h.provenance.chunk_id for h in again]
    assert np.allclose([s for _, s in hits], [h.score for h in again], rtol=0, atol=1e-9)


@pytest.mark.slow
def test_another_process_maps_the_same_files(db, kb, database_uri):
    forget()
    ranking_index(db, kb.id)
    script = textwrap.dedent(f"""
        import json, numpy as np, pgrag
        from pgrag.index.cache import ranking_index
        db = pgrag.connect({database_uri!r})
        kb = db.corpus("files", create=False)
        index = ranking_index(db, kb.id)
        hits = kb.retrieve({QUESTION!r}, method="tigrag", k=5)
        from tests.integration.test_shared_files import mapped
        print(json.dumps({{"source": index.source, "mapped": mapped(index.graph.weights.data),
                          "hits": [[h.provenance.chunk_id, h.score] for h in hits]}}))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                         env=os.environ.copy(), check=True).stdout
    child = json.loads(out.strip().splitlines()[-1])
    assert child["source"] == "files" and child["mapped"]
    assert child["hits"] == [[h.provenance.chunk_id, h.score] for h in kb.retrieve(QUESTION, method="tigrag", k=5)]


def test_a_folder_others_can_write_is_not_trusted(db, kb):
    forget()
    version = ranking_index(db, kb.id).graph.version
    path = folder(db, kb, version)
    path.chmod(0o777)
    try:
        forget()
        assert shared_files.load(db, kb.id, version) is None
        assert ranking_index(db, kb.id).source == "database"
    finally:
        path.chmod(0o755)
    forget()
    assert ranking_index(db, kb.id).source == "files"


def test_server_backends_map_the_clients_files(db, kb, database_uri):
    """A client running as root publishes the version; a backend of the server
    (its own OS user) maps root's folder instead of reading the database."""
    if os.geteuid() != 0:
        pytest.skip("needs a client running as root and the server as another OS user")
    forget()
    ranking_index(db, kb.id)
    with psycopg.connect(database_uri, autocommit=True) as c:
        trace = c.execute("SELECT pgrag.retrieve_trace('files', %s, 'tigrag', 5)", (QUESTION,)).fetchone()[0]
    step = next(s for s in trace["trace"]["steps"] if s["step"] == "graph")
    assert step["source"] == "files"


def test_a_shared_folder_another_user_made_still_serves(db, kb, tmp_path, monkeypatch):
    """A server backend (its own OS user) may create the shared folder before any
    client: sticky like /tmp, it still serves root's folder inside it."""
    import pwd

    if os.geteuid() != 0:
        pytest.skip("needs root to make a folder owned by another user")
    base = tmp_path / "graphs"
    base.mkdir()
    os.chown(base, pwd.getpwnam("embedded_postgres").pw_uid, -1)
    base.chmod(0o1777)
    monkeypatch.setenv("PGRAG_GRAPH_DIR", str(base))
    forget()
    assert ranking_index(db, kb.id).source == "database"
    forget()
    assert ranking_index(db, kb.id).source == "files"
    base.chmod(0o777)             # world-writable without the sticky bit: anyone could swap folders
    forget()
    assert ranking_index(db, kb.id).source == "database"
