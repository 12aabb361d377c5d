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
"""

from __future__ import annotations

import dataclasses
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from .. import nlp, prompts
from ..index.cache import RankingIndex, ranking_index
from ..index.energy import propagate_energy, reachable
from ..llm import LLMError, short_answer
from ..nlp import NAME_LABELS, name_key
from ..results import Hits, Trace
from ..semantic import as_array
from .spec import MethodSpec
from .hybrid import fuse

if TYPE_CHECKING:
    from ..context import Context
    from ..llm import LLM

KINDS = ("narrative", "semantic", "lexical")


@dataclass(frozen=True, kw_only=True)
class ThreadragSettings:
    """The paper's defaults where it gives them (3 anchors, 5 documents, 3
    iterations, threshold 0.01, §4.4); the rest are pgrag's choices."""

    anchors: int = 3
    documents: int = 5               # documents per retrieval round
    iterations: int = 3              # agent rounds (with an LLM)
    threshold: float = 0.01          # prune nodes whose energy is below this
    decay: float = 0.5               # share of its energy a node passes on per round
    steps: int = 3                   # diffusion rounds
    narrative_weight: float = 1.0
    semantic_weight: float = 0.8
    lexical_weight: float = 0.6
    semantic_top_m: int = 3
    semantic_threshold: float = 0.5
    rare_df: int = 50                # a term is rare when at most this many chunks hold it
    lexical_saturation: int = 2      # shared keys for a full-strength lexical edge
    entity_weight: float = 0.5       # anchor score = cosine + entity_weight * entity match
    local_weight: float = 1.0        # provenance: documents retrieved for the question
    remote_weight: float = 0.7       # provenance: documents from targeted (entity) retrieval
    entity_documents: int = 1        # documents per question entity in the first round
    retrieval: str = "hybrid"        # hybrid (BM25 + dense, RRF), dense or bm25
    depth: int = 50                  # chunks pooled when retrieving documents
    fill: bool = True                # after the paths, the other candidates by energy
    max_context_chars: int = 6000    # evidence passed to the LLM
    entity_labels: tuple[str, ...] = NAME_LABELS
    capitalised: bool = True         # no LLM: add runs of capitalised words to spaCy's entities
    bridge_entities: int = 3         # no LLM: entities of the top documents retrieved for (0: off)
    bridge_from: int = 1             # ... taken from this many top question documents

    def __post_init__(self) -> None:
        if self.anchors < 1 or self.documents < 1 or self.iterations < 1 or self.steps < 0:
            raise ValueError("anchors, documents and iterations must be at least 1, steps at least 0")
        if not 0 <= self.decay <= 1:
            raise ValueError("decay must be in [0, 1]")
        if self.retrieval not in ("hybrid", "dense", "bm25"):
            raise ValueError("retrieval must be 'hybrid', 'dense' or 'bm25'")


@dataclass(frozen=True, kw_only=True)
class Node:
    node_id: int
    document_id: int
    title: str
    ordinal: int
    char_start: int
    char_end: int
    text: str
    embedding: np.ndarray
    keys: frozenset[str]             # lower-cased entities and rare terms
    entities: tuple[str, ...] = ()   # lower-cased name-like entities, in text order


@dataclass(frozen=True, kw_only=True)
class Edge:
    a: int                           # indices into the candidate node list, a < b
    b: int
    kind: str
    strength: float


@dataclass(frozen=True, kw_only=True)
class Path:
    """A continuous run of kept nodes of one document, with its provenance."""

    document_id: int
    title: str
    ordinals: tuple[int, ...]
    node_ids: tuple[int, ...]
    char_start: int
    char_end: int
    text: str
    energy: float                    # the document's relevance (its best node energy)


@dataclass(kw_only=True)
class Pathfinding:
    """One pass of EDP over the candidate graph."""

    anchors: list[int]
    energy: np.ndarray
    kept: np.ndarray
    paths: list[Path]
    scores: np.ndarray = field(default_factory=lambda: np.zeros(0))   # anchor scores


@dataclass(kw_only=True)
class _State:
    documents: dict[int, float] = field(default_factory=dict)   # document -> provenance weight
    index: RankingIndex | None = None    # the ranking index of this question's every retrieval: one version
    nodes: list[Node] = field(default_factory=list)


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
    entities = _question_entities(ctx, question, llm, settings, trace)
    # The question and its entities in one encode and one retrieval round trip:
    # the entities' rankings do not depend on the question's documents, which
    # they only exclude afterwards.
    vectors = _encode_names(ctx, [question], entities, trace)
    q_vec = vectors[0]
    budget = settings.entity_documents * len(entities)
    state = _State(index=ranking_index(ctx.db, ctx.id))
    ranked, documents = _rankings(ctx, [question, *entities], vectors,
                                  [_depth(settings, settings.documents)] + [_depth(settings, _share(budget, entities))]
                                  * len(entities), settings, trace, state.index)
    first = _documents_of(ranked[0], documents, settings.documents, set())
    first = _claim(state, first, settings.local_weight)
    targeted = _targeted(ctx, entities, budget, state, settings, trace, prepared=(ranked[1:], documents))
    # one query for both sets' nodes (the targeted documents exclude the first: state.documents)
    _add_nodes(ctx, state, [first, _claim(state, targeted, settings.remote_weight)], settings, trace)
    if llm is None and settings.bridge_entities:
        bridges = _bridge_entities(state, question, entities, settings)
        found_docs = _targeted(ctx, bridges, len(bridges), state, settings, trace)
        _add_nodes(ctx, state, [_claim(state, found_docs, settings.remote_weight)], settings, trace)
        trace.step("bridge", entities=bridges, documents=found_docs)
    trace.step("documents", round=1, all=list(state.documents), entities=entities, targeted=targeted)

    found = _rounds(ctx, state, question, q_vec, entities, settings, llm, trace)
    answer = None
    if llm is not None and trace.outcome.get("finish") != "llm_error":
        answer = _answer(llm, question, found.paths, settings, trace)
    trace.outcome["rounds"] = str(sum(1 for s in trace.steps if s["step"] == "pathfinding"))
    hits = _hits(ctx, state, found, k, settings, trace)
    return Hits(hits, trace, answer=answer)


def _rounds(ctx: "Context", state: _State, question: str, q_vec: np.ndarray, entities: list[str],
            settings: ThreadragSettings, llm: "LLM | None", trace: Trace) -> Pathfinding:
    """Pathfinding, then (with an LLM) sufficiency check and targeted retrieval,
    until the evidence suffices or a stop condition; the last pass is returned."""
    for round_ in range(1, (settings.iterations if llm else 1) + 1):
        found = _pathfind(ctx, state, q_vec, entities, settings, trace, round_)
        if llm is None:
            trace.outcome["finish"] = "no_llm"
            return found
        verdict = _sufficient(llm, question, found.paths, settings, trace, round_)
        stop = ("llm_error" if verdict is None else "sufficient" if verdict[0] else
                "max_iterations" if round_ == settings.iterations else
                "nothing_missing" if not verdict[1] else None)
        if stop:
            trace.outcome["finish"] = stop
            return found
        assert verdict is not None
        missing = verdict[1]
        new = _targeted(ctx, missing, settings.documents, state, settings, trace)
        trace.step("targeted retrieval", round=round_, missing=missing, documents=new)
        if not new:
            trace.outcome["finish"] = "no_new_documents"
            return found
        _add_nodes(ctx, state, [_claim(state, new, settings.remote_weight)], settings, trace)
        entities = list(dict.fromkeys(entities + missing))
    return found


# -- retrieval -----------------------------------------------------------------


def _encode_names(ctx: "Context", texts: list[str], names: list[str], trace: Trace) -> list[np.ndarray]:
    """Vectors of ``texts``, then of ``names``: a name's stored vector
    (``pgrag.entity_vector``, built with the semantic nodes) when the corpus has
    its key and the model is uncased, so that the key's vector is the name's;
    the rest encoded, all in one batch."""
    keys = [name_key(n) for n in names]
    stored: dict[str, np.ndarray] = {}
    if keys and getattr(ctx.embedder, "uncased", False):
        t0 = time.perf_counter()
        stored = {key: as_array(v) for key, v in ctx.db.fetchall(
            "entity_vectors", {"corpus_id": ctx.id, "keys": sorted(set(keys))})}
        trace.time("names", t0)
    missing = [n for n, key in zip(names, keys) if key not in stored]
    encoded = iter(ctx.encode([*texts, *missing], trace) if texts or missing else [])
    out = [next(encoded) for _ in texts]
    out.extend(stored[key] if key in stored else next(encoded) for key in keys)
    if names:
        trace.step("name_vectors", stored=len(names) - len(missing), encoded=len(missing))
    return out


def _depth(settings: ThreadragSettings, n: int) -> int:
    """Chunks pooled to find ``n`` documents."""
    return max(settings.depth, n)


def _rankings(ctx: "Context", texts: list[str], vectors: list[np.ndarray], depths: list[int],
              settings: ThreadragSettings, trace: Trace,
              index: RankingIndex | None = None) -> tuple[list[list[int]], dict[int, int]]:
    """For each text (with its embedding): its top ``depths[i]`` chunks by
    ``settings.retrieval``, and the document of every chunk ranked. Hybrid is
    pgrag.hybrid's fusion (RRF, k = 60) of a BM25 ranking from the cached
    postings (pgrag.index.postings, no scan of the posting lists in SQL) and a dense
    ranking: exact from the cached vectors (``Postings.nearest``), or past its
    size pgrag.dense's HNSW (one round trip per distinct depth, for all its texts).
    ``index``: the question's ranking index (read here when not given)."""
    t0 = time.perf_counter()
    lists: list[list[list[int]]] = [[] for _ in texts]
    index = index if index is not None else ranking_index(ctx.db, ctx.id)
    if settings.retrieval in ("hybrid", "bm25"):
        columns = [[index.graph.index[t] for t in terms if t in index.graph.index]
                   for terms in ctx.tokenize_many(texts)]
        for ranked, (ids, _) in zip(lists, index.postings.bm25_rankings(columns, depths)):
            ranked.append(ids)
    documents: dict[int, int] = {}
    nearest = (index.postings.nearest(vectors, max(depths, default=0))
               if settings.retrieval in ("hybrid", "dense") else None)
    if nearest is not None:
        for ranked, (ids, _), depth in zip(lists, nearest, depths):
            ranked.append(ids[:depth])
    elif settings.retrieval in ("hybrid", "dense"):
        for depth in sorted(set(depths)):
            at = [i for i, d in enumerate(depths) if d == depth]
            dense: list[list[int]] = [[] for _ in at]
            for q, chunk_id, document_id in ctx.db.fetchall("dense_many", {
                    "corpus": ctx.name, "embeddings": [vectors[i] for i in at], "k": depth}):
                dense[q - 1].append(chunk_id)
                documents[chunk_id] = document_id      # HNSW reads the table, maybe newer than the index
            for i, d in zip(at, dense):
                lists[i].append(d)
    documents.update(index.postings.documents_of(sorted({c for ranked in lists for r in ranked for c in r}
                                                        - documents.keys())))
    trace.time("retrieve", t0)
    return [[c for c, _ in fuse(ranked)[:depth]] for ranked, depth in zip(lists, depths)], documents


def _documents_of(chunks: list[int], documents: dict[int, int], n: int, exclude: set[int]) -> list[int]:
    """Distinct documents of ranked chunks, in order of their best chunk."""
    out: list[int] = []
    for chunk_id in chunks:
        d = documents[chunk_id]
        if d not in exclude and d not in out:
            out.append(d)
    return out[:n]


def _share(budget: int, entities: list[str]) -> int:
    """Documents asked for each entity: ``budget`` split evenly, rounded up."""
    return max(1, -(-budget // len(entities))) if entities else 0


def _targeted(ctx: "Context", entities: list[str], budget: int, state: _State, settings: ThreadragSettings,
              trace: Trace, prepared: tuple[list[list[int]], dict[int, int]] | None = None) -> list[int]:
    """Up to ``budget`` new documents for the entities, taken in turn (each
    entity's best new document first), so every entity gets its share.
    ``prepared``: the entities' chunk rankings, already retrieved."""
    if not entities or budget <= 0:
        return []
    per_entity = _share(budget, entities)
    if prepared is None:
        vectors = _encode_names(ctx, [], entities, trace)
        prepared = _rankings(ctx, entities, vectors, [_depth(settings, per_entity)] * len(entities), settings, trace,
                             state.index)
    ranked, documents = prepared
    seen = set(state.documents)
    lists = [_documents_of(r, documents, per_entity, seen) for r in ranked]
    out: list[int] = []
    for rank in range(per_entity):
        for docs in lists:
            if rank < len(docs) and docs[rank] not in out and len(out) < budget:
                out.append(docs[rank])
    return out


def _bridge_entities(state: _State, question: str, entities: list[str],
                     settings: ThreadragSettings) -> list[str]:
    """Without an LLM to name what is missing: the first entities of the top
    question documents that the question does not already name (the bridge of a
    compositional question, e.g. the director of the film it asks about)."""
    top = list(state.documents)[: settings.bridge_from]
    known = [question.casefold()] + [e.casefold() for e in entities]
    out: list[str] = []
    for node in sorted((n for n in state.nodes if n.document_id in top),
                       key=lambda n: (top.index(n.document_id), n.ordinal)):
        for e in node.entities:
            if len(out) < settings.bridge_entities and e not in out and not any(e in k for k in known) \
                    and e != node.title.casefold():
                out.append(e)
    return out


def _claim(state: _State, documents: list[int], provenance: float) -> list[int]:
    """Record ``documents`` not yet in the state with their provenance weight; the new ones."""
    new = [d for d in documents if d not in state.documents]
    for d in new:
        state.documents[d] = provenance
    return new


def _add_nodes(ctx: "Context", state: _State, groups: list[list[int]], settings: ThreadragSettings,
               trace: Trace) -> None:
    """The semantic nodes of groups of documents just claimed, in one query:
    group by group, within a group by document id, each document's in
    narrative order (the order of one query per group)."""
    new = [d for group in groups for d in group]
    if not new:
        return
    t0 = time.perf_counter()
    rows = ctx.db.fetchall("threadrag_nodes", {"corpus_id": ctx.id, "document_ids": new,
                                              "labels": list(settings.entity_labels)})
    group_of = {d: i for i, group in enumerate(groups) for d in group}
    rows.sort(key=lambda r: group_of[r[1]])   # stable: the query's order within a group
    index = state.index if state.index is not None else ranking_index(ctx.db, ctx.id)
    rare = rare_terms(index, [r[9] for r in rows], settings.rare_df)
    state.nodes.extend(Node(node_id=r[0], document_id=r[1], title=r[2], ordinal=r[3], char_start=r[4],
                            char_end=r[5], text=r[6], embedding=as_array(r[7]),
                            keys=frozenset(r[8]) | terms,
                            entities=tuple(dict.fromkeys(r[8]))) for r, terms in zip(rows, rare))
    trace.time("nodes", t0)
    missing = set(new) - {r[1] for r in rows}
    if missing:
        trace.step("warning", note="documents without semantic nodes (run `pgrag threadrag-index`)",
                   documents=sorted(missing))


def rare_terms(index: RankingIndex, terms: list[list[str]], max_df: int) -> list[frozenset[str]]:
    """Of each node's terms, those in at most ``max_df`` chunks, by the document
    frequencies of ``index`` (the question's ranking index).
    All the nodes' distinct terms are looked up at once."""
    distinct = sorted({t for ts in terms for t in ts})
    nodes = index.graph.index.nodes(distinct)
    known = nodes >= 0
    rare = np.zeros(len(distinct), dtype=bool)
    rare[known] = index.postings.df[nodes[known]] <= max_df
    keep = {t for t, r in zip(distinct, rare) if r}
    return [frozenset(t for t in ts if t in keep) for ts in terms]


# -- graph and pathfinding ---------------------------------------------------------

def build_edges(nodes: list[Node], stored: list[tuple[int, int, str, float]],
                settings: ThreadragSettings) -> list[Edge]:
    """The Semantic Topology Graph over ``nodes``: the stored (narrative) edges
    among them, plus semantic and lexical edges computed here."""
    index = {n.node_id: i for i, n in enumerate(nodes)}
    edges = [Edge(a=min(index[a], index[b]), b=max(index[a], index[b]), kind=kind, strength=float(w))
             for a, b, kind, w in stored if a in index and b in index]
    if len(nodes) < 2:
        return edges
    vectors = np.stack([n.embedding for n in nodes])
    sims = vectors @ vectors.T
    np.fill_diagonal(sims, -np.inf)
    semantic: dict[tuple[int, int], float] = {}
    for i in range(len(nodes)):
        for j in np.argsort(-sims[i], kind="stable")[: settings.semantic_top_m]:
            if sims[i, j] >= settings.semantic_threshold:
                semantic[(min(i, int(j)), max(i, int(j)))] = float(sims[i, j])
    edges.extend(Edge(a=a, b=b, kind="semantic", strength=s) for (a, b), s in sorted(semantic.items()))
    for a in range(len(nodes)):
        for b in range(a + 1, len(nodes)):
            if nodes[a].document_id == nodes[b].document_id:
                continue   # within a document the narrative edges connect
            shared = len(nodes[a].keys & nodes[b].keys)
            if shared:
                edges.append(Edge(a=a, b=b, kind="lexical",
                                  strength=min(1.0, shared / settings.lexical_saturation)))
    return edges


def weight_matrix(n: int, edges: list[Edge], settings: ThreadragSettings) -> sp.csr_matrix:
    kind_weight = {"narrative": settings.narrative_weight, "semantic": settings.semantic_weight,
                   "lexical": settings.lexical_weight}
    rows = [e.a for e in edges] + [e.b for e in edges]
    cols = [e.b for e in edges] + [e.a for e in edges]
    data = [kind_weight[e.kind] * e.strength for e in edges] * 2
    return sp.csr_matrix((data, (rows, cols)), shape=(n, n))   # duplicates (several kinds) add up


def entity_match(node: Node, entities: list[str]) -> float:
    """Share of the question's entities that the node (or its title) mentions."""
    if not entities:
        return 0.0
    text = f"{node.title}\n{node.text}".casefold()
    return sum(1 for e in entities if e.casefold() in text) / len(entities)


def pathfind(nodes: list[Node], weights: sp.csr_matrix, scores: np.ndarray, provenance: np.ndarray,
             settings: ThreadragSettings) -> Pathfinding:
    """Anchors, diffusion, pruning and linearisation over one candidate graph.
    ``scores`` is each node's anchor score, ``provenance`` its provenance weight."""
    n = len(nodes)
    if n == 0:
        return Pathfinding(anchors=[], energy=np.zeros(0), kept=np.zeros(0, bool), paths=[], scores=scores)
    order = sorted(range(n), key=lambda i: (-scores[i], nodes[i].node_id))
    anchors = order[: settings.anchors]
    initial = np.zeros(n)
    initial[anchors] = np.maximum(scores[anchors], 1e-9) * provenance[anchors]
    initial /= initial.sum()
    energy = propagate_energy(weights, initial, decay=settings.decay, steps=settings.steps)
    kept = reachable(weights, anchors, energy >= settings.threshold)
    return Pathfinding(anchors=anchors, energy=energy, kept=kept, paths=linearise(nodes, energy, kept),
                       scores=np.asarray(scores, dtype=np.float64))


def linearise(nodes: list[Node], energy: np.ndarray, kept: np.ndarray) -> list[Path]:
    """Documents by relevance (best kept energy, then document id), nodes in
    narrative order; consecutive ordinals join into one path."""
    by_doc: dict[int, list[int]] = {}
    for i in map(int, np.flatnonzero(kept)):
        by_doc.setdefault(nodes[i].document_id, []).append(i)
    relevance = {d: max(float(energy[i]) for i in idx) for d, idx in by_doc.items()}
    paths: list[Path] = []
    for doc in sorted(by_doc, key=lambda d: (-relevance[d], d)):
        run: list[int] = []
        for i in sorted(by_doc[doc], key=lambda i: nodes[i].ordinal):
            if run and nodes[i].ordinal != nodes[run[-1]].ordinal + 1:
                paths.append(_path(nodes, run, relevance[doc]))
                run = []
            run.append(i)
        paths.append(_path(nodes, run, relevance[doc]))
    return paths


def _path(nodes: list[Node], run: list[int], relevance: float) -> Path:
    first, last = nodes[run[0]], nodes[run[-1]]
    return Path(document_id=first.document_id, title=first.title,
                ordinals=tuple(nodes[i].ordinal for i in run), node_ids=tuple(nodes[i].node_id for i in run),
                char_start=first.char_start, char_end=last.char_end,
                text=" ".join(nodes[i].text for i in run), energy=relevance)


def _pathfind(ctx: "Context", state: _State, q_vec: np.ndarray, entities: list[str], settings: ThreadragSettings,
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


def _stored_edges(ctx: "Context", state: _State) -> list[tuple[int, int, str, float]]:
    """The stored edges (narrative) among the candidate nodes."""
    return [(a, b, kind, float(w)) for a, b, kind, w in ctx.db.fetchall("threadrag_stored_edges", {
        "corpus_id": ctx.id, "node_ids": [n.node_id for n in state.nodes]})]


# -- the agent ---------------------------------------------------------------------

def _question_entities(ctx: "Context", question: str, llm: "LLM | None", settings: ThreadragSettings,
                       trace: Trace) -> list[str]:
    if llm is not None:
        t0 = time.perf_counter()
        try:
            found = llm.structured([{"role": "user", "content": prompts.THREADRAG_ENTITIES.format(
                question=question)}], _entity_list)
            trace.time("llm", t0)
            trace.step("entities", source="llm", entities=found)
            if found:
                return found
        except LLMError as exc:
            trace.time("llm", t0)
            trace.step("entities", source="llm", error=str(exc)[:200], fallback="spaCy")
    t0 = time.perf_counter()
    mentions = nlp.entities([question], ctx.spacy_model)[0]
    found = list(dict.fromkeys(" ".join(e.text.split()) for e in mentions
                               if e.label in settings.entity_labels))
    if settings.capitalised:
        found = merge_names(found, capitalised_names(question))
    trace.time("entities", t0)
    trace.step("entities", source="spacy", entities=found)
    return found


_QUESTION_WORDS = {"who", "whom", "whose", "what", "which", "when", "where", "why", "how", "is", "are", "was",
                   "were", "did", "do", "does", "in", "the", "a", "an"}
_WORD = re.compile(r"[\w'’.-]+|[^\w\s]")


def capitalised_names(question: str) -> list[str]:
    """Runs of capitalised words (the question's first word excepted), e.g.
    "Lothair II" or "Engal Aasan": the small spaCy model misses many names in
    questions (lower-case context, no sentence around them)."""
    words = _WORD.findall(question)
    names: list[str] = []
    run: list[str] = []
    for i, w in enumerate(words + ["."]):
        capital = w[:1].isupper() or (run and w[:1].isdigit())
        if capital and not (i == 0 and w.lower() in _QUESTION_WORDS):
            run.append(w)
            continue
        if run:
            while run and run[0].lower() in _QUESTION_WORDS:
                run = run[1:]
            if run:
                names.append(" ".join(run))
            run = []
    return names


def merge_names(first: list[str], more: list[str]) -> list[str]:
    """``first``, then the names of ``more`` that neither contain nor are contained in one already kept."""
    out = list(first)
    for name in more:
        if not any(name.casefold() in o.casefold() or o.casefold() in name.casefold() for o in out):
            out.append(name)
    return out


def _entity_list(value: Any) -> list[str]:
    if isinstance(value, dict):
        value = value.get("entities")
    if not isinstance(value, list):
        raise ValueError('expected {"entities": ["...", ...]}')
    return list(dict.fromkeys(str(v).strip() for v in value if str(v).strip()))[:8]


def _verdict(value: Any) -> tuple[bool, list[str]]:
    if not isinstance(value, dict) or not isinstance(value.get("sufficient"), bool):
        raise ValueError('expected {"sufficient": true} or {"sufficient": false, "missing": [...]}')
    missing = value.get("missing") or []
    if not isinstance(missing, list):
        raise ValueError('"missing" must be a list of names')
    return value["sufficient"], list(dict.fromkeys(str(m).strip() for m in missing if str(m).strip()))[:5]


def context_text(paths: list[Path], limit: int) -> str:
    """The linearised paths as the LLM sees them, cut at ``limit`` characters."""
    text = "\n\n".join(f"[{p.title}] {p.text}" for p in paths)
    return text[:limit]


def _sufficient(llm: "LLM", question: str, paths: list[Path], settings: ThreadragSettings,
                trace: Trace, round_: int) -> tuple[bool, list[str]] | None:
    t0 = time.perf_counter()
    try:
        sufficient, missing = llm.structured([{"role": "user", "content": prompts.THREADRAG_SUFFICIENT.format(
            context=context_text(paths, settings.max_context_chars), question=question)}], _verdict)
    except LLMError as exc:
        trace.time("llm", t0)
        trace.step("sufficiency", round=round_, error=str(exc)[:200])
        return None
    trace.time("llm", t0)
    trace.step("sufficiency", round=round_, sufficient=sufficient, missing=missing)
    return sufficient, missing


def _answer(llm: "LLM", question: str, paths: list[Path], settings: ThreadragSettings,
            trace: Trace) -> str | None:
    t0 = time.perf_counter()
    try:
        reply = llm.chat([{"role": "user", "content": prompts.THREADRAG_ANSWER.format(
            context=context_text(paths, settings.max_context_chars), question=question)}])
    except LLMError as exc:
        trace.time("llm", t0)
        trace.step("answer", error=str(exc)[:200])
        trace.outcome["answer"] = "llm_error"
        return None
    trace.time("llm", t0)
    text = short_answer(reply.text)
    trace.step("answer", text=text)
    return text


# -- hits ----------------------------------------------------------------------------

def _hits(ctx: "Context", state: _State, found: Pathfinding, k: int, settings: ThreadragSettings,
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
                  family="threadrag")
