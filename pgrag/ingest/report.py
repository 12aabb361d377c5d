"""What an ingest did: one report, filled by every stage of the pipeline."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(kw_only=True)
class IngestReport:
    """What an ingest did, and where its time went (seconds)."""

    corpus: str
    documents: int = 0
    added: int = 0
    replaced: int = 0
    unchanged: int = 0
    sentences: int = 0
    chunks: int = 0
    entities: int = 0
    nodes: int = 0                    # ThreadRAG semantic nodes (0 unless the corpus maintains them)
    names: int = 0                    # ThreadRAG name vectors (likewise)
    # The model timings are the time their calls took; other_seconds is the rest of
    # the ingest's own thread (chunking, the writes). With prefetch (ingest.pipeline)
    # all three overlap, so they add up to more than total_seconds.
    total_seconds: float = 0.0
    embedding_seconds: float = 0.0
    nlp_seconds: float = 0.0
    other_seconds: float = 0.0
    node_embedding_seconds: float = 0.0   # part of embedding_seconds: sentences, nodes and names
    name_embedding_seconds: float = 0.0   # part of node_embedding_seconds: the name vectors
    triples: Any = None  # an extract.ExtractionReport when triples were extracted
    backfill: Any = None  # a semantic.NodeReport when ``methods`` enabled a family for older documents


_TIMINGS = ("embedding_seconds", "nlp_seconds", "node_embedding_seconds", "name_embedding_seconds")


def add_timings(report: IngestReport, part: IngestReport) -> None:
    """Add the model timings of ``part`` (a batch prepared ahead) to ``report``."""
    for name in _TIMINGS:
        setattr(report, name, getattr(report, name) + getattr(part, name))
