"""TIGRAG (../shared/papers/tigrag.md §3): token co-occurrence graph, PPR
expansion, PPR-weighted BM25, cumulative-mass pooling, dense rerank, and
entity-driven multi-hop retrieval.

One hop (§3.4-3.6): the query's tokens that are in the vocabulary seed a
Personalized PageRank over the token graph (scipy, cached per graph version);
the top-γ tokens, L1-normalised, weight each token's BM25 contribution to a
chunk's score ρ (SQL, from the postings); the shortest prefix of candidates by ρ
holding th_ρ of the total mass is reranked by cosine to the query.

Multi-hop (§3.7): the named entities of the top ι chunks of a hop, minus those
already seen, extend the query (μ ⊕ entities) for the graph stage and give one
embedding per entity (μ ⊕ e) for the rerank (a chunk keeps its best cosine);
hops stop after h or when no new entity turns up; a chunk keeps its best score
over hops; the top β = k are returned.

Departures from the paper, on by default and off in the ``tigrag-paper`` preset
(docs/BENCHMARKS.md has what each buys on 2Wiki):

- the rerank score adds graph_weight × ρ / max ρ of the hop to the cosine;
- only name-like entity types (people, places, organisations, works...) drive
  the next hop, not dates and numbers;
- the pool is capped at max_pool chunks. On 2Wiki the expanded tokens include
  very common words, so 80 % of the ρ mass spreads over thousands of chunks and
  the th_ρ cut-off alone would rerank most of the corpus.
- title linking (pgrag.titles): the documents the question names by title join
  the first hop's ranking and their entities drive the second hop beside the top
  ι chunks'; the documents titled by a hop's new entities join the next hop's
  ranking; a linked chunk's score gains title_weight. 2Wiki's questions name
  their first-hop documents, and the bridge documents are titled by names the
  first-hop documents mention.
- the question's remaining part (issue 44, ``hop_remainder="replace"``): a hop
  after the first reranks with M(remainder ⊕ e) instead of M(mu ⊕ e), where
  remainder is the question's words that the chunks whose entities drove the
  hops do not contain ("When did Lothair Ii's mother die?" after Lothair II's
  passage: "When did s mother die"), for each entity the question does not
  name. The part the previous hop answered no longer pulls the next hop back to
  passages like it, and the hop encodes half the texts.
- bridges by their sentence's share of the question (issue 44), and each hop's
  scores over its best before the hops merge (see TigragSettings).
- chains (issue 44): the chunks whose stored entities name a bridge of a hop's
  three best chunks join the next hop, with 0.1 x their source's score over the
  hop's best (``mentions``, ``chain_weight``); a third hop runs while at least
  two of the question's terms are still unanswered (``hops`` 3,
  ``remainder_stop`` 2); and the first two places go to the first two hops'
  best without that support, from two sources (``lead``, _lead), so the chain's
  passages fill the places below the direct evidence; the documents the
  question names by title lead before the hops' best (``lead_named``).
- through a model runtime, a hop's texts are encoded there while this process
  runs the hop's graph stage (Context.encode_later).

The other chain levers of pgrag.methods.tigrag_chain (bridges, remainder,
chain_follow, fresh_sources) are settings, off by default: measured, none
helped beyond the interval on both benchmarks (docs/methods.md).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from .. import nlp
from ..index.graph import TokenGraph
from ..index.pagerank import personalized_pagerank, push_pagerank, top_nodes
from ..index.postings import Postings
from ..results import Hits, Trace
from ..titles import Link, TitleIndex, title_index
from . import tigrag_chain, tigrag_reader, tigrag_vectors
from .spec import MethodSpec
from .tigrag_settings import PRESETS, TigragSettings

if TYPE_CHECKING:
    from collections.abc import Callable, Set

    from ..context import Context

@dataclass
class _Scored:
    chunk_id: int
    rho: float
    cosine: float | None
    score: float
    hop: int
    plain: float = 0.0      # the score without chain support (_lead)
    linked: bool = False    # its document's title is named by the question or an entity
    reached: int = 1        # hops whose ranking held it


@dataclass
class _Walk:
    """What a hop hands the next: the query and vectors the next ranks with, the
    chunks it links (titles) and supports (chains), and what the hops so far used."""

    query: str
    vectors: "Callable[[], list[np.ndarray]]"
    linked: list[int] = field(default_factory=list)     # chunks of the documents the titles link
    chains: tigrag_chain.Chains = field(default_factory=tigrag_chain.Chains)    # mention-linked chunks
    bonus: list[float] | None = None                    # the vectors' context bonuses (context_weight)
    seen: set[str] = field(default_factory=set)         # the entities found so far, case-folded
    entities: list[str] = field(default_factory=list)   # the new entities, in the order they extended the query
    resolved: list[str] = field(default_factory=list)   # texts of the chunks whose entities drove the hops
    used: set[int] = field(default_factory=set)         # the chunks whose entities drove a hop
    reader: tigrag_reader.Reader | None = None          # the LLM naming the bridges (tigrag-reader)


def run(ctx: "Context", question: str, k: int, settings: TigragSettings, name: str = "tigrag") -> Hits:
    trace = Trace(method=name, query=question)
    trace.step("settings", **dataclasses.asdict(settings))
    if not settings.reader:
        return _run(ctx, question, k, settings, trace)
    if ctx.llm is None:
        trace.step("fallback", note=ctx.llm_note, reader="the NER's names drive every hop")
    with ctx.charged(trace):
        return _run(ctx, question, k, settings, trace)


def _run(ctx: "Context", question: str, k: int, settings: TigragSettings, trace: Trace) -> Hits:
    t0 = time.perf_counter()
    graph, postings, source = ctx.ranking_index()
    trace.timings_ms["graph"] = (time.perf_counter() - t0) * 1000
    trace.step("graph", version=graph.version, nodes=graph.nodes, edges=graph.edges,
               postings=postings.entries, source=source)

    titles = (title_index(ctx.db, ctx.id, graph.version)
              if settings.link_titles or settings.link_entities else None)
    linked = (_title_links(postings, functools.partial(titles.link, question), 1, trace)
              if settings.link_titles and titles is not None else [])
    titled = set(linked)    # the chunks of the documents the question names (lead_named)
    question_vectors = ctx.encode_later([question], trace)
    walk = _Walk(query=question, vectors=question_vectors, linked=linked)
    if settings.reader and ctx.llm is not None:
        walk.reader = tigrag_reader.Reader(ctx.llm, settings)
    rankings: list[list[_Scored]] = []     # each hop's, best first
    for hop in range(1, settings.hops + 1):
        ranked = _walk_hop(ctx, graph, postings, question, walk, settings, hop, trace)
        rankings.append(ranked)
        if hop == settings.hops or not _next_hop(ctx, postings, titles, question, question_vectors, walk, ranked,
                                                 settings, hop, trace):
            break

    question_vector = question_vectors()[0]
    lead = (_lead(rankings[:2], settings, functools.partial(_sources, postings, titles),
                  titled if settings.lead_named else frozenset())
            if len(rankings) > 2 or settings.chain_weight else [])
    final = _merge(rankings, settings.hop_normalise)
    if lead:
        first, led = {s.chunk_id: s for s in final}, set(lead)
        final = [first[c] for c in lead] + [s for s in final if s.chunk_id not in led]
        trace.step("lead", chunks=lead)
    if settings.rerank_depth:
        final = _rerank(ctx, graph, postings, question, question_vector, final, settings, trace)
    if ctx.scope is not None and len(final) < k:
        final += _backfill(ctx, postings, question_vector, final, k, trace)
    final = final[:k]
    hits = ctx.hits([s.chunk_id for s in final], [s.score for s in final],
                    [_details(s, settings) for s in final], trace)
    return Hits(hits, trace)


def _walk_hop(ctx: "Context", graph: TokenGraph, postings: Postings, question: str, walk: _Walk,
              settings: TigragSettings, hop: int, trace: Trace) -> list[_Scored]:
    """One hop's ranking, from what the previous hop handed on."""
    pairs = (tigrag_chain.pair_cosines(ctx, postings, question, walk.chains, settings.remainder, trace)
             if settings.remainder or settings.chain_follow else {})
    extra = {c: cos for c, (cos, _) in pairs.items()} if settings.remainder else {}
    follow = tigrag_chain.follow_scores(walk.chains, pairs, settings.chain_follow) if settings.chain_follow else {}
    return _hop(ctx, graph, postings, walk.query, walk.vectors, settings, hop, trace, walk.linked,
                walk.chains.support, extra, follow, walk.bonus)


def _next_hop(ctx: "Context", postings: Postings, titles: TitleIndex | None, question: str,
              question_vectors: "Callable[[], list[np.ndarray]]", walk: _Walk, ranked: list[_Scored],
              settings: TigragSettings, hop: int, trace: Trace) -> bool:
    """Prepare the hop after ``hop`` in ``walk`` from its ranking: the entities of
    its driving chunks extend the query, and give the next hop's vectors, title
    links and chains. False (with the reason traced): no further hop runs."""
    if settings.fresh_sources:   # the best chunks whose entities have not driven a hop yet
        top = [s.chunk_id for s in ranked if s.chunk_id not in walk.used][: settings.iota]
    else:
        top = [s.chunk_id for s in ranked[: settings.iota]]
    walk.used.update(top)
    top += [c for c in _linked_drivers(postings, ranked, walk.linked, settings.linked_drivers) if c not in top]
    sources = [(s.chunk_id, s.score) for s in ranked[: settings.mention_sources]] if settings.mentions else []
    entities_of = _entities_of(ctx, list(dict.fromkeys(top + [c for c, _ in sources])), settings, trace)
    found = list(dict.fromkeys(e for c in top for e in entities_of[c]))
    texts = ctx.chunk_texts(top) if settings.hop_remainder != "off" or settings.text_titles else {}
    named = len(found)
    if settings.text_titles and titles is not None:
        found = tigrag_chain.with_titles(found, titles, texts)
    unlinked = set() if settings.text_title_links else {e.casefold() for e in found[named:]}
    if settings.hop_remainder != "off":
        walk.resolved += [" ".join(t) for t in texts.values()]
    # With a reader, the remainder check comes first: a hop that stops anyway needs no reading.
    left = _unanswered(ctx, question, walk, settings, hop) if walk.reader is not None else None
    if walk.reader is not None and not _resolved(left, settings):
        verdict = tigrag_reader.read(ctx, walk.reader, question, [s.chunk_id for s in ranked], hop, trace)
        if verdict is not None and verdict.sufficient and hop >= 2:
            trace.step("stop", hop=hop, reason="the reader: the passages suffice")
            return False
        # A reader that only asks again for names already searched (the search found
        # nothing better) leaves the hop to the NER's names.
        if verdict is not None and any(e.casefold() not in walk.seen for e in verdict.names):
            found = verdict.names
    if settings.bridges:
        found = tigrag_chain.bridges(question, found)
    new = [e for e in found if e.casefold() not in walk.seen]
    walk.seen.update(e.casefold() for e in found)
    trace.step("entities", hop=hop, from_chunks=top, found=found, new=new)
    if not new:
        trace.step("stop", hop=hop, reason="no new entities")
        return False
    if left is None:
        left = _unanswered(ctx, question, walk, settings, hop)
    if _resolved(left, settings):
        trace.step("stop", hop=hop, reason="question resolved", remainder=left)
        return False
    if sources:     # only for a hop that runs
        walk.chains = tigrag_chain.mention_links(ctx, postings, sources, entities_of, question,
                                                 settings.mention_max, trace, hop + 1)
    walk.entities.extend(new)
    walk.query = question + " " + " ".join(walk.entities)
    names = [e for e in new if e.casefold() not in unlinked]
    walk.linked = (_title_links(postings, functools.partial(titles.named, names), hop + 1, trace)
                   if settings.link_entities and titles is not None else [])
    walk.vectors, walk.bonus = _next_vectors(ctx, question, question_vectors, walk, texts, settings, hop, trace)
    return True


def _unanswered(ctx: "Context", question: str, walk: _Walk, settings: TigragSettings, hop: int) -> list[str] | None:
    """The question's terms the driving chunks so far leave unanswered, where
    remainder_stop applies after ``hop``; else None."""
    if settings.hop_remainder == "off" or not settings.remainder_stop or hop < 2:
        return None
    return ctx.tokenize(tigrag_chain.remainder(question, " ".join(walk.resolved)))


def _resolved(left: list[str] | None, settings: TigragSettings) -> bool:
    return left is not None and len(left) < settings.remainder_stop


def _linked_drivers(postings: Postings, ranked: list[_Scored], linked: list[int], per_document: int) -> list[int]:
    """Of the linked chunks, each document's ``per_document`` best ranked in
    ``ranked`` (0: all), in link order. A question that names a long document
    would otherwise hand the next hop every name in its hundreds of chunks (a
    book of 296 chunks: 1,976 names, 1.7 s a question)."""
    if not linked or not per_document:
        return linked
    place = {s.chunk_id: i for i, s in enumerate(ranked)}
    last = len(ranked)
    document = postings.documents_of(linked)
    by_document: dict[int, list[int]] = {}
    for c in linked:
        by_document.setdefault(document[c], []).append(c)
    chosen = {c for chunks in by_document.values()
              for c in sorted(chunks, key=lambda c: place.get(c, last))[:per_document]}
    return [c for c in linked if c in chosen]


def _next_vectors(ctx: "Context", question: str, question_vectors: "Callable[[], list[np.ndarray]]", walk: _Walk,
                  texts: dict[int, tuple[str, str]], settings: TigragSettings, hop: int,
                  trace: Trace) -> tuple["Callable[[], list[np.ndarray]]", list[float] | None]:
    """The next hop's rerank vectors (encoded meanwhile, waited for when the hop
    reranks) and their context bonuses: one vector per entity (hop_embedding), or
    with hop_remainder one per bridge, of the question's remaining part and the
    bridge, each gaining context_weight x its share of the question (``texts``:
    the driving chunks')."""
    extra_step: dict[str, object] = {}
    bonus = None
    rest_texts: list[str] = []
    own = walk.entities
    if settings.hop_remainder != "off":
        rest = tigrag_chain.remainder(question, " ".join(walk.resolved))
        # an entity the question names adds nothing to its remaining part: no vector for it
        bridge, shares = tigrag_chain.best_bridges(question, tigrag_chain.bridges(question, walk.entities), texts,
                                                   settings.bridge_limit)
        rest_texts = [f"{rest} {e}" for e in bridge]
        extra_step = {"remainder": rest, **({"context": dict(zip(bridge, shares))} if bridge else {})}
        if settings.hop_remainder == "replace" and rest_texts:
            own = []    # their vectors would be dropped below: not encoded at all
        if settings.context_weight and rest_texts and settings.hop_embedding != "sum":
            bonus = [0.0] * (len(own) if settings.hop_embedding == "concat" else int(bool(own)))
            bonus += [settings.context_weight * x for x in shares]
    pending = tigrag_vectors.hop_embeddings(ctx, question, question_vectors()[0], own, walk.query, settings, trace,
                                            rest_texts)
    return functools.partial(tigrag_vectors.joined, pending, trace, hop + 1, settings.hop_embedding, extra_step), bonus


def _title_links(postings: Postings, find: "Callable[[], list[Link]]", hop: int, trace: Trace) -> list[int]:
    """The chunks that these postings hold of the documents ``find`` links (traced
    as hop ``hop``'s title links)."""
    t_link = time.perf_counter()
    links = _findable(postings, find())
    linked = _linked_chunks(postings, links)
    trace.time("titles", t_link)
    trace.step("titles", hop=hop, linked=[link.title for link in links], chunks=linked)
    return linked


def _scaled(rankings: list[list[_Scored]], normalise: bool,
            value: "Callable[[_Scored], float]") -> list[tuple[_Scored, float]]:
    """Each hop's chunks with their ``value``, over the hop's best when
    ``normalise`` (with more than one hop)."""
    out = []
    for ranked in rankings:
        top = max((value(s) for s in ranked), default=0.0)
        scale = top if normalise and len(rankings) > 1 and top > 0 else 1.0
        out += [(s, value(s) / scale) for s in ranked]
    return out


def _merge(rankings: list[list[_Scored]], normalise: bool) -> list[_Scored]:
    """The hops' rankings as one, each chunk at its best score, best first (a tie:
    the earlier hop first). ``normalise`` (with more than one hop): each hop's
    scores over its best first. A later hop's cosines (remaining part + entity)
    run on another scale than the question's; so each hop's best passage ranks
    at 1, and the hop with the higher scale does not fill the top."""
    best: dict[int, _Scored] = {}
    for s, score in _scaled(rankings, normalise, lambda s: s.score):
        s.score = score
        held = best.get(s.chunk_id)
        if held is None or s.score > held.score:
            best[s.chunk_id] = s
        if held is not None:
            best[s.chunk_id].reached = held.reached + 1
            best[s.chunk_id].linked = held.linked or s.linked
    return sorted(best.values(), key=lambda s: (-s.score, s.hop, s.chunk_id))


def _lead(rankings: list[list[_Scored]], settings: TigragSettings,
          source: "Callable[[list[int]], dict[int, object]]",
          named: "Set[int]" = frozenset()) -> list[int]:
    """The chunks that lead the final ranking: the best ``settings.lead`` of the
    first two hops merged as _merge does, each chunk scored without chain
    support, one chunk a source (``source``: each chunk's title or document).

    Chain support and a third hop find passages further along the chain; ranked
    by them alone, a well-supported link or a third hop's best (each scoring
    about 1 over its hop's best) displaced the passage that answers the first
    hop from the top places. So the top keeps the hops' direct evidence, and
    the chain's passages fill the places below it. Two paragraphs of one
    article (MuSiQue stores each as a document of the same title) answer the
    same hop, so the second place goes to another source.

    The ``named`` chunks (of the documents the question names by title) lead
    before the others, best first: a document the question names is evidence
    the question asks for, while a later hop's best is the best guess at a
    bridge. "Are the movies Wizards Of The Lost Kingdom and Final Exam (1981
    Film), from the same country?" names both of its passages (2Wiki); without
    this, the second hop's best (Roger Corman, whom the first film's passage
    names) took the second place and "Final Exam (1981 film)" the fifth."""
    if not settings.lead:
        return []
    best: dict[int, tuple[float, int]] = {}
    for s, score in _scaled(rankings, settings.hop_normalise, lambda s: s.plain):
        if s.chunk_id not in best or score > best[s.chunk_id][0]:
            best[s.chunk_id] = (score, s.hop)
    order = sorted(best, key=lambda c: (c not in named, -best[c][0], best[c][1], c))
    out: list[int] = []
    held: set[object] = set()
    for start in range(0, len(order), 16):     # the sources of the first few chunks, not of every one
        block = order[start:start + 16]
        sources = source(block)
        for c in block:
            if sources[c] not in held:
                held.add(sources[c])
                out.append(c)
                if len(out) == settings.lead:
                    return out
    return out


def _sources(postings: Postings, titles: TitleIndex | None, chunk_ids: list[int]) -> dict[int, object]:
    """Each chunk's source for the lead: its document's title (several documents
    may share one), or its document without a title index; a chunk outside
    these postings is its own."""
    ids = np.asarray(chunk_ids, dtype=np.int64)
    documents = postings.documents_of(ids[postings.held(ids)].tolist())
    out: dict[int, object] = {c: ("chunk", c) for c in chunk_ids}
    for c, d in documents.items():
        out[c] = titles.documents[d][0] if titles is not None and d in titles.documents else ("document", d)
    return out


def _details(s: _Scored, settings: TigragSettings) -> dict[str, object]:
    out: dict[str, object] = {"hop": s.hop, "rho": s.rho, "cosine": s.cosine, "score": s.score}
    if settings.link_titles or settings.link_entities or settings.rerank_depth:
        out.update(linked=s.linked, reached=s.reached)
    return out


def _expand(graph: TokenGraph, seeds: list[int], settings: TigragSettings) -> tuple[np.ndarray, np.ndarray, int]:
    """Top-γ nodes and their L1-normalised weights (PPR, or degree for the ablation)."""
    if settings.centrality == "degree":
        neighbourhood = np.unique(np.concatenate([seeds, graph.neighbours(np.asarray(seeds))[0]]))
        scores = np.zeros(graph.nodes)
        scores[neighbourhood] = graph.degree[neighbourhood]
        iterations = 0
    else:
        pr = (push_pagerank(graph, seeds, damping=settings.damping, tolerance=settings.tolerance)
              if settings.ppr == "push" else
              personalized_pagerank(graph, seeds, damping=settings.damping, tolerance=settings.tolerance,
                                    max_iterations=settings.max_iterations))
        scores, iterations = pr.scores, pr.iterations
    nodes, weights = expansion(scores, settings.gamma)
    return nodes, weights, iterations


def expansion(scores: np.ndarray, gamma: int) -> tuple[np.ndarray, np.ndarray]:
    """p̂ (§3.4): the top-γ nodes of a centrality vector and their L1-normalised weights."""
    nodes = top_nodes(scores, gamma)
    return nodes, (scores[nodes] / scores[nodes].sum() if len(nodes) else scores[nodes])


def _hop(ctx: "Context", graph: TokenGraph, postings: Postings, query: str,
         vectors: "Callable[[], list[np.ndarray]]",
         settings: TigragSettings, hop: int, trace: Trace, linked: list[int] | None = None,
         support: dict[int, float] | None = None, extra: dict[int, float] | None = None,
         follow: dict[int, float] | None = None, bonus: list[float] | None = None) -> list[_Scored]:
    t0 = time.perf_counter()
    terms = ctx.tokenize(query)
    seeds = graph.index.seeds(terms)
    if not seeds:
        trace.step("hop", hop=hop, query=query, seeds=[], candidates=0, pool=0)
        return []
    nodes, weights, iterations = _expand(graph, seeds, settings)
    t1 = time.perf_counter()
    # rho = B . p-hat over the cached postings matrix: the rows pgrag_internal.tigrag_pool gives in SQL.
    pool = postings.pool(nodes, weights, seeds, threshold=settings.threshold, max_pool=settings.max_pool,
                         bm25=settings.bm25)
    t_pooled = time.perf_counter()
    max_rho = max((r[1] for r in pool), default=0.0) or 1.0
    linked_set = set(linked or ())
    if linked_set:   # linked chunks outside the pool join it with rho 0
        pooled = {r[0] for r in pool}
        pool = pool + [(c, 0.0, 0) for c in linked or () if c not in pooled]
    if support:      # so do the chunks that mention a bridge entity (tigrag_chain)
        pooled = {r[0] for r in pool}
        pool = pool + [(c, 0.0, 0) for c in sorted(support) if c not in pooled]
    support = support or {}
    t_wait = time.perf_counter()
    embeddings = vectors() if settings.rerank else []   # encoded meanwhile: its wait is the "embed" stage's
    t2 = time.perf_counter()
    cosines = postings.cosines([r[0] for r in pool], embeddings, bonus) if settings.rerank else {}
    t3 = time.perf_counter()
    ranked = []
    for chunk_id, rho, _ in pool:
        cos = cosines.get(chunk_id)
        if cos is not None and extra and chunk_id in extra:
            cos = max(cos, extra[chunk_id])
        graph_part = settings.graph_weight * rho / max_rho
        score = (cos + graph_part) if cos is not None else rho / max_rho
        is_linked = chunk_id in linked_set
        if is_linked:
            score += settings.title_weight
        plain = score
        score += settings.chain_weight * support.get(chunk_id, 0.0)
        if follow and chunk_id in follow:
            score = max(score, follow[chunk_id])
        ranked.append(_Scored(chunk_id=chunk_id, rho=rho, cosine=cos, score=score, hop=hop, plain=plain,
                              linked=is_linked))
    ranked.sort(key=lambda s: (-s.score, s.chunk_id))
    for key, value in (("expand", t1 - t0), ("pool", t_pooled - t1), ("rerank", t3 - t2 + t_wait - t_pooled)):
        trace.timings_ms[key] = trace.timings_ms.get(key, 0.0) + value * 1000
    trace.step("hop", hop=hop, query=query, seeds=[graph.terms[i] for i in seeds],
               expanded=[(graph.terms[i], round(float(w), 5)) for i, w in zip(nodes, weights)],
               ppr_iterations=iterations, candidates=pool[0][2] if pool else 0, pool=len(pool),
               embeddings=len(embeddings), top=[s.chunk_id for s in ranked[:5]])
    return ranked


def _backfill(ctx: "Context", postings: Postings, question_vector: np.ndarray, ranked: list[_Scored], k: int,
              trace: Trace) -> list[_Scored]:
    """Under a selective filter the hops may pool fewer than k chunks: the
    question's nearest chunks inside the filter follow them (hop 0), below
    every pooled chunk, so that k chunks matching give k hits."""
    depth = k + len(ranked)
    nearest = postings.nearest([question_vector], depth) or ctx.nearest_within([question_vector], depth)
    held = {s.chunk_id for s in ranked}
    floor = min((s.score for s in ranked), default=0.0)
    extra = [(c, cos) for c, cos in zip(*nearest[0]) if c not in held][: k - len(ranked)]
    trace.step("backfill", reason="filter", chunks=[c for c, _ in extra])
    return [_Scored(chunk_id=c, rho=0.0, cosine=cos, score=floor - 1.0 - i, hop=0)
            for i, (c, cos) in enumerate(extra)]


def _findable(postings: Postings, links: list[Link]) -> list[Link]:
    """The links with a chunk these postings can find (a filter may exclude a
    linked document: it is then neither a link nor in the trace)."""
    return [link for link in links if postings.held(np.asarray(link.chunk_ids, dtype=np.int64)).any()]


def _linked_chunks(postings: Postings, links: list[Link]) -> list[int]:
    """The chunks of the linked documents that the ranking index holds, in link order."""
    wanted = list(dict.fromkeys(c for link in links for c in link.chunk_ids))
    if not wanted:
        return []
    ids = np.asarray(wanted, dtype=np.int64)
    return [int(c) for c in ids[postings.held(ids)]]


def _rerank(ctx: "Context", graph: TokenGraph, postings: Postings, question: str, question_vector: np.ndarray,
            ranked: list[_Scored], settings: TigragSettings, trace: Trace) -> list[_Scored]:
    """The best rerank_depth chunks rescored by signals the hops already have; the rest follow."""
    t0 = time.perf_counter()
    head, tail = ranked[: settings.rerank_depth], ranked[settings.rerank_depth:]
    ids = [s.chunk_id for s in head]
    if not ids:
        return ranked
    cos_q = postings.cosines(ids, [question_vector]) if settings.rerank_question else {}
    bm25 = np.zeros(len(ids))
    if settings.rerank_bm25:
        columns = graph.index.seeds(ctx.tokenize(question))
        if columns:
            rows = np.searchsorted(postings.chunk_ids, np.asarray(ids, dtype=np.int64))
            bm25 = np.asarray(postings.weights(columns)[rows].sum(axis=1)).ravel()
            bm25 = bm25 / (bm25.max() or 1.0)
    rescored = []
    for s, b in zip(head, bm25):
        score = (s.score + settings.rerank_question * cos_q.get(s.chunk_id, 0.0) + settings.rerank_bm25 * float(b)
                 + settings.rerank_hops * (s.reached - 1))
        rescored.append(dataclasses.replace(s, score=score))
    rescored.sort(key=lambda s: (-s.score, s.chunk_id))
    trace.time("final_rerank", t0)
    trace.step("final_rerank", depth=len(head), top=[s.chunk_id for s in rescored[:5]])
    return rescored + tail


def _entities_of(ctx: "Context", chunk_ids: list[int], settings: TigragSettings,
                 trace: Trace) -> dict[int, list[str]]:
    """Each chunk's entities of the settings' labels, in text order, each once: stored
    at ingest (one query for all the chunks), or from spaCy when the corpus has none
    stored at all."""
    t0 = time.perf_counter()
    rows = ctx.db.fetchall("chunk_entities", {"corpus_id": ctx.id, "chunk_ids": chunk_ids})
    by_chunk: dict[int, list[tuple[str, str]]] = {c: [] for c in chunk_ids}
    for chunk_id, entity, label in rows:
        by_chunk[chunk_id].append((entity, label))
    # Ingest runs NER on every chunk, so a chunk without rows simply names nobody;
    # spaCy runs here only for corpora whose chunks were written without NER.
    missing = [c for c in chunk_ids if not by_chunk[c]]
    if missing and not ctx.db.fetch_row("has_entities", {"corpus_id": ctx.id})[0]:
        texts = ctx.chunk_texts(missing)
        mentions = nlp.entities([texts[c][1] for c in missing], ctx.spacy_model)
        for c, found in zip(missing, mentions):
            by_chunk[c] = [(e.text, e.label) for e in found]
    out = {c: list(dict.fromkeys(" ".join(entity.split()) for entity, label in found
                                 if settings.entity_labels is None or label in settings.entity_labels))
           for c, found in by_chunk.items()}
    trace.time("entities", t0)
    return {c: [e for e in names if e] for c, names in out.items()}


SPECS = [MethodSpec(name=name, run=functools.partial(run, name=name), settings=settings, filters=True,
                    takes_llm=settings.reader)
         for name, settings in PRESETS.items()]
