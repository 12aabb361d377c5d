"""CLI entry points not driven elsewhere: ingest --triples llm, query with an
answering method, threadrag-index, bench ingest and bench graph on a small
corpus, eval --extract / --depth, and demo --local-llm."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

import pgrag
from pgrag.cli import main
from tests.fake_llm import FakeLLM
from tests.integration.test_extract import scripted_openie, triples


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture
def docs_file(tmp_path, wiki_docs):
    path = tmp_path / "docs.json"
    path.write_text(json.dumps(wiki_docs))
    return path


@pytest.fixture
def questions_file(tmp_path):
    path = tmp_path / "q.jsonl"
    rows = [{"id": "q1", "question": "When did Lothair II's mother die?", "answer": "20 March 851",
             "supporting_titles": ["Lothair II", "Ermengarde of Tours"]},
            {"id": "q2", "question": "Where was the performer of Changed It born?", "answer": "Port of Spain",
             "supporting_titles": ["Changed It", "Nicki Minaj"]}]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    return path


def test_ingest_with_llm_triples(database_uri, docs_file):
    with FakeLLM(scripted_openie) as fake:
        result = run("ingest", str(docs_file), "--corpus", "llm-t", "--triples", "llm", "--llm", fake.base_url,
                     "--llm-model", fake.model, "--no-progress", "--dsn", database_uri, "--json")
        assert result.exit_code == 0, result.output
        data = json.loads(result.stdout)
        db = pgrag.connect(database_uri)
        kb = db.corpus("llm-t", create=False)
        rows = triples(db, kb, "llm")
        chunks = db.corpora()[0]["chunks"]
        db.close()
        assert data["added"] == 5 and data["triples"]["extractor"] == "llm"
        assert data["triples"]["chunks"] == chunks and data["triples"]["triples"] == len(rows) == chunks
        assert data["triples"]["llm_calls"] == len(fake.requests) == 2 * chunks   # entities, then OpenIE
        assert {p for _, p, *_ in rows} == {"is the subject of"}


def test_query_with_an_answering_method_prints_the_answer(database_uri, docs_file):
    ingested = run("ingest", str(docs_file), "--corpus", "ans", "--triples", "spacy", "--methods", "threadrag",
                   "--no-progress", "--dsn", database_uri)
    assert ingested.exit_code == 0, ingested.output
    assert re.search(r"; [1-9]\d* semantic nodes and [1-9]\d* name vectors \(", ingested.output), ingested.output
    reply = json.dumps({"triples": [["Lothair II", "mother", "?mother"]], "values": {"?mother": "Ermengarde"},
                        "entities": ["Lothair II"], "sufficient": True, "thought": "enough", "core": [1],
                        "next_query": None})
    with FakeLLM(lambda request: reply) as fake:
        result = run("query", "Who was the mother of Lothair II?", "--corpus", "ans", "--method", "threadrag",
                     "-k", "2", "--llm", fake.base_url, "--llm-model", fake.model, "--dsn", database_uri, "--json")
        assert result.exit_code == 0, result.output
        data = json.loads(result.stdout)
        assert fake.requests and data["trace"]["llm_calls"] == len(fake.requests)
        assert isinstance(data["answer"], str) and data["answer"]
        assert 1 <= len(data["hits"]) <= 2
        text = run("query", "Who was the mother of Lothair II?", "--corpus", "ans", "--method", "threadrag",
                   "-k", "2", "--llm", fake.base_url, "--llm-model", fake.model, "--dsn", database_uri)
    assert text.exit_code == 0 and f"answer: {data['answer']}" in text.output
    assert "provenance: document" in text.output


def test_threadrag_index_enables_and_backfills_semantic_nodes(db, database_uri, wiki_docs):
    def nodes(corpus_id):
        with db.transaction() as conn:
            return conn.execute("SELECT d.external_id, n.ordinal, n.char_start, n.char_end, n.text "
                                "FROM pgrag.semantic_node n JOIN pgrag.document d USING (corpus_id, document_id) "
                                "WHERE n.corpus_id = %s ORDER BY 1, 2", (corpus_id,)).fetchall()

    kb = db.corpus("nodes")
    kb.ingest(wiki_docs, progress=False)                  # no --methods: no nodes
    question = ["query", "Who was the mother of Lothair II?", "--corpus", "nodes", "--method", "threadrag",
                "--dsn", database_uri]
    refused = run(*question)
    assert refused.exit_code == 1 and "run `pgrag threadrag-index --corpus nodes`" in refused.output
    result = run("threadrag-index", "--corpus", "nodes", "--no-progress", "--dsn", database_uri, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    built = db.corpus("nodes-built", methods=["threadrag"])
    built.ingest(wiki_docs, progress=False)
    assert data["documents"] == 5 and data["nodes"] == len(nodes(kb.id)) > 5
    assert nodes(kb.id) == nodes(built.id)
    again = run("threadrag-index", "--corpus", "nodes", "--no-progress", "--dsn", database_uri)
    assert "semantic nodes: 0 for 0 documents" in again.output
    assert run(*question).exit_code == 0
    off = run("threadrag-index", "--corpus", "nodes", "--disable", "--drop", "--dsn", database_uri, "--json")
    assert json.loads(off.stdout) == {"corpus": "nodes", "families": [], "nodes_dropped": data["nodes"]}
    assert nodes(kb.id) == [] and run(*question).exit_code == 1


def test_bench_ingest_and_bench_graph_on_a_small_corpus(database_uri, docs_file, questions_file, tmp_path):
    out = tmp_path / "ingest.json"
    result = run("bench", "ingest", "--corpus-file", str(docs_file), "--out", str(out), "--dsn", database_uri)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    db = pgrag.connect(database_uri)
    [corpus] = db.corpora()
    assert corpus["name"] == data["corpus"] and (data["documents"], data["chunks"]) == (5, corpus["chunks"])
    # the model calls may overlap each other and the writes (prefetch), never leave time unaccounted
    assert 0 <= data["other_seconds"] <= data["total_seconds"]
    assert data["embedding_seconds"] + data["nlp_seconds"] + data["other_seconds"] >= data["total_seconds"] - 0.01
    assert (data["families"], data["semantic_nodes"], data["node_embedding_seconds"]) == ([], 0, 0.0)
    # the machine's busy CPU holds this client's and the runtime's; the floor spreads it over the cores
    cpu = data["cpu"]
    assert cpu["busy_seconds"] > 0 and cpu["rest_seconds"] >= -0.1
    assert cpu["busy_seconds"] >= cpu["client_seconds"] + (cpu["runtime_seconds"] or 0.0) - 0.1
    # both figures are rounded to 0.1 s, the floor from the unrounded busy time
    assert cpu["floor_seconds"] == pytest.approx(cpu["busy_seconds"] / cpu["cores"], abs=0.1)
    result = run("bench", "ingest", "--corpus-file", str(docs_file), "--methods", "threadrag", "--out", str(out),
                 "--dsn", database_uri)
    with_nodes = json.loads(out.read_text())
    assert with_nodes["families"] == ["threadrag"] and with_nodes["semantic_nodes"] > 5
    assert 0 < with_nodes["node_embedding_seconds"] < with_nodes["embedding_seconds"]
    graph_out = tmp_path / "graph.json"
    result = run("bench", "graph", "--corpus-file", str(docs_file), "--questions", str(questions_file),
                 "--limit", "2", "--out", str(graph_out), "--dsn", database_uri)
    assert result.exit_code == 0, result.output
    graph = json.loads(graph_out.read_text())
    kb = db.corpus(graph["corpus"], create=False)
    with db.transaction() as conn:
        edges, = conn.execute("SELECT count(*) FROM pgrag.token_edge WHERE corpus_id = %s", (kb.id,)).fetchone()
    db.close()
    assert graph["questions"] == 2 and graph["edges"] == edges > 0
    assert graph["same_top_tokens"] == 2 and graph["max_score_difference"] < 1e-6   # SQL PPR agrees with scipy


@pytest.mark.slow  # builds the sample corpus with spaCy triples
def test_eval_with_extract_and_depth(database_uri, tmp_path):
    from pgrag.bench.evaluate import load_questions
    from tests.integration.test_eval import CORPUS, QUESTIONS

    out = tmp_path / "r.json"
    result = run("eval", "--corpus-file", str(CORPUS), "--questions", str(QUESTIONS), "--methods", "bm25,t2rag",
                 "--limit", "2", "--extract", "spacy", "--depth", "3", "--k", "1,2", "--out", str(out),
                 "--no-progress", "--dsn", database_uri)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["depth"] == 3 and data["questions"] == 2
    assert "per_question" not in data                          # the rows go beside it, one JSON line each
    rows = [json.loads(line) for line in (tmp_path / "r.questions.jsonl").read_text().splitlines()]
    db = pgrag.connect(database_uri)
    [corpus] = db.corpora()
    kb = db.corpus(corpus["name"], create=False)
    with db.transaction() as conn:
        extracted, = conn.execute("SELECT count(*) FROM pgrag.chunk_extraction WHERE corpus_id = %s",
                                  (kb.id,)).fetchone()
    assert extracted == corpus["chunks"]                       # --extract ran over every chunk
    for row in rows:
        hits = kb.retrieve(row["question"], method=row["method"], k=3,
                           **({"llm": False} if row["method"] == "t2rag" else {}))
        titles = list(dict.fromkeys(h.title for h in hits))
        assert row["retrieved"] == titles[:2]                  # at most depth 3 chunks, first 2 documents
    db.close()
    assert [q.id for q in load_questions(QUESTIONS)][:2] == [r["id"] for r in rows[:2]]


@pytest.mark.slow
@pytest.mark.llm
def test_demo_with_the_bundled_local_llm(database_uri, monkeypatch):
    for name in ("PGRAG_LLM_BASE_URL", "PGRAG_LLM_MODEL"):
        monkeypatch.delenv(name, raising=False)
    result = run("demo", "--local-llm", "--dsn", database_uri, "-k", "1")
    assert result.exit_code == 0, result.output
    assert re.search(r"LLM for the answering methods: \S+ at http://127\.0\.0\.1:\d+/v1", result.output), result.output
    for method in ("t2rag", "threadrag", "cirag"):
        assert re.search(rf"\[{method}\] [\d.]+ ms, [1-9]\d* LLM calls, [1-9]\d*\+\d+ tokens", result.output), method
