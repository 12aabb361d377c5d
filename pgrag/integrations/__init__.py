"""Retrievers for the frameworks applications are built on (LangChain,
LlamaIndex). Each calls ``pgrag.retrieve`` over the application's own psycopg
connection or pool, so retrieval runs inside PostgreSQL and the application's
process loads no model. Install with ``pip install pgrag-multihop[langchain]``
or ``[llamaindex]``."""
