"""pgrag as a LangChain retriever, over the application's own connection pool.

    python examples/frameworks/langchain_retriever.py DSN [CORPUS]

DSN names a database that holds a corpus (``pgrag demo`` builds
``pgrag-sample``). Retrieval runs inside PostgreSQL: this process loads no
model, and the last line says so. Each document prints as one JSON line: the
start of its text and its metadata (provenance, rank, score, hop)."""

from __future__ import annotations

import asyncio
import json
import sys

from psycopg_pool import AsyncConnectionPool, ConnectionPool

from pgrag.integrations.langchain import PgragRetriever

QUESTION = "When did Lothair II's mother die?"


def show(label: str, documents: list) -> None:
    print(f"{label}:")
    for d in documents:
        print(json.dumps({"id": d.id, "text": d.page_content, **d.metadata}, ensure_ascii=False))


async def asynchronous(dsn: str, corpus: str) -> list:
    async with AsyncConnectionPool(dsn, min_size=1, max_size=2) as pool:
        retriever = PgragRetriever(async_connection=pool, corpus=corpus, method="tigrag", k=3)
        return await retriever.ainvoke(QUESTION)


def main(dsn: str, corpus: str) -> None:
    with ConnectionPool(dsn, min_size=1, max_size=2) as pool:
        retriever = PgragRetriever(connection=pool, corpus=corpus, method="tigrag", k=3)
        found = retriever.invoke(QUESTION)
        show("tigrag", found)
        # the same retriever kept to two documents (docs/filters.md)
        two = {"$external_id": {"$in": ["Lothair II", "Inherent Vice (film)"]}}
        show("filtered", retriever.invoke(QUESTION, filter=two))
    show("async", asyncio.run(asynchronous(dsn, corpus)))
    loaded = [m for m in ("torch", "sentence_transformers", "onnxruntime", "spacy") if m in sys.modules]
    print(f"models loaded here: {loaded}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "pgrag-sample")
