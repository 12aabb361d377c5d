"""Metadata filters in the methods (docs/filters.md): a method finds only inside
the filter's documents, its trace names nothing outside them, it still returns
k hits where k chunks match, and SQL, Python and MCP agree."""

from __future__ import annotations

import json
import sys

import psycopg
import pytest
from psycopg.types.json import Jsonb

from pgrag import methods
from pgrag.exceptions import InputError
from tests.conftest import WIKI, seeded_database

KINDS = {"lothair": ("royal", 855), "ermengarde": ("royal", 821), "minaj": ("music", 1982),
         "changed": ("music", 2017), "long": ("filler", None)}
DOCS = [{**d, "metadata": {"kind": KINDS[d["id"]][0], **({"year": KINDS[d["id"]][1]} if KINDS[d["id"]][1] else {})}}
        for d in WIKI]
FILTERED = sorted(n for n, s in methods.registry().items() if s.filters)
QUESTION = "When did Lothair II's mother die?"
# words in every document, so that bm25 too has something to find under each filter
BROAD = "When did Lothair II's mother die, where was the rapper born, which singles, which river valley?"

database_uri = seeded_database("filtered", docs=DOCS, methods=("threadrag",), triples=True)


@pytest.fixture
def kb(db):
    return db.corpus("filtered")


def allowed(spec: dict) -> set[str]:
    """The external ids a filter keeps, from the test's own table."""
    keep = {"kind": lambda kind, year, v: kind == v}
    if spec == {"kind": "music"}:
        return {i for i, (kind, _) in KINDS.items() if keep["kind"](kind, None, "music")}
    if spec == {"year": {"$lt": 1000}}:
        return {i for i, (_, year) in KINDS.items() if year is not None and year < 1000}
    if spec == {"$external_id": {"$in": ["long", "minaj"]}}:
        return {"long", "minaj"}
    raise AssertionError(spec)


def chunk_documents(db, kb) -> dict[int, str]:
    with db.transaction() as conn:
        return dict(conn.execute("SELECT c.chunk_id, d.external_id FROM pgrag.chunk c JOIN pgrag.document d "
                                 "USING (corpus_id, document_id) WHERE c.corpus_id = %s", (kb.id,)).fetchall())


def traced(trace) -> tuple[set[int], set[int]]:
    """Every chunk id and document id a step of the trace names: TIGRAG's pool
    tops, hop sources, links and backfill; ThreadRAG's documents and paths."""
    chunks: set[int] = set()
    documents: set[int] = set()
    for step in trace.steps:
        for key in ("top", "from_chunks", "chunks"):   # CIRAG's "top" holds texts, not ids
            chunks.update(c for c in step.get(key) or () if isinstance(c, int))
        for key in ("all", "targeted", "documents"):
            if isinstance(step.get(key), list) and step["step"] != "filter":
                documents.update(int(d) for d in step[key])
        documents.update(int(p["document_id"]) for p in step.get("paths") or ())
    return chunks, documents


def external_ids(db, kb) -> dict[int, str]:
    with db.transaction() as conn:
        return dict(conn.execute("SELECT document_id, external_id FROM pgrag.document WHERE corpus_id = %s",
                                 (kb.id,)).fetchall())


SPECS = [{"kind": "music"}, {"year": {"$lt": 1000}}, {"$external_id": {"$in": ["long", "minaj"]}}]


@pytest.mark.parametrize("method", FILTERED)
@pytest.mark.parametrize("spec", SPECS, ids=["kind", "year", "external_id"])
def test_a_method_finds_only_inside_the_filter_and_its_trace_says_so(db, kb, method, spec):
    owners = chunk_documents(db, kb)
    keep = allowed(spec)
    hits = kb.retrieve(BROAD, method=method, k=5, filter=spec)
    assert hits and {h.provenance.external_id for h in hits} <= keep
    chunks, documents = traced(hits.trace)
    named = {owners[c] for c in chunks} | {external_ids(db, kb)[d] for d in documents}
    assert named <= keep, [s for s in hits.trace.steps if s.get("step") != "settings"]
    if method == "threadrag":
        assert documents   # its trace names the documents it claimed
    assert hits.trace.steps[0] == {"step": "filter", "filter": spec,
                                   "documents": len(keep)}
    if method.startswith("tigrag"):
        titles = {t for s in hits.trace.steps if s["step"] == "titles" for t in s["linked"]}
        assert titles <= {d["title"] for d in DOCS if d["id"] in keep}


@pytest.mark.parametrize("method", ["dense", "tigrag"])
def test_dense_and_tigrag_return_k_hits_wherever_k_chunks_match(db, kb, method):
    owners = chunk_documents(db, kb)
    inside = sum(1 for ext in owners.values() if ext in {"minaj", "changed"})
    for k in (1, inside, inside + 3):
        hits = kb.retrieve(QUESTION, method=method, k=k, filter={"kind": "music"})
        assert len(hits) == min(k, inside)


def test_without_a_filter_the_graph_reaches_the_mother(kb):
    """The filter tests' question finds Ermengarde unfiltered, so excluding her is the filter's doing."""
    hits = kb.retrieve(QUESTION, method="tigrag", k=5)
    assert "ermengarde" in {h.provenance.external_id for h in hits}


@pytest.mark.parametrize("method", ["bm25", "tigrag"])
def test_sql_and_python_agree_on_a_filtered_retrieval(database_uri, kb, method):
    spec = {"kind": {"$in": ["music", "filler"]}}
    python = [(h.provenance.chunk_id, round(h.score, 9)) for h in kb.retrieve(BROAD, method=method, k=4,
                                                                                 filter=spec)]
    with psycopg.connect(database_uri, autocommit=True) as conn:
        rows = conn.execute("SELECT chunk_id, score FROM pgrag.retrieve('filtered', %s, %s, 4, %s)",
                            (BROAD, method, Jsonb({"filter": spec}))).fetchall()
    assert [(c, round(s, 9)) for c, s in rows] == python and python


def test_a_bad_filter_is_a_clear_error_from_sql(database_uri):
    with psycopg.connect(database_uri, autocommit=True) as conn:
        with pytest.raises(psycopg.Error) as caught:
            conn.execute("SELECT * FROM pgrag.retrieve('filtered', 'q', 'dense', 5, %s)",
                         (Jsonb({"filter": {"year": {"$between": [1, 2]}}}),))
    assert caught.value.sqlstate == "PR005"
    assert "unknown filter operator '$between' on 'year'" in str(caught.value)


def test_every_method_takes_a_filter():
    assert FILTERED == sorted(methods.registry())   # the refusal below guards methods registered without one


def _never_run(*_args):
    raise AssertionError("a method refused a filter only after running")


def test_a_method_without_filters_refuses_one(kb):
    spec = methods.MethodSpec(name="unfiltered", run=_never_run)
    methods.register(spec)
    try:
        with pytest.raises(InputError, match="'unfiltered' does not take a filter yet; these do: .*tigrag"):
            kb.retrieve(QUESTION, method="unfiltered", k=5, filter={"kind": "music"})
    finally:
        methods.unregister("unfiltered")


def test_a_filter_that_matches_nothing_gives_no_hits(kb):
    hits = kb.retrieve(QUESTION, method="tigrag", k=5, filter={"kind": "none of these"})
    assert list(hits) == [] and hits.trace.steps[0]["documents"] == 0


def test_the_filter_is_data(kb):
    """A key or value that looks like SQL or a path operator is matched literally."""
    hostile = {"kind') OR true --": "x", "kind": {"$in": ["music\" || true || \"", "x'; DROP TABLE pgrag.chunk; --"]}}
    assert list(kb.retrieve(QUESTION, method="bm25", k=5, filter=hostile)) == []
    assert json.dumps(hostile)   # still a plain JSON document
    assert kb.retrieve(QUESTION, method="bm25", k=5)   # and the corpus is whole


AGREED = {"kind": {"$in": ["music", "filler"]}}


def python_hits(kb) -> list[tuple[int, float]]:
    return [(h.provenance.chunk_id, round(h.score, 9)) for h in kb.retrieve(BROAD, method="tigrag", k=4,
                                                                             filter=AGREED)]


def test_the_cli_agrees_with_python(database_uri, kb):
    from click.testing import CliRunner

    from pgrag.cli import main

    result = CliRunner().invoke(main, ["query", BROAD, "--corpus", "filtered", "--method", "tigrag", "-k", "4",
                                       "--filter", json.dumps(AGREED), "--dsn", database_uri, "--json"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    hits = json.loads(result.stdout)["hits"]
    assert [(h["provenance"]["chunk_id"], round(h["score"], 9)) for h in hits] == python_hits(kb)
    bad = CliRunner().invoke(main, ["query", BROAD, "--corpus", "filtered", "--filter", "[1]", "--dsn", database_uri])
    assert bad.exit_code == 2 and "a filter is a JSON object" in bad.output


def test_mcp_agrees_with_python(database_uri, kb):
    import anyio
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    from tests.serving import ROOT, child_env

    async def session() -> tuple[dict, object]:
        params = StdioServerParameters(command=sys.executable, args=["-m", "pgrag", "mcp", "--dsn", database_uri],
                                       env=child_env(), cwd=str(ROOT))
        async with Client(params, read_timeout_seconds=120) as client:
            good = await client.call_tool("retrieve", {"corpus": "filtered", "question": BROAD, "method": "tigrag",
                                                       "k": 4, "options": {"filter": AGREED}})
            bad = await client.call_tool("retrieve", {"corpus": "filtered", "question": BROAD,
                                                      "options": {"filter": {"kind": {"$like": "m%"}}}})
            return good.structured_content, bad

    good, bad = anyio.run(session)
    assert [(h["provenance"]["chunk_id"], round(h["score"], 9)) for h in good["hits"]] == python_hits(kb)
    assert bad.is_error and "unknown filter operator '$like' on 'kind'" in str(bad.content)


@pytest.mark.parametrize("method", ["dense", "hybrid", "threadrag", "cirag", "tigrag"])
def test_past_the_in_memory_size_the_hnsw_scan_keeps_to_the_filter(monkeypatch, db, kb, method):
    """Past EXACT_SEARCH_MAX_VECTORS chunks (here: any) the dense searches go
    through pgvector's HNSW scan, iterative, inside the filter's documents."""
    import pgrag.index.postings as postings

    monkeypatch.setattr(postings, "EXACT_SEARCH_MAX_VECTORS", 0)
    owners = chunk_documents(db, kb)
    inside = sum(1 for ext in owners.values() if ext in {"minaj", "changed"})
    hits = kb.retrieve(BROAD, method=method, k=inside + 2, filter={"kind": "music"})
    assert hits and {h.provenance.external_id for h in hits} <= {"minaj", "changed"}
    if method in ("dense", "tigrag"):   # tigrag's backfill goes through the same scan
        assert len(hits) == inside
    if method == "dense":
        assert hits.trace.steps[-1]["search"] == "hnsw, filtered"
