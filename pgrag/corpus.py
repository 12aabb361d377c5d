"""A corpus: the unit of ingest and retrieval (``db.corpus("wiki")``)."""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from . import methods
from .config import ChunkingSettings, Settings
from .embed import Embedder, get_embedder
from .exceptions import CorpusNotFound, EmbeddingMismatch, PgragError
from .ingest import CorpusInfo, IngestReport, ingest
from .queries import query
from .results import Answer, Hit, Hits, Proposition, Provenance, SentenceSpan
from .sources import DocumentIn, validate

if TYPE_CHECKING:
    from .db import Database
    from .extract import ExtractionReport
    from .llm import LLM, LLMSettings
    from .semantic import NodeReport

MAX_VECTOR_DIM = 2000


class Corpus:
    """Documents indexed for retrieval, all stored in the database."""

    def __init__(self, db: "Database", info: CorpusInfo, settings: Settings) -> None:
        self.db = db
        self.info = info
        self.settings = settings

    def __repr__(self) -> str:
        return f"Corpus({self.name!r}, model={self.info.embedding_model!r}, dim={self.info.embedding_dim})"

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def id(self) -> int:
        return self.info.corpus_id

    @cached_property
    def embedder(self) -> Embedder:
        """The corpus's embedding model (the one it was created with)."""
        embedder = get_embedder(self.info.embedding_model)
        if embedder.dim != self.info.embedding_dim:
            raise EmbeddingMismatch(
                f"model {self.info.embedding_model!r} gives {embedder.dim}-dimensional vectors, "
                f"corpus {self.name!r} stores {self.info.embedding_dim}")
        return embedder

    # -- writing -----------------------------------------------------------

    def ingest(self, documents: Iterable[Mapping[str, Any] | DocumentIn], *,
               batch_size: int | None = None, progress: bool = True,
               extract_triples: bool | str = False, llm: "LLM | None" = None) -> IngestReport:
        """Add or replace documents (dicts with ``id``, ``title``, ``text``, ``metadata``).

        Everything is validated first (``InputError``, nothing written); a document
        whose content hash is already indexed is skipped; changed content replaces
        the old version completely. ``extract_triples`` (``"spacy"``, ``"llm"``, or
        ``True`` for the LLM when one is configured, else spaCy) then extracts
        triples and propositions for the new chunks; the result is ``report.triples``."""
        report = self._ingest(validate(documents), batch_size, progress)
        if extract_triples:
            extractor = extract_triples if isinstance(extract_triples, str) else (
                "llm" if llm is not None or self._llm_configured() else "spacy")
            report.triples = self.extract_triples(extractor, llm=llm, progress=progress)
        return report

    @staticmethod
    def _llm_configured() -> bool:
        from .llm import LLMSettings

        return LLMSettings.from_env().configured

    def index(self, *, batch_size: int | None = None, progress: bool = True) -> IngestReport:
        """Index documents that were inserted or changed directly in the tables
        (e.g. ``pgrag.models.Document`` rows added through an ORM session)."""
        rows = self.db.fetchall("pending_documents", {"corpus_id": self.id})
        docs = validate(
            [{"id": ext, "title": title, "text": body, "metadata": meta} for ext, title, body, meta in rows],
            source=f"corpus {self.name!r}")
        return self._ingest(docs, batch_size, progress)

    def sync(self, *, batch_size: int | None = None) -> list[Any]:
        """Process this corpus's follow queue until nothing is due (it follows an
        application table: ``db.attach``), in this process; what ``pgrag worker
        --once`` and, in the server, ``pgrag.index()`` do (then triples, if the
        attachment asks for them). Returns the batch reports."""
        from .follow import sync

        return sync(self, batch_size=batch_size)

    def _ingest(self, docs: list[DocumentIn], batch_size: int | None, progress: bool) -> IngestReport:
        return ingest(self.db, self.info, docs, embedder=self.embedder,
                      spacy_model=self.settings.spacy_model,
                      batch_size=batch_size or self.settings.batch_size, progress=progress)

    def llm(self, settings: "LLMSettings | None" = None) -> "LLM":
        """An LLM client whose replies are cached in this corpus (settings from
        PGRAG_LLM_BASE_URL / PGRAG_LLM_MODEL / PGRAG_LLM_API_KEY by default)."""
        from .llm import LLM, LLMSettings

        return LLM(self.db, self.id, settings or LLMSettings.from_env())

    def extract_triples(self, extractor: str = "spacy", *, llm: "LLM | None" = None,
                        batch_size: int | None = None, progress: bool = True) -> "ExtractionReport":
        """Extract (subject, predicate, object) triples and their proposition
        embeddings from every chunk not yet processed by ``extractor``
        (``"spacy"`` offline, or ``"llm"``). Resumable: re-running continues."""
        from .extract import extract_triples

        if extractor == "llm" and llm is None:
            llm = self.llm()
        return extract_triples(self, extractor, llm=llm, batch_size=batch_size, progress=progress)

    def build_semantic_nodes(self, *, batch_size: int = 256, progress: bool = True) -> "NodeReport":
        """ThreadRAG semantic nodes (and narrative edges) for every indexed document
        that has none, e.g. in a corpus ingested before they existed. Resumable."""
        from .semantic import build_semantic_nodes

        return build_semantic_nodes(self, batch_size=batch_size, progress=progress)

    def propositions(self, queries: str | Sequence[str], *, unique_chunks: int = 5) -> list[Proposition]:
        """Propositions most similar to the query (or to any of several queries, one
        global pool), in descending similarity until they cover ``unique_chunks``
        distinct source chunks (SQL ``pgrag.propositions``)."""
        texts = [queries] if isinstance(queries, str) else list(queries)
        if not texts:
            return []
        vectors = list(self.embedder.encode([t.replace("\x00", " ") for t in texts]))
        rows = self.db.fetchall("propositions", {"corpus": self.name, "embeddings": vectors,
                                                 "unique_chunks": unique_chunks})
        return [Proposition(rank=r[0], triple_id=r[1], score=float(r[2]), subject=r[3], predicate=r[4],
                            object=r[5], text=r[6], extractor=r[7], chunk_id=r[8], document_id=r[9],
                            external_id=r[10], title=r[11], char_start=r[12], char_end=r[13], query=r[14])
                for r in rows]

    def delete(self, external_ids: Sequence[str]) -> int:
        """Delete documents by id, with every row derived from them; returns how many existed."""
        with self.db.transaction() as conn:
            conn.execute(query("corpus_write_lock"), {"corpus_id": self.id})
            ids = [r[0] for r in conn.execute(query("document_ids"), {
                "corpus_id": self.id, "ids": list(external_ids)})]
            if ids:
                conn.execute(query("unindex_documents"), {
                    "corpus_id": self.id, "document_ids": ids, "keep": False})
        return len(ids)

    # -- reading -----------------------------------------------------------

    def retrieve(self, question: str, *, method: str = "dense", k: int = 5, **options: Any) -> Hits:
        """Top-``k`` chunks for ``question`` with provenance; ``.trace`` says how.

        ``options`` override a method's settings, e.g. ``kb.retrieve(q,
        method="tigrag", gamma=100, hops=3)`` (see ``pgrag.methods.tigrag.TigragSettings``)."""
        if not isinstance(question, str):
            raise PgragError("question must be a string")
        if k < 1:
            raise PgragError("k must be at least 1")
        # PostgreSQL text cannot hold NUL; it carries no meaning in a question.
        fn = methods.get(method)
        unknown = [name for name in options if not methods.takes_option(method, name)]
        if unknown and not any(p.kind is p.VAR_KEYWORD for p in inspect.signature(fn).parameters.values()):
            raise PgragError(f"method {method!r} does not take option(s) {', '.join(unknown)}")
        return fn(self, question.replace("\x00", " "), k, **options)

    def answer(self, question: str, *, method: str = "t2rag", k: int = 5, **options: Any) -> Answer:
        """Answer ``question`` with an answering method (``t2rag``, ``threadrag``,
        ``cirag``): the answer text, the evidence hits and the trace. Pass
        ``llm=corpus.llm(LLMSettings(...))`` or configure PGRAG_LLM_*; without an
        LLM ``text`` is None and the evidence is the method's fallback retrieval."""
        hits = self.retrieve(question, method=method, k=k, **options)
        return Answer(text=hits.answer, method=method, evidence=hits)

    def tokenize(self, text: str) -> list[str]:
        """The token pipeline (SQL ``pgrag.tokenize``), as ingest and queries use it."""
        return list(self.db.fetch_row("tokenize", {"text": text})[0])

    def graph_version(self) -> int:
        row = self.db.fetchone("graph_version", {"corpus_id": self.id})
        return int(row[0]) if row else 0

    def hits_from_rows(self, rows: Sequence[tuple]) -> list[Hit]:
        """Hits from rows shaped like ``pgrag.hits`` (rank, chunk_id, score, document_id,
        external_id, title, chunk_ordinal, first/last sentence, char_start, char_end, text)."""
        sentences: dict[int, list[SentenceSpan]] = {}
        if rows:
            for chunk_id, ordinal, start, end in self.db.fetchall("chunk_sentences_many", {
                    "corpus_id": self.id, "chunk_ids": [r[1] for r in rows]}):
                sentences.setdefault(chunk_id, []).append(
                    SentenceSpan(ordinal=ordinal, char_start=start, char_end=end))
        return [
            Hit(rank=rank, score=float(score), text=text, provenance=Provenance(
                document_id=doc_id, external_id=ext, title=title, chunk_id=chunk_id,
                chunk_ordinal=ordinal, char_start=start, char_end=end,
                sentences=tuple(sentences.get(chunk_id, ()))))
            for rank, chunk_id, score, doc_id, ext, title, ordinal, _first, _last, start, end, text in rows
        ]


def open_corpus(db: "Database", name: str, settings: Settings, *, create: bool = True,
                embedding_model: str | None = None,
                chunking: ChunkingSettings | None = None) -> Corpus:
    """The corpus ``name``; created (with the given or default model) when missing."""
    row = db.fetchone("corpus_by_name", {"name": name})
    if row is None:
        if not create:
            raise CorpusNotFound(f"corpus {name!r} does not exist")
        model = embedding_model or settings.embedding_model
        dim = get_embedder(model).dim
        if dim > MAX_VECTOR_DIM:
            raise EmbeddingMismatch(
                f"model {model!r} gives {dim}-dimensional vectors; pgrag's HNSW indexes support "
                f"at most {MAX_VECTOR_DIM} (pgvector's limit for the vector type)")
        chunking = chunking or ChunkingSettings()
        with db.transaction() as conn:
            conn.execute(query("create_corpus"), {
                "name": name, "model": model, "dim": dim, "sentences": chunking.sentences,
                "overlap": chunking.overlap, "window": chunking.edge_window})
        row = db.fetchone("corpus_by_name", {"name": name})
        assert row is not None
    info = CorpusInfo(corpus_id=row[0], name=row[1], embedding_model=row[2], embedding_dim=row[3],
                      chunk_sentences=row[4], chunk_overlap=row[5], edge_window=row[6])
    if embedding_model and embedding_model != info.embedding_model:
        raise EmbeddingMismatch(
            f"corpus {name!r} was built with {info.embedding_model!r}, not {embedding_model!r}; "
            "use another corpus name for another model")
    return Corpus(db, info, settings)
