"""ThreadRAG's settings (``pgrag.methods.threadrag``): its options, with the
paper's defaults where it gives them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..nlp import NAME_LABELS
from .spec import AT_LEAST_0, AT_LEAST_1, UNIT, Allowed, Range


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

    # What each option takes beyond its type (MethodSpec.configure).
    RANGES: ClassVar[dict[str, Allowed]] = {
        "anchors": AT_LEAST_1, "documents": AT_LEAST_1, "iterations": AT_LEAST_1, "depth": AT_LEAST_1,
        "lexical_saturation": AT_LEAST_1,                          # a divisor
        "max_context_chars": AT_LEAST_1,
        **dict.fromkeys(("semantic_top_m", "rare_df", "bridge_entities", "bridge_from"), AT_LEAST_0),
        # A loop a round and a retrieval as deep as this times the entities: past a
        # thousand, a question ran for minutes on five documents.
        "steps": Range(0, 1000), "entity_documents": Range(0, 1000),
        **dict.fromkeys(("threshold", "narrative_weight", "semantic_weight", "lexical_weight", "entity_weight"),
                        AT_LEAST_0),
        # The anchors' energy (score x weight) is normalised to sum 1: a weight of 0, or
        # one so small the product underflows, would make it 0 / 0.
        "local_weight": Range(1e-6), "remote_weight": Range(1e-6),
        "decay": UNIT, "semantic_threshold": Range(-1, 1),         # a cosine
        "retrieval": ("hybrid", "dense", "bm25"),
    }

    def __post_init__(self) -> None:
        if self.anchors < 1 or self.documents < 1 or self.iterations < 1 or self.steps < 0:
            raise ValueError("anchors, documents and iterations must be at least 1, steps at least 0")
        if not 0 <= self.decay <= 1:
            raise ValueError("decay must be in [0, 1]")
        if self.retrieval not in ("hybrid", "dense", "bm25"):
            raise ValueError("retrieval must be 'hybrid', 'dense' or 'bm25'")
