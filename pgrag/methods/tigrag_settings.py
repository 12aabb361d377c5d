"""TIGRAG's settings (``pgrag.methods.tigrag``): every hyperparameter, the
paper's defaults where it gives them, and the presets (``tigrag``, the paper's
pipeline ``tigrag-paper`` and its Table 10 ablations)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from ..nlp import NAME_LABELS
from .spec import ABOVE_0, AT_LEAST_0, AT_LEAST_1, Allowed, Range

HOP_EMBEDDINGS = ("concat", "sum", "joint")


@dataclass(frozen=True, kw_only=True)
class TigragSettings:
    """Every hyperparameter of the method; defaults are the paper's (§4.1.5)
    except where noted. γ and the damping factor are not given by the paper;
    they were chosen on ../shared/bench/2wiki/questions.jsonl (docs/BENCHMARKS.md)."""

    gamma: int = 20                 # expanded tokens kept from PPR (not in the paper)
    damping: float = 0.5            # PPR continuation probability (not in the paper)
    # PPR stops when the L1 change is below this (push: ε = tolerance × 1e-4); the paper gives none.
    tolerance: float = 1e-3         # tigrag-paper: 1e-4 (docs/BENCHMARKS.md, "The PPR's tolerance")
    max_iterations: int = 100
    threshold: float = 0.8          # th_rho, cumulative-mass pool cut-off
    max_pool: int = 300             # cap on the pool (the paper has none; see below)
    iota: int = 1                   # top chunks of a hop whose entities drive the next
    hops: int = 3                   # h; the paper: 2 (a third hop runs only while remainder_stop allows)
    graph_weight: float = 0.2       # lambda in cos + lambda * rho / max rho; the paper: 0
    entity_labels: tuple[str, ...] | None = NAME_LABELS   # None: every spaCy label
    bm25: bool = True               # ablation "no BM25": rho = sum of PPR weights
    centrality: str = "ppr"         # ablation "degree": expand by degree, not PPR
    rerank: bool = True             # ablation "no rerank": rank by rho alone
    ppr: str = "push"               # "push": local forward push; "power": exact power iteration
    # The rerank vectors of a hop after the first, one per entity e: "concat" M(mu ⊕ e) (§3.7,
    # eq. 3.15); "sum" normalise(M(mu) + entity_weight · M(e)), the entities encoded alone (far
    # fewer tokens) and M(mu) reused from hop 1; "joint" the single vector M(mu ⊕ all entities)
    # of the graph stage's query. Measured on 2Wiki (docs/BENCHMARKS.md): both cheaper ones
    # lose recall, so both presets keep the paper's.
    hop_embedding: str = "concat"
    entity_weight: float = 1.0      # the entity's weight in hop_embedding="sum"
    # Title linking (pgrag.titles; issue 37, docs/BENCHMARKS.md). link_titles: the documents
    # the question names by title join the first hop's ranking and their entities drive the
    # next hop, beside the top iota chunks'. link_entities: the documents titled by a hop's
    # new entities join the next hop's ranking. Either adds title_weight to a linked chunk's score.
    link_titles: bool = True
    link_entities: bool = True
    title_weight: float = 0.2
    # A linked document drives the next hop with its linked_drivers best-ranked chunks (0: all): a
    # question that names a book of 296 chunks handed the next hop 1,976 names and took 1.7 s (62 ms
    # with 5; scripts/tune_tigrag.py --long-document). 5 leaves the benchmarks' recall as it was (2Wiki: 27
    # of 6,119 documents have more than 5 chunks).
    linked_drivers: int = 5
    # A last, learned-free rerank of the best rerank_depth chunks (0: none): score +
    # rerank_question x cosine to the question alone + rerank_bm25 x BM25 of the question's
    # terms / the candidates' max + rerank_hops x (hops whose ranking held the chunk - 1).
    rerank_depth: int = 0
    rerank_question: float = 0.0
    rerank_bm25: float = 0.0
    rerank_hops: float = 0.0
    # Chain levers (issue 44, pgrag.methods.tigrag_chain). bridges: a hop's entities that
    # the question names do not drive the next hop. mentions: the chunks that mention a
    # bridge entity of a hop's best mention_sources chunks (entity-to-passage links from the
    # NER of ingest) join the next hop's ranking; names more than mention_max chunks mention
    # are not followed. chain_weight: such a chunk gains chain_weight x its source chunk's
    # score / the hop's best score.
    bridges: bool = False
    mentions: bool = True
    mention_sources: int = 3
    mention_max: int = 20
    chain_weight: float = 0.1
    remainder: bool = False         # mention-linked chunks also by cosine to remainder(question) + entity
    chain_follow: int = 0           # each source chunk's best mention-linked chunks ranked right behind it
    # The rerank vectors of a hop after the first from the question's remaining part: "replace"
    # gives M(remainder ⊕ e) instead of M(mu ⊕ e), where remainder is the question's words that the
    # chunks whose entities drove the hops do not contain, for each entity the question does not
    # name (if it names them all, the hop keeps M(mu ⊕ e)); "add" gives both.
    hop_remainder: str = "replace"
    # With hop_remainder, a hop after the second runs only while the question's remaining part
    # still has at least remainder_stop terms (pgrag.tokenize); 0: every hop up to hops runs.
    remainder_stop: int = 2
    fresh_sources: bool = False     # a hop's entities come from its best chunks that drove no hop before
    # The titles of the corpus that the driving chunks' texts name (exact matches) join their
    # entities (tigrag_chain.with_titles); with text_title_links their documents also join the
    # next hop's ranking as linked (title_weight), which cost R@2 on both benchmarks.
    text_titles: bool = True
    text_title_links: bool = False
    # Bridges by their share of the question's words in the driving chunks' sentence that names
    # them (hop_remainder, tigrag_chain.context_shares): a bridge's vector gains context_weight x its
    # share in the rerank, and only the bridge_limit best (0: all) get one. hop_normalise: _merge.
    context_weight: float = 0.1
    bridge_limit: int = 8
    hop_normalise: bool = True
    # The first `lead` places go to the first two hops' best chunks scored without chain support,
    # each from another title (_lead); chain support and the hops after the second order the rest.
    # lead_named: the documents the question names by title (link_titles) take those places first.
    lead: int = 2
    lead_named: bool = True
    # An LLM reader names each hop's bridges from the best passages so far, and stops the
    # hops when they suffice (pgrag.methods.tigrag_reader; method tigrag-reader, which
    # takes the LLM). Without one, or when it fails, the NER's names drive the hop.
    reader: bool = False
    reader_passages: int = 3        # each hop's best chunks the reader is shown
    reader_chars: int = 6000        # the cap on what it is shown
    reader_tokens: int = 200        # the cap on its reply, a short JSON value (a small model rambles to 512)

    # What each option takes beyond its type (MethodSpec.configure checks a caller's
    # options against them; __post_init__ below still holds for every instance).
    RANGES: ClassVar[dict[str, Allowed]] = {
        "gamma": AT_LEAST_1, "hops": AT_LEAST_1, "iota": AT_LEAST_1, "max_pool": AT_LEAST_1,
        "max_iterations": AT_LEAST_1, "mention_sources": AT_LEAST_1, "mention_max": AT_LEAST_1,
        "reader_passages": AT_LEAST_1, "reader_chars": AT_LEAST_1, "reader_tokens": AT_LEAST_1,
        "linked_drivers": AT_LEAST_0, "rerank_depth": AT_LEAST_0, "remainder_stop": AT_LEAST_0,
        "chain_follow": AT_LEAST_0, "bridge_limit": AT_LEAST_0, "lead": AT_LEAST_0,
        "damping": Range(0, 1, low_open=True, high_open=True),    # a probability of going on: never sure either way
        "threshold": Range(0, 1, low_open=True),                  # a share of the PPR mass
        "tolerance": ABOVE_0,                                     # 0 would never stop (push) or always run out
        **dict.fromkeys(("graph_weight", "title_weight", "entity_weight", "rerank_question", "rerank_bm25",
                         "rerank_hops", "chain_weight", "context_weight"), AT_LEAST_0),
        "centrality": ("ppr", "degree"), "ppr": ("push", "power"), "hop_embedding": HOP_EMBEDDINGS,
        "hop_remainder": ("off", "add", "replace"),
    }

    def __post_init__(self) -> None:
        if self.linked_drivers < 0:
            raise ValueError("linked_drivers must be at least 0")
        if self.gamma < 1 or self.hops < 1 or self.iota < 1:
            raise ValueError("gamma, hops and iota must be at least 1")
        if not 0 < self.threshold <= 1:
            raise ValueError("threshold must be in (0, 1]")
        if self.centrality not in ("ppr", "degree"):
            raise ValueError("centrality must be 'ppr' or 'degree'")
        if self.ppr not in ("push", "power"):
            raise ValueError("ppr must be 'push' or 'power'")
        if self.hop_embedding not in HOP_EMBEDDINGS:
            raise ValueError(f"hop_embedding must be one of {', '.join(HOP_EMBEDDINGS)}")
        if self.rerank_depth < 0:
            raise ValueError("rerank_depth must be at least 0")
        if self.hop_remainder not in ("off", "add", "replace"):
            raise ValueError("hop_remainder must be 'off', 'add' or 'replace'")
        if self.mention_sources < 1 or self.mention_max < 1:
            raise ValueError("mention_sources and mention_max must be at least 1")
        if min(self.reader_passages, self.reader_chars, self.reader_tokens) < 1:
            raise ValueError("reader_passages, reader_chars and reader_tokens must be at least 1")
        if self.bridge_limit < 0 or self.lead < 0:
            raise ValueError("bridge_limit and lead must be at least 0")


# The paper's pipeline: pure cosine rerank, every entity type, no pool cap.
PAPER = TigragSettings(tolerance=1e-4, graph_weight=0.0, entity_labels=None, max_pool=1_000_000, hops=2,
                       link_titles=False, link_entities=False, title_weight=0.0, hop_remainder="off",
                       text_titles=False, context_weight=0.0, bridge_limit=0, hop_normalise=False,
                       mentions=False, chain_weight=0.0, remainder_stop=0, lead=0)
PRESETS: dict[str, TigragSettings] = {
    "tigrag": TigragSettings(),
    "tigrag-paper": PAPER,
    "tigrag-reader": TigragSettings(reader=True),
    # The ablations of the paper's Table 10, each on the paper's pipeline.
    "tigrag-no-bm25": dataclasses.replace(PAPER, bm25=False),
    "tigrag-degree": dataclasses.replace(PAPER, centrality="degree"),
    "tigrag-no-rerank": dataclasses.replace(PAPER, rerank=False),
}
