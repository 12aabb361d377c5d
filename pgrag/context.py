"""What a retrieval method may use: a narrow context, the same in both homes.

A method receives a ``Context``, never the ``Corpus`` façade: a database that
runs the named queries of ``sql/queries_*.sql`` (psycopg in a client process, SPI
inside the server), the corpus's facts, its embedding model, the spaCy model and
the LLM (or why there is none). Everything a method needs beyond those is a
named query, so the same method code runs in ``kb.retrieve`` and in SQL's
``pgrag.retrieve``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from .config import DEFAULT_SPACY_MODEL
from .exceptions import PgragError
from .results import Hit, Proposition, Trace

T = TypeVar("T")

if TYPE_CHECKING:
    from .embed import Embedder
    from .filters import Scope
    from .index.cache import RankingIndex
    from .llm import LLM


class Connection(Protocol):
    """What a ``QueryRunner``'s transaction gives: SQL text with ``%(name)s``
    parameters, and rows in and out in bulk (``pgrag.bulk``). Two kinds:
    ``pgrag.db.ClientConnection`` (psycopg, COPY) and ``pgrag.spi.SpiConnection``
    (inside the server, arrays)."""

    def execute(self, sql: Any, params: Any = None, *, binary: bool = False) -> Any: ...

    def write_rows(self, table: str, rows: Sequence[Sequence[Any]]) -> None:
        """Insert rows into ``pgrag.<table>`` (``pgrag.bulk.TABLES`` gives their columns)."""
        ...

    def read_triples(self, name: str, params: dict[str, Any]) -> tuple[Any, Any, Any]:
        """The three bigint columns of query ``<name>_copy`` / ``<name>_arrays`` as
        arrays (int64, int64, float64)."""
        ...


class QueryRunner(Protocol):
    """The database side of a context: named queries, and a transaction whose
    connection (``Connection``) ``execute``s SQL text with ``%(name)s`` parameters.
    Two implementations: ``pgrag.db.Connector`` (psycopg) and
    ``pgrag.spi.SpiDatabase`` (inside the server)."""

    @property
    def dsn(self) -> str:
        """Names the database (a client's DSN, ``spi:<name>`` in the server): caches key on it."""
        ...

    def fetchall(self, name: str, params: dict[str, Any] | None = None) -> list[tuple]: ...

    def fetchone(self, name: str, params: dict[str, Any] | None = None) -> tuple | None: ...

    def fetch_row(self, name: str, params: dict[str, Any] | None = None) -> tuple: ...

    def transaction(self) -> contextlib.AbstractContextManager[Any]:
        """A ``Connection`` in one transaction: all or nothing."""
        ...

    def wait(self, work: Callable[[], T]) -> T:
        """``work()``, a blocking wait outside the database (an LLM request), run so
        that a cancel of the statement still ends it: a no-op in a client process,
        polled for interrupts inside the server."""
        ...


@dataclass(frozen=True, kw_only=True)
class CorpusInfo:
    """A corpus's row in ``pgrag.corpus``: its id, name, model, chunking and the
    method families it maintains at ingest (``pgrag.families``)."""

    corpus_id: int
    name: str
    embedding_model: str
    embedding_dim: int
    chunk_sentences: int
    chunk_overlap: int
    edge_window: int
    families: tuple[str, ...] = ()

    def maintains(self, family: str) -> bool:
        return family in self.families

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> "CorpusInfo":
        """From a ``corpus_by_name`` row."""
        return cls(corpus_id=row[0], name=row[1], embedding_model=row[2], embedding_dim=row[3],
                   chunk_sentences=row[4], chunk_overlap=row[5], edge_window=row[6],
                   families=tuple(row[7] or ()))


def lookup_corpus(db: QueryRunner, name: str) -> CorpusInfo | None:
    row = db.fetchone("corpus_by_name", {"name": name})
    return CorpusInfo.from_row(row) if row is not None else None


@dataclass
class Context:
    """One corpus as a method sees it."""

    db: QueryRunner
    info: CorpusInfo
    spacy_model: str = DEFAULT_SPACY_MODEL
    llm: "LLM | None" = None
    # Why ``llm`` is None, for the trace of a method that falls back without one.
    llm_note: str = "no LLM configured (PGRAG_LLM_BASE_URL / PGRAG_LLM_MODEL, or llm=...): retrieval-only fallback"
    _embedder: "Embedder | None" = field(default=None, repr=False)
    # The documents a metadata filter allows (pgrag.filters); None: every document.
    scope: "Scope | None" = None

    @property
    def id(self) -> int:
        return self.info.corpus_id

    @property
    def name(self) -> str:
        return self.info.name

    @cached_property
    def embedder(self) -> "Embedder":
        """The corpus's embedding model (the one it was created with)."""
        if self._embedder is not None:
            return self._embedder
        from .embed import corpus_embedder

        return corpus_embedder(self.info)

    # -- what every method does --------------------------------------------------

    def ranking_index(self) -> "RankingIndex":
        """The corpus's cached token graph and postings (pgrag.index.cache), with
        only the chunks of the filter's documents findable when there is a filter."""
        from .index.cache import ranking_index

        index = ranking_index(self.db, self.id)
        if self.scope is None:
            return index
        return index._replace(postings=index.postings.within(self.scope.documents))

    def encode(self, texts: Sequence[str], trace: Trace | None = None) -> list[Any]:
        """Embeddings of ``texts`` in one batch, timed as the trace's "embed" stage."""
        t0 = time.perf_counter()
        out = list(self.embedder.encode(list(texts))) if texts else []
        if trace is not None:
            trace.time("embed", t0)
        return out

    def encode_later(self, texts: Sequence[str], trace: Trace | None = None) -> Callable[[], list[Any]]:
        """``encode`` begun now, its vectors when the returned function is called.
        Through a model runtime the runtime's process encodes while this one
        goes on (the graph stage of a hop); "embed" is then the time spent
        waiting. In process it is ``encode`` at once: the model's threads and the
        caller's would share the same cores (measured slower on 2 of them)."""
        from .model_client import RemoteEmbedder, background

        embedder = self.embedder
        if not texts or not isinstance(embedder, RemoteEmbedder):
            out = self.encode(texts, trace)
            return lambda: out
        batch = list(texts)
        pending = background(lambda: list(embedder.encode(batch)))

        def vectors() -> list[Any]:
            t0 = time.perf_counter()
            out = pending()
            if trace is not None:
                trace.time("embed", t0)
            return out

        return vectors

    def nearest_within(self, vectors: Sequence[Any], depth: int) -> list[tuple[list[int], list[float]]]:
        """For each vector, its ``depth`` nearest chunks inside the filter, best
        first, with their cosines: where the ranking index holds too many chunks
        to rank them in memory (``Postings.nearest`` gives None), pgvector's HNSW
        scan kept to the filter's documents."""
        if self.scope is None:
            raise PgragError("internal error: nearest_within without a filter")
        out = []
        for vector in vectors:
            rows = self.db.fetchall("dense_within", {"corpus_id": self.id, "embedding": vector, "k": depth,
                                                     "document_ids": [int(d) for d in self.scope.documents]})
            out.append(([int(r[0]) for r in rows], [float(r[2]) for r in rows]))
        return out

    def tokenize(self, text: str) -> list[str]:
        """The token pipeline (SQL ``pgrag.tokenize``), as ingest and queries use it."""
        return list(self.db.fetch_row("tokenize", {"text": text})[0])

    def tokenize_many(self, texts: Sequence[str]) -> list[list[str]]:
        """``tokenize`` of each text, in one round trip."""
        if not texts:
            return []
        return [list(row[0]) for row in self.db.fetchall("tokenize_many", {"texts": list(texts)})]

    def chunk_texts(self, chunk_ids: Sequence[int]) -> dict[int, tuple[str, str]]:
        """chunk id -> (document title, chunk text)."""
        if not chunk_ids:
            return {}
        return {cid: (title, text) for cid, title, text in self.db.fetchall(
            "chunk_texts", {"corpus_id": self.id, "chunk_ids": list(chunk_ids)})}

    def propositions(self, queries: str | Sequence[str], *, unique_chunks: int = 5) -> list[Proposition]:
        """Propositions most similar to any of the queries (one global pool), in
        descending similarity until they cover ``unique_chunks`` distinct chunks."""
        texts = [queries] if isinstance(queries, str) else list(queries)
        if not texts:
            return []
        vectors = self.encode([t.replace("\x00", " ") for t in texts])
        if self.scope is None:
            rows = self.db.fetchall("propositions", {"corpus": self.name, "embeddings": vectors,
                                                     "unique_chunks": unique_chunks})
        else:   # the same pool inside a metadata filter's documents
            rows = self.db.fetchall("propositions_within", {
                "corpus_id": self.id, "embeddings": vectors, "unique_chunks": unique_chunks,
                "document_ids": [int(d) for d in self.scope.documents]})
        return [Proposition(rank=r[0], triple_id=r[1], score=float(r[2]), subject=r[3], predicate=r[4],
                            object=r[5], text=r[6], extractor=r[7], chunk_id=r[8], document_id=r[9],
                            external_id=r[10], title=r[11], char_start=r[12], char_end=r[13], query=r[14])
                for r in rows]

    def hits(self, chunk_ids: Sequence[int], scores: Sequence[float],
             details: Sequence[dict[str, Any]] | None = None, trace: Trace | None = None) -> list[Hit]:
        """The final hits, in the given order, with provenance fetched in one query
        (timed as the trace's "provenance" stage) and each hit's ``details``."""
        t0 = time.perf_counter()
        rows = self.db.fetchall("hits", {"corpus_id": self.id, "chunk_ids": list(chunk_ids),
                                         "scores": [float(s) for s in scores]}) if chunk_ids else []
        out = self.hits_from_rows(rows)
        if details is not None:
            by_chunk = dict(zip(chunk_ids, details))
            out = [Hit(rank=h.rank, score=h.score, text=h.text, provenance=h.provenance,
                       details=by_chunk[h.provenance.chunk_id]) for h in out]
        if trace is not None:
            trace.time("provenance", t0)
        return out

    def hits_from_rows(self, rows: Sequence[tuple]) -> list[Hit]:
        """Hits from rows of the named queries ``hits`` and ``dense_hits``
        (``Hit.from_row``: pgrag.hit's columns, then the span's sentences)."""
        out = [Hit.from_row(r) for r in rows]
        outside = [h.provenance.document_id for h in out
                   if self.scope is not None and not self.scope.allows(h.provenance.document_id)]
        if outside:   # a method that let a filtered-out document through is a bug, never a result
            raise PgragError(f"internal error: hits from documents {outside[:5]} outside the filter")
        return out

    # -- stored data beyond what every method uses ------------------------------

    def require_family(self, family: str) -> None:
        """Raise ``MethodNotBuilt`` unless the corpus maintains ``family`` (``pgrag.families``)."""
        from .families import require

        require(self, family)

    def ensure_triples(self, extractor: str, chunk_ids: Sequence[int], *, llm: "LLM | None" = None) -> int:
        """Extract triples and propositions from those of ``chunk_ids`` that
        ``extractor`` has not processed (``llm``: the client for the ``llm``
        extractor); the number of chunks processed. Methods ask the context for
        derived data, so no method imports the building layer."""
        from .extract import extract_triples

        return extract_triples(self, extractor, llm=llm, chunk_ids=chunk_ids, progress=False).chunks

    @contextlib.contextmanager
    def charged(self, trace: Trace) -> Iterator[None]:
        """Charge the LLM tokens spent inside the block to ``trace`` (also on error)."""
        if self.llm is None:
            yield
            return
        import dataclasses

        before = dataclasses.replace(self.llm.usage)
        try:
            yield
        finally:
            trace.charge(self.llm.usage.since(before))
