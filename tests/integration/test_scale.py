"""`pgrag bench scale` (pgrag.bench.scale) on the bundled sample: two sizes in one run,
with random embeddings, and the figures the issue's targets read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pgrag.bench.scale import scale_benchmark

DATA = Path(__file__).resolve().parents[2] / "pgrag" / "data"


@pytest.mark.slow
def test_scale_grows_the_corpus_and_measures_every_size(pg_uri):
    graph_dir = os.environ.get("PGRAG_GRAPH_DIR")
    seen = []
    report = scale_benchmark(pg_uri, DATA / "sample_corpus.json", DATA / "sample_questions.jsonl", [1, 2],
                             embeddings="random", method_names=["dense", "tigrag"], limit=2,
                             database="pgrag_scale_test", via="python", progress=False,
                             on_point=lambda r: seen.append(len(r["points"])))
    assert os.environ.get("PGRAG_GRAPH_DIR") == graph_dir          # the run's own files are gone with it
    one, two = report["points"]
    assert seen == [1, 2] and report["embedding_model"] == "random-384" and "random_embeddings_note" in report
    assert two["documents"] == 2 * one["documents"]
    assert 1.8 * one["chunks"] <= two["chunks"] <= 2.2 * one["chunks"]    # renamed text may split otherwise
    assert two["sizes"]["rows"]["token"] > one["sizes"]["rows"]["token"]          # new names, new tokens
    assert two["sizes"]["total_bytes"] > one["sizes"]["total_bytes"]
    assert two["ingest"]["added"] == one["ingest"]["added"] == one["documents"]
    for point in report["points"]:
        assert point["graph_cache"]["shared"] and point["second_process"]["source"] == "files"
        assert point["latency"]["methods"]["tigrag"]["latency_ms_p50"] > 0
        sql = point["sql_functions_ms"]
        assert set(sql) == {"bm25", "dense", "hybrid", "tigrag"} and all(sql[f]["p50"] > 0 for f in sql)
        # 10 documents are more than a tenth of the sample's chunks (postings.DELTA_MAX_SHARE): a full read
        assert point["changes"]["after_ingest"]["source"] == "database"
        assert point["changes"]["after_ingest"]["first_query_ms"] > 0
        runs = point["changes"]["runs"]   # the median of three changes, each a fresh copy
        assert point["changes"]["repeats"] == len(runs) == 3
        assert point["changes"]["after_delete"] in [r["after_delete"] for r in runs]
        ppr = point["ppr"]
        assert ppr["top_gamma_agree"] >= 0.5
        # a same set counts as all shared; the sample is small enough for push to keep the pool
        assert 1 >= ppr["top_gamma_shared"] >= ppr["top_gamma_agree"]
        assert ppr["pool_shared"] >= 0.9 and ppr["pool_top10_shared"] >= 0.9
    assert report["largest_over_first"]["factor"] == 2

    again = scale_benchmark(pg_uri, DATA / "sample_corpus.json", DATA / "sample_questions.jsonl", [1, 2, 3],
                            embeddings="random", method_names=["dense"], limit=1, database="pgrag_scale_test",
                            resume=True, via="python", progress=False)
    assert again["resumed_at"] == 2 and [p["factor"] for p in again["points"]] == [2, 3]
    assert again["points"][0]["ingest"]["added"] == 0 and again["points"][0]["documents"] == two["documents"]
    assert again["points"][1]["ingest"]["added"] == one["documents"]


def test_scale_refuses_an_existing_database_and_bad_factors(pg_uri):
    from pgrag.exceptions import PgragError

    args = (pg_uri, DATA / "sample_corpus.json", DATA / "sample_questions.jsonl")
    with pytest.raises(PgragError, match="ascending"):
        scale_benchmark(*args, [10, 1], database="pgrag_scale_bad")
    with pytest.raises(PgragError, match="exists"):
        scale_benchmark(*args, [1], database="postgres")


def test_a_failing_second_process_is_reported_not_raised(database_uri):
    from pgrag.bench.scale import second_process

    report = second_process(database_uri, "no-such-corpus", "Who?")
    assert set(report) == {"error"} and "no-such-corpus" in report["error"]
