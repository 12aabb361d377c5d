"""pgrag as an MCP server (the official ``mcp`` Python SDK), over stdio or
streamable HTTP: tools to list corpora, retrieve, answer and explain.

    pgrag mcp --dsn postgresql://...                  # stdio, for Claude Desktop, Cursor, Zed
    pgrag mcp --transport http --port 8765            # streamable HTTP on 127.0.0.1:8765/mcp

Every result carries provenance (document, chunk, character offsets). A pgrag
error comes back as the tool's error result (``is_error``) with pgrag's own
message. The server reads as the role in its DSN: row-level security applies as
for any other client."""

from __future__ import annotations

import dataclasses
import threading
from typing import TYPE_CHECKING, Any

from . import methods
from .exceptions import PgragError
from .results import Hits

if TYPE_CHECKING:
    from mcp.server import MCPServer

    from .database import Database
    from .llm import LLMSettings
    from .ui.explain import MethodView

TOOLS = ("list_corpora", "retrieve", "answer", "explain")


def hits_json(hits: Hits) -> dict[str, Any]:
    """Hits, answer and trace as plain JSON values (the shape of ``pgrag query --json``)."""
    return {"answer": hits.answer, "hits": [dataclasses.asdict(h) for h in hits],
            "trace": dataclasses.asdict(hits.trace)}


class Service:
    """The tools' logic over one Database, one call at a time (the SDK runs sync
    tools in worker threads; a Database is used from one thread at a time here)."""

    def __init__(self, database: "Database", llm: "LLMSettings | None" = None) -> None:
        self.database = database
        self.llm = llm
        self._lock = threading.Lock()

    def list_corpora(self) -> list[dict[str, Any]]:
        with self._lock:
            return self.database.corpora()

    def retrieve(self, corpus: str, question: str, method: str, k: int,
                 options: dict[str, Any] | None) -> Hits:
        options = dict(options or {})
        if "llm" in options:
            raise PgragError("option 'llm' is the server's: start `pgrag mcp` with --llm / PGRAG_LLM_*")
        with self._lock:
            kb = self.database.corpus(corpus, create=False)
            if self.llm is not None and self.llm.configured and methods.takes_option(method, "llm"):
                options["llm"] = kb.llm(self.llm)
            return kb.retrieve(question, method=method, k=k, **options)

    def answer(self, corpus: str, question: str, method: str, k: int, options: dict[str, Any] | None) -> Hits:
        if not methods.get(method).answers:  # as SQL's pgrag.answer says it
            raise PgragError(f"method {method!r} retrieves but does not answer: call retrieve for its hits")
        return self.retrieve(corpus, question, method, k, options)

    def explain(self, corpus: str, question: str, method: str, k: int,
                options: dict[str, Any] | None) -> "tuple[MethodView, Hits]":
        from .ui.explain import view

        hits = self.retrieve(corpus, question, method, k, options)
        with self._lock:
            return view(self.database.corpus(corpus, create=False), question, method, hits), hits


def build(database: "Database", llm: "LLMSettings | None" = None) -> "MCPServer":
    """The MCP server over ``database``; answering methods use ``llm`` when configured."""
    from mcp.server import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    service = Service(database, llm)
    server = MCPServer(
        "pgrag", version=_version(),
        instructions="Multi-hop retrieval over the corpora of one PostgreSQL database. "
                     f"Methods: {', '.join(methods.names())}. Every hit carries its provenance.")

    def call(fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except PgragError as exc:
            raise ToolError(str(exc)) from exc

    @server.tool()
    def list_corpora() -> dict[str, Any]:
        """The corpora this role may read: name, documents, embedding model, families built."""
        return {"corpora": call(service.list_corpora)}

    @server.tool()
    def retrieve(corpus: str, question: str, method: str = "dense", k: int = 5,
                 options: dict[str, Any] | None = None) -> dict[str, Any]:
        """Top-k chunks for a question with one method (dense, bm25, hybrid, tigrag, t2rag,
        threadrag, cirag, ...). ``options`` override the method's settings, e.g.
        {"hops": 3, "gamma": 50} for tigrag. Each hit has its provenance: document id and
        title, chunk, character offsets into the document body, sentences."""
        return hits_json(call(service.retrieve, corpus, question, method, k, options))

    @server.tool()
    def answer(corpus: str, question: str, method: str = "t2rag", k: int = 5,
               options: dict[str, Any] | None = None) -> dict[str, Any]:
        """Answer a question with an answering method (t2rag, threadrag, cirag) and the
        server's LLM: the answer text (null without an LLM), the evidence hits with
        provenance, and the trace (LLM calls and tokens)."""
        hits = call(service.answer, corpus, question, method, k, options)
        return {"method": method, **hits_json(hits)}

    @server.tool()
    def explain(corpus: str, question: str, method: str = "tigrag", k: int = 5,
                options: dict[str, Any] | None = None) -> dict[str, Any]:
        """How a method reached its hits: the layers of its path, as `pgrag ui` draws them
        (TIGRAG: seed tokens, PPR tokens, hop-1 chunks, entities, hop-2 chunks; ThreadRAG:
        anchors and paths; T2RAG and CIRAG: their rounds and triples), the raw trace steps,
        timings, and the hits' titles with provenance."""
        view, hits = call(service.explain, corpus, question, method, k, options)
        trace = dataclasses.asdict(hits.trace)
        return {"method": method, "question": question,
                "layers": [{"key": layer.key, "label": layer.label, "items": list(layer.items)}
                           for layer in view.layers],
                "steps": trace["steps"], "timings_ms": trace["timings_ms"], "outcome": trace["outcome"],
                "hits": [{"rank": h.rank, "title": h.title, "score": h.score,
                          "provenance": dataclasses.asdict(h.provenance)} for h in hits]}

    return server


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pgrag-multihop")
    except PackageNotFoundError:  # a checkout on sys.path, not installed
        return "0"


def serve(database: "Database", *, llm: "LLMSettings | None" = None, transport: str = "stdio",
          host: str = "127.0.0.1", port: int = 8765) -> None:
    """Run the server until it is stopped: over stdio, or streamable HTTP at http://host:port/mcp."""
    server = build(database, llm)
    if transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host=host, port=port)
