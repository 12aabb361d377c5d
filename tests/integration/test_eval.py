"""pgrag eval on the bundled sample: corpus reuse, report contents, the hybrid
baseline's fusion, and the CLI's JSON / Markdown / PNG outputs."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest
from click.testing import CliRunner

from pgrag.bench import evaluate
from pgrag.bench.metrics import bootstrap_interval
from pgrag.bench.report import markdown_report, markdown_table
from pgrag.cli import main

DATA = Path(str(resources.files("pgrag") / "data"))
CORPUS = DATA / "sample_corpus.json"
QUESTIONS = DATA / "sample_questions.jsonl"
# Builds the 40-document sample corpus (embeddings, spaCy) in a fresh database.
SAMPLE_CORPUS = pytest.mark.slow


@SAMPLE_CORPUS
def test_corpus_is_indexed_once_and_reused(db):
    kb, first = evaluate.prepare_corpus(db, CORPUS, progress=False)
    assert not first.reused and first.documents == 40 and first.chunks >= 40
    assert first.index_seconds > 0
    chunk_ids = db.fetchall("document_ids", {"corpus_id": kb.id, "ids": ["Lothair II"]})
    kb2, second = evaluate.prepare_corpus(db, CORPUS, progress=False)
    assert second.reused and kb2.name == kb.name == evaluate.corpus_name_for(CORPUS)
    # The index cost reported is the first build's, not the (near-zero) reuse.
    assert second.index_seconds == first.index_seconds
    assert (second.documents, second.chunks) == (first.documents, first.chunks)
    assert db.fetchall("document_ids", {"corpus_id": kb.id, "ids": ["Lothair II"]}) == chunk_ids


@SAMPLE_CORPUS
def test_report_aggregates_per_question_rows(db):
    kb, corpus = evaluate.prepare_corpus(db, CORPUS, progress=False)
    questions = evaluate.load_questions(QUESTIONS)
    report = evaluate.evaluate(kb, corpus, questions, ["dense", "bm25", "hybrid"], ks=(2, 5), progress=False)
    data = json.loads(json.dumps(report.to_json()))
    assert data["questions"] == len(questions) == 5
    assert data["corpus"]["documents"] == 40 and data["corpus"]["file"] == str(CORPUS)
    assert set(data["methods"]) == {"dense", "bm25", "hybrid"}
    for name, m in data["methods"].items():
        assert set(m) >= {"recall@2", "recall@5", "em", "f1", "latency_ms_p50", "latency_ms_p95",
                          "llm_prompt_tokens", "llm_completion_tokens"}
        rows = [r for r in data["per_question"] if r["method"] == name]
        assert len(rows) == 5
        for r in rows:
            # Recall checked against hits fetched here, independently of the report:
            # the first k distinct titles among the depth (4 x 5) chunks retrieved.
            titles: list[str] = []
            for hit in kb.retrieve(r["question"], method=name, k=20):
                if hit.title not in titles:
                    titles.append(hit.title)
            assert r["retrieved"] == titles[:5]
            for k in (2, 5):
                found = sum(1 for gold in r["gold"] if gold in titles[:k])
                assert r[f"recall@{k}"] == pytest.approx(100 * found / len(r["gold"])), (name, r["question"], k)
        assert m["recall@5"] == pytest.approx(sum(r["recall@5"] for r in rows) / 5, abs=0.01)
        assert m["recall@2"] <= m["recall@5"]
        for k in (2, 5):   # the 95 % bootstrap interval holds the mean; per type, the means add back up
            lo, hi = m[f"interval@{k}"]
            assert lo - 0.01 <= m[f"recall@{k}"] <= hi + 0.01
            by_type = m["recall_by_type"]
            assert sum(t["questions"] for t in by_type.values()) == 5
            assert set(by_type) == {r["type"] or "untyped" for r in rows}
            assert sum(t[f"recall@{k}"] * t["questions"] for t in by_type.values()) / 5 == pytest.approx(
                m[f"recall@{k}"], abs=0.05)
            for t, values in by_type.items():   # each type's interval is over its own questions' recall
                own = [r[f"recall@{k}"] for r in rows if (r["type"] or "untyped") == t]
                assert values[f"interval@{k}"] == pytest.approx(list(bootstrap_interval(own)), abs=0.01), (name, t)
        assert 0 < m["latency_ms_p50"] <= m["latency_ms_p95"]
        # retrieval-only methods produce no answer and spend no tokens
        assert m["em"] is None and m["f1"] is None and m["llm_prompt_tokens"] == 0
    # The sample's gold passages are in the corpus: BM25 finds most of them.
    assert data["methods"]["bm25"]["recall@5"] >= 60


@SAMPLE_CORPUS
def test_unknown_method_is_refused_before_any_work(db):
    kb, corpus = evaluate.prepare_corpus(db, CORPUS, progress=False)
    from pgrag.exceptions import UnknownMethod

    with pytest.raises(UnknownMethod, match="available: dense"):
        evaluate.evaluate(kb, corpus, evaluate.load_questions(QUESTIONS), ["dense", "nope"], progress=False)


@SAMPLE_CORPUS
def test_hybrid_is_reciprocal_rank_fusion_of_bm25_and_dense(db):
    kb, _ = evaluate.prepare_corpus(db, CORPUS, progress=False)
    question = "When did Lothair II's mother die?"
    depth = 100
    bm25 = kb.retrieve(question, method="bm25", k=depth)
    dense = kb.retrieve(question, method="dense", k=depth)
    fused: dict[int, float] = {}
    for hits in (bm25, dense):
        for hit in hits:
            fused[hit.provenance.chunk_id] = fused.get(hit.provenance.chunk_id, 0.0) + 1 / (60 + hit.rank)
    expected = sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))[:7]
    hybrid = kb.retrieve(question, method="hybrid", k=7)
    assert [h.provenance.chunk_id for h in hybrid] == [c for c, _ in expected]
    assert [h.score for h in hybrid] == pytest.approx([s for _, s in expected])
    assert hybrid.trace.steps[0]["rrf_k"] == 60


@SAMPLE_CORPUS
def test_hybrid_from_sql(db):
    kb, _ = evaluate.prepare_corpus(db, CORPUS, progress=False)
    vector = kb.embedder.encode(["Lothair II mother"])[0]
    with db.transaction() as conn:
        rows = conn.execute("SELECT rank, title FROM pgrag.hybrid(%s, %s, %s, 3)",
                            (kb.name, "Lothair II mother", vector)).fetchall()
    assert [r[0] for r in rows] == [1, 2, 3]
    assert "Lothair II" in [r[1] for r in rows]


@SAMPLE_CORPUS
def test_cli_eval_writes_json_markdown_and_png(database_uri, tmp_path):
    out, md, png = tmp_path / "r.json", tmp_path / "r.md", tmp_path / "r.png"
    args = ["eval", "--corpus-file", str(CORPUS), "--questions", str(QUESTIONS), "--methods", "dense,bm25,hybrid",
            "--limit", "3", "--out", str(out), "--markdown", str(md), "--plot", str(png),
            "--no-progress", "--dsn", database_uri]
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["questions"] == 3 and list(data["methods"]) == ["dense", "bm25", "hybrid"]
    table = md.read_text()
    assert "| method | R@2 | R@5 | EM | F1 |" in table
    assert all(f"| {name} |" in table for name in ("dense", "bm25", "hybrid"))
    assert f"| bm25 | {data['methods']['bm25']['recall@2']:.1f} |" in table
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from PIL import Image

    with Image.open(png) as image:   # a palette image: a third of the bytes of matplotlib's RGBA
        assert image.mode == "P" and len(image.getcolors()) <= 64
    assert "| dense |" in result.output


def test_untitled_corpus_hides_the_titles_and_scores_by_id(db, tmp_path):
    """--untitled: a corpus of its own whose documents have no title, so a word
    only a title holds finds nothing; recall still counts the titles of the ids."""
    corpus_file, questions_file = tmp_path / "corpus.json", tmp_path / "questions.jsonl"
    corpus_file.write_text(json.dumps([
        {"id": "d1", "title": "Zanzibar Quartet", "text": "The band recorded four albums of cool jazz in Lisbon."},
        {"id": "d2", "title": "Harbour Suite", "text": "A suite for strings, first played at the harbour festival."},
        {"id": "d3", "title": "Mira Holt", "text": "Mira Holt is a painter who lives in Lisbon."}]))
    questions_file.write_text("\n".join(json.dumps(q) for q in [
        {"id": "q1", "question": "Zanzibar?", "answer": "-", "supporting_titles": ["Zanzibar Quartet"]},
        {"id": "q2", "question": "Which painter lives in Lisbon?", "answer": "Mira Holt",
         "supporting_titles": ["Mira Holt"]}]))
    questions = evaluate.load_questions(questions_file)
    reports = {}
    for untitled in (False, True):
        kb, corpus = evaluate.prepare_corpus(db, corpus_file, progress=False, untitled=untitled)
        assert corpus.untitled is untitled and kb.name == evaluate.corpus_name_for(corpus_file, untitled)
        titles = evaluate.document_titles(corpus_file) if untitled else None
        report = evaluate.evaluate(kb, corpus, questions, ["bm25", "dense"], ks=(1, 5), progress=False, titles=titles)
        reports[untitled] = {(r["method"], r["id"]): r for r in report.per_question}
        assert ("without its titles" in markdown_report(report.to_json())) is untitled
    stored = {h.title for h in kb.retrieve("Lisbon painter band suite", method="dense", k=3)}
    assert stored == {""} and kb.name.endswith("-untitled")
    assert reports[False]["bm25", "q1"]["recall@1"] == 100       # the title's word finds its document
    assert reports[True]["bm25", "q1"]["recall@1"] == 0          # not without the title
    for question in ("q1", "q2"):    # every document is in dense's 20: each counted by its id's title
        assert reports[True]["dense", question]["recall@5"] == 100
        assert sorted(reports[True]["dense", question]["retrieved"]) == ["Harbour Suite", "Mira Holt",
                                                                        "Zanzibar Quartet"]


def test_cli_eval_rejects_bad_options(database_uri):
    base = ["eval", "--corpus-file", str(CORPUS), "--questions", str(QUESTIONS), "--dsn", database_uri]
    result = CliRunner().invoke(main, [*base, "--methods", "dense,magic"])
    assert result.exit_code == 2 and "unknown method(s) magic" in result.output
    result = CliRunner().invoke(main, [*base, "--k", "2,x"])
    assert result.exit_code == 2 and "comma-separated integers" in result.output
    result = CliRunner().invoke(main, [*base, "--oracle", "--untitled"])
    assert result.exit_code == 2 and "does not combine with --untitled" in result.output


@SAMPLE_CORPUS
def test_cli_bench_queries_reports_ratios_to_dense(database_uri, tmp_path):
    out = tmp_path / "b.json"
    result = CliRunner().invoke(main, [
        "bench", "queries", "--corpus-file", str(CORPUS), "--questions", str(QUESTIONS),
        "--methods", "bm25,hybrid", "--warmup", "1", "--out", str(out), "--dsn", database_uri],
        catch_exceptions=False)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert list(data["methods"]) == ["dense", "bm25", "hybrid"]  # dense added as the yardstick
    assert data["methods"]["dense"]["p50_to_dense"] == 1.0
    for m in data["methods"].values():
        assert 0 < m["latency_ms_p50"] <= m["latency_ms_p95"]
        assert m["p50_to_dense"] > 0


@SAMPLE_CORPUS
def test_em_f1_and_tokens_for_a_method_that_answers(db):
    """A registered method that answers (as LLM methods will): EM/F1 per question
    against answer + aliases, averaged; tokens summed."""
    from pgrag import methods
    from pgrag.results import Hits, Trace

    gold = {q.question: q.answer for q in evaluate.load_questions(QUESTIONS)}

    def oracle(ctx, question, k, _settings):
        hits = methods.run(ctx, "bm25", question, k)
        trace = Trace(method="oracle", query=question, prompt_tokens=100, completion_tokens=7, llm_calls=2,
                      outcome={"finish": "natural" if "Lothair" in question else "forced"})
        # right for the first question only (with extra words: EM 0, F1 partial on the others)
        answer = gold[question] if question.startswith("When did Lothair") else "the " + gold[question] + " maybe"
        return Hits(list(hits), trace, answer=answer)

    methods.register(methods.MethodSpec(name="oracle", run=oracle, takes_llm=True, answers=True))
    try:
        kb, corpus = evaluate.prepare_corpus(db, CORPUS, progress=False)
        report = evaluate.evaluate(kb, corpus, evaluate.load_questions(QUESTIONS), ["oracle"], progress=False)
    finally:
        methods.unregister("oracle")
    m = report.to_json()["methods"]["oracle"]
    rows = report.per_question
    assert [r["em"] for r in rows].count(100.0) == 1 and m["em"] == pytest.approx(20.0)
    partial = [r["f1"] for r in rows if r["em"] == 0]
    assert all(0 < f < 100 for f in partial)
    assert m["f1"] == pytest.approx((100 + sum(partial)) / 5, abs=0.01)
    assert m["llm_prompt_tokens"] == 500 and m["llm_completion_tokens"] == 35 and m["llm_calls"] == 10
    lothair = sum("Lothair" in q.question for q in evaluate.load_questions(QUESTIONS))
    assert m["outcomes"] == {"finish": {"forced": 5 - lothair, "natural": lothair}} and 0 < lothair < 5
    assert "finish forced" in markdown_table(report.to_json())
    with pytest.raises(Exception, match="already built in"):
        methods.register(methods.MethodSpec(name="dense", run=oracle))


@SAMPLE_CORPUS
def test_llm_goes_only_to_methods_that_take_one(db):
    """evaluate(llm=...) hands the client to answering methods, re-bound to the
    corpus's cache by the context; retrieval-only methods never see it."""
    from pgrag import methods
    from pgrag.llm import LLMSettings
    from pgrag.results import Hits, Trace

    seen = []

    def answering(ctx, question, k, _settings):
        seen.append(ctx.llm)
        return Hits(list(methods.run(ctx, "bm25", question, k)), Trace(method="answering", query=question),
                    answer="x")

    other = db.corpus("elsewhere")
    llm = other.llm(LLMSettings(base_url="http://127.0.0.1:9/v1", model="m"))
    methods.register(methods.MethodSpec(name="answering", run=answering, takes_llm=True, answers=True))
    try:
        assert methods.takes_option("answering", "llm") and not methods.takes_option("dense", "llm")
        kb, corpus = evaluate.prepare_corpus(db, CORPUS, progress=False)
        evaluate.evaluate(kb, corpus, evaluate.load_questions(QUESTIONS)[:2], ["dense", "answering"], llm=llm,
                          progress=False)
        assert seen and all(r is not None and r.corpus_id == kb.id and r.settings == llm.settings for r in seen)
        answer = kb.answer("When did Lothair II die?", method="answering", llm=False)
        assert answer.text == "x" and answer.method == "answering" and answer.evidence and answer.trace
        assert seen[-1] is None
    finally:
        methods.unregister("answering")
