"""The LangChain and LlamaIndex retrievers (pgrag.integrations), through their
examples in examples/frameworks, run with the real libraries against the bundled
sample: hits with provenance that points into the document, the filter kept,
async the same as sync, and no model loaded in the application's process."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest
from llama_index.core.vector_stores.types import FilterCondition, FilterOperator, MetadataFilter, MetadataFilters

import pgrag
from pgrag.demo import SAMPLE_CORPUS, sample_documents
from pgrag.exceptions import PgragError
from pgrag.integrations.llamaindex import pgrag_filter
from tests.conftest import TEMPLATE, scratch_database
from tests.serving import ROOT, child_env

BODIES = {d["title"]: d["text"] for d in sample_documents()}
KEPT = {"Lothair II", "Inherent Vice (film)"}   # the examples' filter


@pytest.fixture(scope="module")
def sample_uri(pg_uri: str, template_uri: str) -> Iterator[str]:
    with scratch_database(pg_uri, "pgrag_frameworks_", TEMPLATE) as uri:
        db = pgrag.connect(uri)
        db.corpus(SAMPLE_CORPUS).ingest(sample_documents(), progress=False)
        db.close()
        yield uri


def run_example(name: str, uri: str) -> tuple[dict[str, list[dict]], str]:
    """The example's documents by section, and its last line."""
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "frameworks" / name), uri, SAMPLE_CORPUS],
                          capture_output=True, text=True, env=child_env(), cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    sections: dict[str, list[dict]] = {}
    lines = done.stdout.splitlines()
    for line in lines[:-1]:
        if line.endswith(":") and not line.startswith("{"):
            current = sections.setdefault(line[:-1], [])
        else:
            current.append(json.loads(line))
    return sections, lines[-1]


@pytest.mark.parametrize("example", ["langchain_retriever.py", "llamaindex_retriever.py"])
def test_the_example_retrieves_with_provenance_filters_and_loads_no_model(sample_uri, example):
    sections, last = run_example(example, sample_uri)
    found = sections["tigrag"]
    # tigrag returns at most k: on the sample its hops pool the two passages of the chain
    assert [d["rank"] for d in found] == list(range(1, len(found) + 1)) and 2 <= len(found) <= 3
    assert "Ermengarde of Tours" in {d["title"] for d in found}   # the mother, one hop from the question
    for d in found + sections["filtered"]:
        assert BODIES[d["title"]][d["char_start"]:d["char_end"]] == d["text"]
        assert d["id"] == f"{SAMPLE_CORPUS}:{d['chunk_id']}" and d["method"] == "tigrag"
    assert {d["hop"] for d in found} <= {1, 2}   # hop 0: the filter's backfill (docs/filters.md)
    assert sections["filtered"] and {d["external_id"] for d in sections["filtered"]} <= KEPT
    assert [d["chunk_id"] for d in sections["async"]] == [d["chunk_id"] for d in found]
    assert last == "models loaded here: []"


def test_llamaindex_filters_map_onto_pgrags():
    nested = MetadataFilters(filters=[
        MetadataFilter(key="kind", value="film"),
        MetadataFilters(filters=[MetadataFilter(key="year", operator=FilterOperator.GTE, value=1990),
                                 MetadataFilter(key="tag", operator=FilterOperator.IS_EMPTY, value=None)],
                        condition=FilterCondition.OR)])
    assert pgrag_filter(nested) == {"$and": [{"kind": {"$eq": "film"}},
                                             {"$or": [{"year": {"$gte": 1990}}, {"tag": {"$exists": False}}]}]}
    negated = MetadataFilters(filters=[MetadataFilter(key="kind", value="film")], condition=FilterCondition.NOT)
    assert pgrag_filter(negated) == {"$not": {"$and": [{"kind": {"$eq": "film"}}]}}


def test_a_llamaindex_operator_pgrag_lacks_is_an_error_not_a_wider_filter():
    with pytest.raises(PgragError, match="'text_match' .* has no pgrag filter"):
        pgrag_filter(MetadataFilters(filters=[MetadataFilter(key="kind", operator=FilterOperator.TEXT_MATCH,
                                                             value="fi")]))
