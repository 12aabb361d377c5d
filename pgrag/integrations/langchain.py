"""pgrag as a LangChain retriever: ``PgragRetriever(connection=pool,
corpus="wiki", method="tigrag")``, then ``retriever.invoke(question)`` or
``await retriever.ainvoke(question)``. Each hit is a ``Document`` whose metadata
holds its provenance (document id, external id, title, chunk, offsets), its
rank, score and hop. ``filter`` takes pgrag's metadata filter (docs/filters.md),
the same dict that LangChain's PGVector takes, per retriever or per call
(``retriever.invoke(question, filter={...})``)."""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field

from ..exceptions import PgragError
from .calls import RetrieveCall, RunIn, arows, metadata, rows


class PgragRetriever(BaseRetriever):
    """Ranked evidence from ``pgrag.retrieve`` over the application's psycopg
    connection or pool (``connection`` for ``invoke``, ``async_connection`` for
    ``ainvoke``). ``run_in="auto"`` (the default) runs the method inside
    PostgreSQL, so this process loads no model, and where the server has no
    PL/Python (a managed service) runs it in this process instead, with the same
    hits; ``"server"`` or ``"client"`` choose one."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    corpus: str
    connection: Any = None
    async_connection: Any = None
    method: str = "tigrag"
    k: int = 5
    options: dict[str, Any] = Field(default_factory=dict)
    filter: dict[str, Any] | None = None
    run_in: RunIn = "auto"

    def _call(self) -> RetrieveCall:
        return RetrieveCall(corpus=self.corpus, method=self.method, k=self.k, options=self.options,
                            filter=self.filter, run_in=self.run_in)

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun,
                                filter: dict[str, Any] | None = None) -> list[Document]:
        if self.connection is None:
            raise PgragError("PgragRetriever: invoke needs connection= (a psycopg Connection or ConnectionPool)")
        call = self._call()
        return [_document(r, call) for r in rows(self.connection, call, query, filter)]

    async def _aget_relevant_documents(self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun,
                                       filter: dict[str, Any] | None = None) -> list[Document]:
        if self.async_connection is None:
            raise PgragError("PgragRetriever: ainvoke needs async_connection= "
                             "(a psycopg AsyncConnection or AsyncConnectionPool)")
        call = self._call()
        return [_document(r, call) for r in await arows(self.async_connection, call, query, filter)]


def _document(row: dict[str, Any], call: RetrieveCall) -> Document:
    return Document(page_content=row["text"], metadata=metadata(row, call), id=f"{call.corpus}:{row['chunk_id']}")
