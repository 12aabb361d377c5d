"""pgrag as a LlamaIndex retriever, over the application's own connection pool,
with LlamaIndex's own metadata filters.

    python examples/frameworks/llamaindex_retriever.py DSN [CORPUS]

DSN names a database that holds a corpus (``pgrag demo`` builds
``pgrag-sample``). Retrieval runs inside PostgreSQL: this process loads no
model, and the last line says so. Each node prints as one JSON line: its score,
the start of its text and its metadata (provenance, rank, hop)."""

from __future__ import annotations

import asyncio
import json
import sys

from llama_index.core.vector_stores.types import FilterOperator, MetadataFilter, MetadataFilters
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from pgrag.integrations.llamaindex import PgragRetriever

QUESTION = "When did Lothair II's mother die?"


def show(label: str, nodes: list) -> None:
    print(f"{label}:")
    for n in nodes:
        print(json.dumps({"id": n.node.node_id, "score": n.score, "text": n.node.get_content(), **n.node.metadata},
                         ensure_ascii=False))


async def asynchronous(dsn: str, corpus: str) -> list:
    async with AsyncConnectionPool(dsn, min_size=1, max_size=2) as pool:
        retriever = PgragRetriever(async_connection=pool, corpus=corpus, method="tigrag", k=3)
        return await retriever.aretrieve(QUESTION)


def main(dsn: str, corpus: str) -> None:
    with ConnectionPool(dsn, min_size=1, max_size=2) as pool:
        show("tigrag", PgragRetriever(connection=pool, corpus=corpus, method="tigrag", k=3).retrieve(QUESTION))
        # LlamaIndex's filters, mapped onto pgrag's (docs/filters.md)
        two = MetadataFilters(filters=[MetadataFilter(key="$external_id", operator=FilterOperator.IN,
                                                      value=["Lothair II", "Inherent Vice (film)"])])
        filtered = PgragRetriever(connection=pool, corpus=corpus, method="tigrag", k=3, filters=two)
        show("filtered", filtered.retrieve(QUESTION))
    show("async", asyncio.run(asynchronous(dsn, corpus)))
    loaded = [m for m in ("torch", "sentence_transformers", "onnxruntime", "spacy") if m in sys.modules]
    print(f"models loaded here: {loaded}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "pgrag-sample")
