"""ThreadRAG's retrieval (``pgrag.methods.threadrag``): the candidate documents
of a question and of its entities (BM25 + dense, fused), targeted retrieval,
the bridge entities without an LLM, and the candidates' semantic nodes."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..index.cache import RankingIndex
from ..nlp import name_key
from ..results import Trace
from ..semantic import as_array
from .hybrid import fuse
from .threadrag_graph import Node
from .threadrag_settings import ThreadragSettings

if TYPE_CHECKING:
    from ..context import Context


@dataclass(kw_only=True)
class State:
    """What one question's retrieval has gathered so far: the candidate documents
    with their provenance weights, their semantic nodes, the ranking index read."""

    documents: dict[int, float] = field(default_factory=dict)   # document -> provenance weight
    index: RankingIndex | None = None    # the ranking index of this question's every retrieval: one version
    nodes: list[Node] = field(default_factory=list)


def encode_names(ctx: "Context", texts: list[str], names: list[str], trace: Trace) -> list[np.ndarray]:
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


def pool_depth(settings: ThreadragSettings, n: int) -> int:
    """Chunks pooled to find ``n`` documents."""
    return max(settings.depth, n)


def rankings(ctx: "Context", texts: list[str], vectors: list[np.ndarray], depths: list[int],
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
    index = index if index is not None else ctx.ranking_index()
    if settings.retrieval in ("hybrid", "bm25"):
        columns = [[index.graph.index[t] for t in terms if t in index.graph.index]
                   for terms in ctx.tokenize_many(texts)]
        for ranked, (ids, _) in zip(lists, index.postings.bm25_rankings(columns, depths)):
            ranked.append(ids)
    documents: dict[int, int] = {}
    nearest = (index.postings.nearest(vectors, max(depths, default=0))
               if settings.retrieval in ("hybrid", "dense") else None)
    if nearest is None and ctx.scope is not None and settings.retrieval in ("hybrid", "dense"):
        nearest = ctx.nearest_within(vectors, max(depths, default=0))
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


def documents_of(chunks: list[int], documents: dict[int, int], n: int, exclude: set[int]) -> list[int]:
    """Distinct documents of ranked chunks, in order of their best chunk."""
    out: list[int] = []
    for chunk_id in chunks:
        d = documents[chunk_id]
        if d not in exclude and d not in out:
            out.append(d)
    return out[:n]


def entity_share(budget: int, entities: list[str]) -> int:
    """Documents asked for each entity: ``budget`` split evenly, rounded up."""
    return max(1, -(-budget // len(entities))) if entities else 0


def targeted_documents(ctx: "Context", entities: list[str], budget: int, state: State,
                       settings: ThreadragSettings, trace: Trace,
                       prepared: tuple[list[list[int]], dict[int, int]] | None = None) -> list[int]:
    """Up to ``budget`` new documents for the entities, taken in turn (each
    entity's best new document first), so every entity gets its share.
    ``prepared``: the entities' chunk rankings, already retrieved."""
    if not entities or budget <= 0:
        return []
    per_entity = entity_share(budget, entities)
    if prepared is None:
        vectors = encode_names(ctx, [], entities, trace)
        prepared = rankings(ctx, entities, vectors, [pool_depth(settings, per_entity)] * len(entities), settings,
                            trace, state.index)
    ranked, documents = prepared
    seen = set(state.documents)
    lists = [documents_of(r, documents, per_entity, seen) for r in ranked]
    out: list[int] = []
    for rank in range(per_entity):
        for docs in lists:
            if rank < len(docs) and docs[rank] not in out and len(out) < budget:
                out.append(docs[rank])
    return out


def bridge_entities(state: State, question: str, entities: list[str],
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


def claim(state: State, documents: list[int], provenance: float) -> list[int]:
    """Record ``documents`` not yet in the state with their provenance weight; the new ones."""
    new = [d for d in documents if d not in state.documents]
    for d in new:
        state.documents[d] = provenance
    return new


def add_nodes(ctx: "Context", state: State, groups: list[list[int]], settings: ThreadragSettings,
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
    index = state.index if state.index is not None else ctx.ranking_index()
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
