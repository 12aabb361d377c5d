"""pgrag as a LlamaIndex retriever: ``PgragRetriever(connection=pool,
corpus="wiki", method="tigrag")``, then ``retriever.retrieve(question)`` or
``await retriever.aretrieve(question)``, or in a query engine. Each hit is a
``NodeWithScore`` whose node's metadata holds its provenance (document id,
external id, title, chunk, offsets), rank, score and hop. ``filters`` takes
LlamaIndex's ``MetadataFilters`` (mapped onto pgrag's filter) or pgrag's own
filter dict (docs/filters.md)."""

from __future__ import annotations

from typing import Any

from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
from llama_index.core.vector_stores.types import FilterCondition, FilterOperator, MetadataFilter, MetadataFilters

from ..exceptions import PgragError
from .calls import RetrieveCall, RunIn, arows, metadata, rows

# LlamaIndex's operators that pgrag's filter has; the others (text match, any,
# all, contains) raise rather than being dropped: a filter silently widened
# would show a user documents they meant to exclude.
_OPERATORS = {FilterOperator.EQ: "$eq", FilterOperator.NE: "$ne", FilterOperator.GT: "$gt",
              FilterOperator.GTE: "$gte", FilterOperator.LT: "$lt", FilterOperator.LTE: "$lte",
              FilterOperator.IN: "$in", FilterOperator.NIN: "$nin"}


class PgragRetriever(BaseRetriever):
    """Ranked evidence from ``pgrag.retrieve`` over the application's psycopg
    connection or pool (``connection`` for ``retrieve``, ``async_connection``
    for ``aretrieve``). ``run_in="auto"`` (the default) runs the method inside
    PostgreSQL, so this process loads no model, and where the server has no
    PL/Python (a managed service) runs it in this process instead, with the same
    hits; ``"server"`` or ``"client"`` choose one."""

    def __init__(self, *, corpus: str, connection: Any = None, async_connection: Any = None,
                 method: str = "tigrag", k: int = 5, options: dict[str, Any] | None = None,
                 filters: MetadataFilters | dict[str, Any] | None = None, run_in: RunIn = "auto",
                 **kwargs: Any) -> None:
        self.connection = connection
        self.async_connection = async_connection
        self.call = RetrieveCall(corpus=corpus, method=method, k=k, options=dict(options or {}),
                                 filter=pgrag_filter(filters), run_in=run_in)
        super().__init__(**kwargs)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        if self.connection is None:
            raise PgragError("PgragRetriever: retrieve needs connection= (a psycopg Connection or ConnectionPool)")
        return [_node(r, self.call) for r in rows(self.connection, self.call, query_bundle.query_str)]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        if self.async_connection is None:
            raise PgragError("PgragRetriever: aretrieve needs async_connection= "
                             "(a psycopg AsyncConnection or AsyncConnectionPool)")
        found = await arows(self.async_connection, self.call, query_bundle.query_str)
        return [_node(r, self.call) for r in found]


def pgrag_filter(filters: MetadataFilters | dict[str, Any] | None) -> dict[str, Any] | None:
    """LlamaIndex's ``MetadataFilters`` as pgrag's filter dict (a dict passes as it is)."""
    if filters is None or isinstance(filters, dict):
        return filters
    parts = [pgrag_filter(f) if isinstance(f, MetadataFilters) else _condition(f) for f in filters.filters]
    if filters.condition == FilterCondition.NOT:
        return {"$not": {"$and": parts}}
    return {"$or" if filters.condition == FilterCondition.OR else "$and": parts}


def _condition(f: MetadataFilter) -> dict[str, Any]:
    if f.operator == FilterOperator.IS_EMPTY:
        return {f.key: {"$exists": False}}
    if f.operator not in _OPERATORS:
        raise PgragError(f"LlamaIndex filter operator {f.operator.value!r} (on {f.key!r}) has no pgrag filter; "
                         f"pgrag has {', '.join(o.value for o in _OPERATORS)} and is_empty")
    return {f.key: {_OPERATORS[f.operator]: f.value}}


def _node(row: dict[str, Any], call: RetrieveCall) -> NodeWithScore:
    node = TextNode(id_=f"{call.corpus}:{row['chunk_id']}", text=row["text"], metadata=metadata(row, call))
    return NodeWithScore(node=node, score=float(row["score"]))
