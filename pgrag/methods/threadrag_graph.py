"""ThreadRAG's Semantic Topology Graph and Energy-Driven Pathfinding over it
(../shared/papers/threadrag.md §3.2), free of the database: the candidate
nodes, their edges (narrative, semantic, lexical) and weight matrix, anchors,
diffusion, pruning and the linearised paths."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from ..index.energy import propagate_energy, reachable
from .threadrag_settings import ThreadragSettings

KINDS = ("narrative", "semantic", "lexical")


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
