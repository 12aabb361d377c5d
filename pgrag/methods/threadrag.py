"""ThreadRAG (../shared/papers/threadrag.md): semantic nodes, a Semantic Topology
Graph over the retrieved documents, Energy-Driven Pathfinding, linearised
evidence paths and an adaptive agent that checks sufficiency with the LLM.

One pass (§3.1-3.2):

1. documents: the distinct documents of the top fused chunks (BM25 + dense,
   reciprocal rank fusion, ``pgrag.hybrid``) for the question, ``documents`` of
   them, plus ``entity_documents`` per question entity (targeted retrieval);
2. nodes: their semantic nodes, built at ingest (``pgrag.semantic``);
   every name retrieved for (the question's entities, the bridge entities
   below) takes its vector from the names stored with them
   (``pgrag.entity_vector``) when there is one, else it is encoded;
3. graph, over those nodes only: narrative edges (stored), semantic edges (each
   node's ``semantic_top_m`` most similar nodes above ``semantic_threshold``,
   cosine of the stored embeddings) and lexical edges (nodes of different
   documents sharing a named entity or a rare term, df <= ``rare_df``); the
   weight of an edge is its kind's weight times its strength;
4. anchors: the ``anchors`` nodes with the best cosine to the question plus
   ``entity_weight`` x the share of the question's entities they mention; their
   initial energy is that score times a provenance weight (``local_weight`` for
   documents retrieved for the question itself, ``remote_weight`` for those from
   targeted retrieval), normalised to sum 1;
5. energy diffuses ``steps`` rounds with ``decay`` (``pgrag.index.energy.propagate_energy``);
   nodes below ``threshold`` are pruned, and only nodes connected to an anchor
   through kept nodes stay;
6. linearisation: documents by relevance (their best node energy), then nodes in
   narrative order; runs of consecutive nodes become one continuous text path.

The hits are the chunks under the paths, in path order; with ``fill`` the other
candidate documents follow by energy (marked ``fill`` in ``hit.details``), so
that k hits exist even when pruning keeps few documents.

The agent (§3.3), with an LLM: entities from the LLM (the paper's App. F.1),
then up to ``iterations`` rounds of pass -> sufficiency check of the linearised
paths -> targeted retrieval of ``documents`` new documents for the entities the
LLM names as missing; then the answer from the final paths. Without an LLM: one
pass with the question's spaCy entities as anchors, no answer; in place of the
LLM's "missing" entities, the first ``bridge_entities`` entities of the top
question document (not named by the question) get targeted retrieval before the
graph is built (a pgrag addition; ``bridge_entities=0`` is the plain fallback).

Why the cross-document edges are not stored: they depend on which other
documents exist, so stored top-m neighbours would depend on ingest order and
could not equal a rebuild; the paper builds its graph over the retrieved
documents too. Only per-document rows (nodes, narrative edges) are stored.

This module runs the method; its parts live beside it: ``threadrag_settings``
(the options), ``threadrag_retrieval`` (steps 1-2 and targeted retrieval),
``threadrag_graph`` (steps 3-6, free of the database) and ``threadrag_agent``
(what the agent asks the LLM).
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from ..results import Hits, Trace
from .spec import MethodSpec
from .threadrag_agent import check_sufficiency, final_answer, question_entities
from .threadrag_graph import KINDS, Pathfinding, build_edges, entity_match, pathfind, weight_matrix
from .threadrag_retrieval import (
    State,
    add_nodes,
    bridge_entities,
    claim,
    documents_of,
    encode_names,
    entity_share,
    pool_depth,
    rankings,
    targeted_documents,
)
from .threadrag_settings import ThreadragSettings

if TYPE_CHECKING:
    from ..context import Context
    from ..llm import LLM


def run(ctx: "Context", question: str, k: int, settings: ThreadragSettings) -> Hits:
    """ThreadRAG with ``ctx.llm``; without one, spaCy anchors and bridge entities."""
    trace = Trace(method="threadrag", query=question)
    trace.step("settings", **dataclasses.asdict(settings))
    with ctx.charged(trace):
        return _run(ctx, question, k, settings, ctx.llm, trace)


def _run(ctx: "Context", question: str, k: int, settings: ThreadragSettings, llm: "LLM | None",
         trace: Trace) -> Hits:
    if llm is None:
        trace.step("fallback", note=ctx.llm_note, anchors="spaCy entities of the question")
    entities = question_entities(ctx, question, llm, settings, trace)
    # The question and its entities in one encode and one retrieval round trip:
    # the entities' rankings do not depend on the question's documents, which
    # they only exclude afterwards.
    vectors = encode_names(ctx, [question], entities, trace)
    q_vec = vectors[0]
    budget = settings.entity_documents * len(entities)
    state = State(index=ctx.ranking_index())
    ranked, documents = rankings(ctx, [question, *entities], vectors,
                                 [pool_depth(settings, settings.documents)]
                                 + [pool_depth(settings, entity_share(budget, entities))] * len(entities),
                                 settings, trace, state.index)
    first = documents_of(ranked[0], documents, settings.documents, set())
    first = claim(state, first, settings.local_weight)
    targeted = targeted_documents(ctx, entities, budget, state, settings, trace, prepared=(ranked[1:], documents))
    # one query for both sets' nodes (the targeted documents exclude the first: state.documents)
    add_nodes(ctx, state, [first, claim(state, targeted, settings.remote_weight)], settings, trace)
    if llm is None and settings.bridge_entities:
        bridges = bridge_entities(state, question, entities, settings)
        found_docs = targeted_documents(ctx, bridges, len(bridges), state, settings, trace)
        add_nodes(ctx, state, [claim(state, found_docs, settings.remote_weight)], settings, trace)
        trace.step("bridge", entities=bridges, documents=found_docs)
    trace.step("documents", round=1, all=list(state.documents), entities=entities, targeted=targeted)

    found = _rounds(ctx, state, question, q_vec, entities, settings, llm, trace)
    answer = None
    if llm is not None and trace.outcome.get("finish") != "llm_error":
        answer = final_answer(llm, question, found.paths, settings, trace)
    trace.outcome["rounds"] = str(sum(1 for s in trace.steps if s["step"] == "pathfinding"))
    hits = _hits(ctx, state, found, k, settings, trace)
    return Hits(hits, trace, answer=answer)


def _rounds(ctx: "Context", state: State, question: str, q_vec: np.ndarray, entities: list[str],
            settings: ThreadragSettings, llm: "LLM | None", trace: Trace) -> Pathfinding:
    """Pathfinding, then (with an LLM) sufficiency check and targeted retrieval,
    until the evidence suffices or a stop condition; the last pass is returned."""
    for round_ in range(1, (settings.iterations if llm else 1) + 1):
        found = _pathfind(ctx, state, q_vec, entities, settings, trace, round_)
        if llm is None:
            trace.outcome["finish"] = "no_llm"
            return found
        verdict = check_sufficiency(llm, question, found.paths, settings, trace, round_)
        stop = ("llm_error" if verdict is None else "sufficient" if verdict[0] else
                "max_iterations" if round_ == settings.iterations else
                "nothing_missing" if not verdict[1] else None)
        if stop:
            trace.outcome["finish"] = stop
            return found
        assert verdict is not None
        missing = verdict[1]
        new = targeted_documents(ctx, missing, settings.documents, state, settings, trace)
        trace.step("targeted retrieval", round=round_, missing=missing, documents=new)
        if not new:
            trace.outcome["finish"] = "no_new_documents"
            return found
        add_nodes(ctx, state, [claim(state, new, settings.remote_weight)], settings, trace)
        entities = list(dict.fromkeys(entities + missing))
    return found


def _pathfind(ctx: "Context", state: State, q_vec: np.ndarray, entities: list[str], settings: ThreadragSettings,
              trace: Trace, round_: int) -> Pathfinding:
    t0 = time.perf_counter()
    nodes = state.nodes
    stored = _stored_edges(ctx, state)
    edges = build_edges(nodes, stored, settings)
    weights = weight_matrix(len(nodes), edges, settings)
    t1 = time.perf_counter()
    trace.timings_ms["graph"] = trace.timings_ms.get("graph", 0.0) + (t1 - t0) * 1000
    cosines = np.array([float(n.embedding @ q_vec) for n in nodes])
    matches = np.array([entity_match(n, entities) for n in nodes])
    scores = cosines + settings.entity_weight * matches
    provenance = np.array([state.documents[n.document_id] for n in nodes])
    found = pathfind(nodes, weights, scores, provenance, settings)
    trace.time("pathfinding", t1)
    counts = {kind: sum(1 for e in edges if e.kind == kind) for kind in KINDS}
    trace.step("graph", round=round_, documents=len(state.documents), nodes=len(nodes), edges=counts)
    trace.step("pathfinding", round=round_,
               anchors=[{"node": nodes[i].node_id, "title": nodes[i].title, "ordinal": nodes[i].ordinal,
                         "cosine": round(float(cosines[i]), 4), "entity_match": round(float(matches[i]), 3),
                         "energy": round(float(found.energy[i]), 4)} for i in found.anchors],
               energies={nodes[i].node_id: round(float(found.energy[i]), 4)
                         for i in np.argsort(-found.energy, kind="stable")[:20]},
               pruned=[nodes[i].node_id for i in np.flatnonzero(~found.kept)],
               paths=[{"title": p.title, "document_id": p.document_id, "ordinals": list(p.ordinals),
                       "char_start": p.char_start, "char_end": p.char_end, "energy": round(p.energy, 4)}
                      for p in found.paths])
    return found


def _stored_edges(ctx: "Context", state: State) -> list[tuple[int, int, str, float]]:
    """The stored edges (narrative) among the candidate nodes."""
    return [(a, b, kind, float(w)) for a, b, kind, w in ctx.db.fetchall("threadrag_stored_edges", {
        "corpus_id": ctx.id, "node_ids": [n.node_id for n in state.nodes]})]


# -- hits ----------------------------------------------------------------------------

def _hits(ctx: "Context", state: State, found: Pathfinding, k: int, settings: ThreadragSettings,
          trace: Trace) -> list:
    """Chunks under the paths, in path order (then, with ``fill``, the chunks of
    the other candidate documents by energy), with the path as ``details``."""
    t0 = time.perf_counter()
    spans: list[tuple[int, int, int, dict[str, Any], float]] = [
        (p.document_id, p.char_start, p.char_end,
         {"path": i + 1, "title": p.title, "nodes": list(p.ordinals), "energy": round(p.energy, 5)}, p.energy)
        for i, p in enumerate(found.paths)]
    if settings.fill:
        # by energy, then (for the many with none) by anchor score
        on_path = {p.document_id for p in found.paths}
        best: dict[int, tuple[float, float]] = {}
        for node, e, score in zip(state.nodes, found.energy, found.scores):
            if node.document_id not in on_path:
                best[node.document_id] = max(best.get(node.document_id, (0.0, -1.0)), (float(e), float(score)))
        spans.extend((d, 0, 2**31 - 1, {"path": None, "fill": True, "energy": round(e[0], 5)}, e[0])
                     for d, e in sorted(best.items(), key=lambda x: (-x[1][0], -x[1][1], x[0])))
    rows = ctx.db.fetchall("threadrag_chunks", {"corpus_id": ctx.id, "document_ids": [s[0] for s in spans],
                                               "starts": [s[1] for s in spans], "ends": [s[2] for s in spans]})
    chosen: list[tuple[int, dict[str, Any], float]] = []
    seen: set[int] = set()
    for i, chunk_id, _start, _end in rows:
        if chunk_id not in seen and len(chosen) < k:
            seen.add(chunk_id)
            chosen.append((chunk_id, spans[i - 1][3], spans[i - 1][4]))
    hits = ctx.hits([c for c, _, _ in chosen], [s for _, _, s in chosen], [d for _, d, _ in chosen])
    trace.time("provenance", t0)
    return hits



SPEC = MethodSpec(name="threadrag", run=run, settings=ThreadragSettings(), takes_llm=True, answers=True,
                  family="threadrag", filters=True)
