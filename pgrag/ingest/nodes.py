"""The ``threadrag`` family's hook: ThreadRAG's semantic nodes and name vectors
(``pgrag.semantic``) of each document, planned from the sentences and chunk
vectors the prepare stage found, written with the document's rows."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import nlp
from ..embed import Embedder
from ..semantic import DocumentText, NameRow, NodeRow, copy_names, copy_nodes, document_names, plan_names, plan_nodes
from .hooks import register
from .prepare import Prepared
from .report import IngestReport

FAMILY = "threadrag"


@dataclass(slots=True)
class NodePlan:
    nodes: list[NodeRow]
    node_embeddings: list[np.ndarray]
    names: list[NameRow] = field(default_factory=list)
    name_embeddings: list[np.ndarray] = field(default_factory=list)


class SemanticNodes:
    """ThreadRAG's semantic nodes, narrative edges and name vectors."""

    def prepare(self, prepared: list[Prepared], embedder: Embedder, report: IngestReport) -> None:
        if not prepared:
            return
        docs = [DocumentText(title=p.doc.title, body=p.doc.body, sentences=p.sentences,
                             chunks={(c.start, c.end): v for c, v in zip(p.chunks, p.embeddings)})
                for p in prepared]
        nodes, vectors, stats = plan_nodes(docs, embedder)
        offset = 0
        plans = []
        for p, doc_nodes in zip(prepared, nodes):
            names = document_names(((e.text, e.start) for e in p.chunked_entities() if e.label in nlp.NAME_LABELS),
                                   p.sentences)
            plans.append(NodePlan(doc_nodes, list(vectors[offset: offset + len(doc_nodes)]), names))
            offset += len(doc_nodes)
        name_vectors, name_seconds = plan_names([plan.names for plan in plans], embedder)
        for p, plan, doc_vectors in zip(prepared, plans, name_vectors):
            plan.name_embeddings = doc_vectors
            p.derived[FAMILY] = plan
        report.embedding_seconds += stats["seconds"] + name_seconds
        report.node_embedding_seconds += stats["seconds"] + name_seconds
        report.name_embedding_seconds += name_seconds

    def write(self, conn: Any, corpus_id: int, work: list[Prepared], ids: dict[str, int],
              embedder: Embedder, report: IngestReport) -> None:
        # Prepared from a CorpusInfo read before the family was enabled: plan now,
        # under the lock, so no document written after an enable lacks its nodes.
        self.prepare([p for p in work if FAMILY not in p.derived], embedder, report)
        plans: list[NodePlan] = [p.derived[FAMILY] for p in work]
        doc_ids = [ids[p.doc.external_id] for p in work]
        report.nodes += copy_nodes(conn, corpus_id, doc_ids, [plan.nodes for plan in plans],
                                   [v for plan in plans for v in plan.node_embeddings])
        report.names += copy_names(conn, corpus_id, doc_ids, [plan.names for plan in plans],
                                   [plan.name_embeddings for plan in plans])


register(FAMILY, SemanticNodes())
