"""TIGRAG's rerank vectors after the first hop (TigragSettings.hop_embedding):
what each mode encodes and how "sum" combines the vectors, against a fake context."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from pgrag.embed import RandomEmbedder
from pgrag.methods.tigrag import PRESETS, TigragSettings
from pgrag.methods.tigrag_vectors import hop_embeddings
from pgrag.results import Trace

QUESTION = "When did Lothair II's mother die?"
ENTITIES = ["Teutberga", "Lotharingia", "Ermengarde of Tours"]
QUERY = QUESTION + " " + " ".join(ENTITIES)


class FakeContext:
    """The Context methods the hop embeddings use; records what it was asked."""

    def __init__(self) -> None:
        self.embedder = RandomEmbedder("random-16", 16)
        self.calls: list[list[str]] = []

    def encode(self, texts, trace=None):
        self.calls.append(list(texts))
        return list(self.embedder.encode(list(texts)))

    def encode_later(self, texts, trace=None):
        out = self.encode(texts, trace)
        return lambda: out


def vectors(mode: str, extra: list[str] | None = None, **options) -> tuple[FakeContext, list[np.ndarray]]:
    ctx = FakeContext()
    q = ctx.embedder.encode([QUESTION])[0]
    settings = TigragSettings(hop_embedding=mode, **options)
    own, more = hop_embeddings(ctx, QUESTION, q, ENTITIES, QUERY, settings, Trace(method="tigrag", query=QUESTION),
                                extra)()
    assert len(more) == len(extra or [])
    return ctx, own


def test_concat_is_the_papers_question_plus_entity():
    ctx, out = vectors("concat")
    assert ctx.calls == [[f"{QUESTION} {e}" for e in ENTITIES]]
    assert np.allclose(out, ctx.embedder.encode(ctx.calls[0]))


@pytest.mark.parametrize("mode", ["concat", "sum", "joint"])
def test_extra_texts_ride_in_the_same_call(mode):
    """The remaining part's texts (hop_remainder) go in the mode's own call: one
    round trip to the model runtime; each comes back as its own vector."""
    extra = [f"mother die {e}" for e in ENTITIES]
    ctx = FakeContext()
    q = ctx.embedder.encode([QUESTION])[0]
    settings = TigragSettings(hop_embedding=mode)
    own, more = hop_embeddings(ctx, QUESTION, q, ENTITIES, QUERY, settings, Trace(method="tigrag", query=QUESTION),
                                extra)()
    assert len(ctx.calls) == 1 and ctx.calls[0][len(ctx.calls[0]) - len(extra):] == extra
    assert np.allclose(more, ctx.embedder.encode(extra))
    _, alone = vectors(mode)
    assert np.allclose(own, alone)


def test_joint_is_one_vector_of_the_graph_query():
    ctx, out = vectors("joint")
    assert ctx.calls == [[QUERY]] and len(out) == 1
    assert np.allclose(out[0], ctx.embedder.encode([QUERY])[0])


@pytest.mark.parametrize("weight", [1.0, 0.5])
def test_sum_encodes_the_entities_alone_and_adds_the_question(weight):
    ctx, out = vectors("sum", entity_weight=weight)
    assert ctx.calls == [ENTITIES]                      # one batch of short strings, the question reused
    q = ctx.embedder.encode([QUESTION])[0]
    for v, e in zip(out, ctx.embedder.encode(ENTITIES), strict=True):
        expected = q + weight * e
        assert np.allclose(v, expected / np.linalg.norm(expected), atol=1e-6)
        assert np.linalg.norm(v) == pytest.approx(1.0, abs=1e-6)


def test_both_presets_keep_the_paper_and_bad_modes_fail():
    assert PRESETS["tigrag"].hop_embedding == PRESETS["tigrag-paper"].hop_embedding == "concat"
    with pytest.raises(ValueError, match="hop_embedding must be one of concat, sum, joint"):
        dataclasses.replace(PRESETS["tigrag"], hop_embedding="mean")


@pytest.mark.parametrize("mode", ["concat", "sum", "joint"])
def test_no_entities_encode_only_the_extra_texts(mode):
    """hop_remainder="replace" passes no entities when every one gets a remaining-part
    vector: each mode then encodes the extra texts alone ("sum" and "joint" too)."""
    extra = [f"mother die {e}" for e in ENTITIES]
    ctx = FakeContext()
    q = ctx.embedder.encode([QUESTION])[0]
    own, more = hop_embeddings(ctx, QUESTION, q, [], QUERY, TigragSettings(hop_embedding=mode),
                                Trace(method="tigrag", query=QUESTION), extra)()
    assert own == [] and ctx.calls == [extra]
    assert np.allclose(more, ctx.embedder.encode(extra))
