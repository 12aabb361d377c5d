"""A corpus: the unit of ingest and retrieval (``db.corpus("wiki")``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from . import families as fam
from . import methods
from .config import ChunkingSettings, Settings
from .context import Context, CorpusInfo, lookup_corpus
from .embed import Embedder, corpus_embedder, get_embedder
from .exceptions import CorpusNotFound, EmbeddingMismatch, PgragError
from .ingest import IngestReport, index_pending, ingest
from .methods import families_for
from .queries import query
from .results import Answer, Hit, Hits, Proposition
from .sources import DocumentIn, validate

if TYPE_CHECKING:
    from .context import QueryRunner
    from .extract import ExtractionReport
    from .llm import LLM, LLMSettings
    from .semantic import NodeReport

MAX_VECTOR_DIM = 2000


class Corpus:
    """Documents indexed for retrieval, all stored in the database."""

    def __init__(self, db: "QueryRunner", info: CorpusInfo, settings: Settings) -> None:
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

    @property
    def families(self) -> tuple[str, ...]:
        """The method families this corpus maintains at ingest (``pgrag.families``):
        ``("threadrag",)`` once ThreadRAG's semantic nodes are enabled."""
        return self.info.families

    @property
    def embedder(self) -> Embedder:
        """The corpus's embedding model (the one it was created with)."""
        return corpus_embedder(self.info)

    def context(self, llm: "LLM | bool | None" = None) -> Context:
        """What a method sees of this corpus (``pgrag.context``), with the LLM
        resolved as ``retrieve`` does: ``llm`` itself (re-bound to this corpus's
        reply cache, so no reply crosses corpora), none when ``llm`` is False,
        else the one configured in PGRAG_LLM_*, else none."""
        ctx = Context(db=self.db, info=self.info, spacy_model=self.settings.spacy_model)
        if llm is False:
            ctx.llm_note = "LLM disabled (llm=False)"
        elif llm is None or llm is True:
            from .llm import LLMSettings

            settings = LLMSettings.from_env()
            ctx.llm = self.llm(settings) if settings.configured else None
        else:
            ctx.llm = llm if llm.corpus_id == self.id else self.llm(llm.settings)
        return ctx

    # -- writing -----------------------------------------------------------

    def ingest(self, documents: Iterable[Mapping[str, Any] | DocumentIn], *,
               batch_size: int | None = None, progress: bool = True,
               extract_triples: bool | str = False, llm: "LLM | None" = None,
               methods: Sequence[str] = ()) -> IngestReport:
        """Add or replace documents (dicts with ``id``, ``title``, ``text``, ``metadata``).

        Everything is validated first (``InputError``, nothing written); a document
        whose content hash is already indexed is skipped; changed content replaces
        the old version completely. ``extract_triples`` (``"spacy"``, ``"llm"``, or
        ``True`` for the LLM when one is configured, else spaCy) then extracts
        triples and propositions for the new chunks; the result is ``report.triples``.
        ``methods`` (e.g. ``["threadrag"]``) enables the families those methods need
        before ingesting, and backfills the corpus's older documents after
        (``report.backfill``)."""
        docs = validate(documents)
        needed = families_for(methods)
        for family in needed:     # the flag first: this ingest then builds the family's rows
            self._set_families(fam.enable(self.db, self.id, family))
        report = self._ingest(docs, batch_size, progress)
        if needed:                # older documents (or an interrupted backfill): resumable
            report.backfill = self.build_semantic_nodes(progress=progress)
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
        return index_pending(self.db, self.info, embedder=self.embedder, spacy_model=self.settings.spacy_model,
                             batch_size=batch_size or self.settings.batch_size, progress=progress)

    def sync(self, *, batch_size: int | None = None) -> list[Any]:
        """Process this corpus's follow queue until nothing is due (it follows an
        application table: ``db.attach``), in this process; what ``pgrag worker
        --once`` and, in the server, ``pgrag.index()`` do (then triples, if the
        attachment asks for them). Returns the batch reports."""
        from .follow import sync

        return sync(self.context(), batch_size=batch_size or self.settings.batch_size)

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
        return extract_triples(self.context(False), extractor, llm=llm, batch_size=batch_size, progress=progress)

    def build_semantic_nodes(self, *, batch_size: int = 256, progress: bool = True) -> "NodeReport":
        """Enable the ``threadrag`` family (later ingests maintain it) and build the
        ThreadRAG semantic nodes (and narrative edges) of every indexed document that
        has none. Resumable: a re-run continues where an interrupted one stopped."""
        from .semantic import build_semantic_nodes

        report = build_semantic_nodes(self.context(False), batch_size=batch_size, progress=progress)
        self._set_families(fam.current(self.db, self.id))
        return report

    def enable(self, family: str, *, batch_size: int = 256, progress: bool = True) -> "NodeReport":
        """Maintain ``family`` from now on and backfill it (``"threadrag"``: its
        semantic nodes, as ``build_semantic_nodes``). Resumable."""
        fam.check(family)
        return self.build_semantic_nodes(batch_size=batch_size, progress=progress)

    def disable(self, family: str, *, drop: bool = False) -> int:
        """Stop maintaining ``family`` at ingest; with ``drop`` also delete its rows.
        Methods that need it then refuse to run. Returns the rows dropped."""
        dropped = fam.disable(self.db, self.id, family, drop=drop)
        self._set_families(fam.current(self.db, self.id))
        return dropped

    def _set_families(self, families: tuple[str, ...]) -> None:
        self.info = dataclasses.replace(self.info, families=families)

    def propositions(self, queries: str | Sequence[str], *, unique_chunks: int = 5) -> list[Proposition]:
        """Propositions most similar to the query (or to any of several queries, one
        global pool), in descending similarity until they cover ``unique_chunks``
        distinct source chunks (SQL ``pgrag.propositions``)."""
        return self.context(False).propositions(queries, unique_chunks=unique_chunks)

    def delete(self, external_ids: Sequence[str]) -> int:
        """Delete documents by id, with every row derived from them; returns how many existed."""
        return int(self.db.fetch_row("delete_documents", {"corpus": self.name, "ids": list(external_ids)})[0])

    # -- reading -----------------------------------------------------------

    def retrieve(self, question: str, *, method: str = "dense", k: int = 5,
                 llm: "LLM | bool | None" = None, **options: Any) -> Hits:
        """Top-``k`` chunks for ``question`` with provenance; ``.trace`` says how.

        ``options`` override a method's settings, e.g. ``kb.retrieve(q,
        method="tigrag", gamma=100, hops=3)`` (see ``pgrag.methods.tigrag.TigragSettings``).
        ``llm`` goes to the LLM-driven methods (``t2rag``, ``threadrag``, ``cirag``, ``tigrag-reader``):
        a client, False for none, or None for the one in PGRAG_LLM_*."""
        spec = methods.get(method)
        if llm is not None and not spec.takes_llm:
            raise PgragError(f"method {method!r} does not take option(s) llm")
        return methods.run(self.context(llm if spec.takes_llm else False), method, question, k, options)

    def answer(self, question: str, *, method: str = "t2rag", k: int = 5, **options: Any) -> Answer:
        """Answer ``question`` with an answering method (``t2rag``, ``threadrag``,
        ``cirag``): the answer text, the evidence hits and the trace. Pass
        ``llm=corpus.llm(LLMSettings(...))`` or configure PGRAG_LLM_*; without an
        LLM ``text`` is None and the evidence is the method's fallback retrieval."""
        hits = self.retrieve(question, method=method, k=k, **options)
        return Answer(text=hits.answer, method=method, evidence=hits)

    def tokenize(self, text: str) -> list[str]:
        """The token pipeline (SQL ``pgrag.tokenize``), as ingest and queries use it."""
        return self.context(False).tokenize(text)

    def graph_version(self) -> int:
        row = self.db.fetchone("graph_version", {"corpus_id": self.id})
        return int(row[0]) if row else 0

    def hits_from_rows(self, rows: Sequence[tuple]) -> list[Hit]:
        """Hits, with provenance and sentences, from rows of the SQL functions that
        return ``pgrag.hit`` (pgrag.bm25, pgrag.dense, pgrag.hybrid, pgrag.tigrag),
        in their order and with their scores."""
        return self.context(False).hits([r[1] for r in rows], [r[2] for r in rows])


def open_corpus(db: "QueryRunner", name: str, settings: Settings, *, create: bool = True,
                embedding_model: str | None = None,
                chunking: ChunkingSettings | None = None) -> Corpus:
    """The corpus ``name``; created (with the given or default model) when missing."""
    info = lookup_corpus(db, name)
    if info is None:
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
        info = lookup_corpus(db, name)
        assert info is not None
    if embedding_model and embedding_model != info.embedding_model:
        raise EmbeddingMismatch(
            f"corpus {name!r} was built with {info.embedding_model!r}, not {embedding_model!r}; "
            "use another corpus name for another model")
    return Corpus(db, info, settings)
