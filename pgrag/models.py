"""SQLAlchemy ORM mirrors of every pgrag table.

The migrations own the schema (``migrations/sql``); these classes mirror it and a
test (tests/migration) fails if they drift. Applications may insert ``Document``
rows in their own session and then call ``Corpus.index()`` to process them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pgvector.sqlalchemy import Vector
from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Computed,
    DateTime,
    ForeignKey,
    ForeignKeyConstraint,
    Identity,
    Index,
    Integer,
    MetaData,
    Text,
    UniqueConstraint,
    func,
)
from sqlalchemy import (
    text as sa_text,
)
from sqlalchemy.dialects.postgresql import ARRAY, DOUBLE_PRECISION, JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    metadata = MetaData(schema="pgrag")


class Corpus(Base):
    __tablename__ = "corpus"
    __table_args__ = (CheckConstraint("chunk_overlap < chunk_sentences"),
                      CheckConstraint("families <@ ARRAY['threadrag']::text[]", name="corpus_families_known"))

    corpus_id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    name: Mapped[str] = mapped_column(Text, unique=True)
    embedding_model: Mapped[str] = mapped_column(Text)
    embedding_dim: Mapped[int] = mapped_column(Integer)
    chunk_sentences: Mapped[int] = mapped_column(Integer, server_default=sa_text("6"))
    chunk_overlap: Mapped[int] = mapped_column(Integer, server_default=sa_text("2"))
    edge_window: Mapped[int] = mapped_column(Integer, server_default=sa_text("4"))
    settings: Mapped[dict[str, Any]] = mapped_column(JSONB, server_default=sa_text("'{}'::jsonb"))
    # Method families maintained at ingest (pgrag.families): 'threadrag' = semantic nodes.
    families: Mapped[list[str]] = mapped_column(ARRAY(Text), server_default=sa_text("'{}'::text[]"))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class Document(Base):
    __tablename__ = "document"
    __table_args__ = (
        UniqueConstraint("corpus_id", "external_id"),
        Index(
            "document_pending_idx", "corpus_id",
            postgresql_where=sa_text("indexed_hash IS DISTINCT FROM content_hash"),
        ),
        # metadata filters (pgrag.filters): the expression their path predicates run over
        Index("document_filter_idx", sa_text("pgrag_internal.filterable(metadata, external_id) jsonb_path_ops"),
              postgresql_using="gin"),
    )

    corpus_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("pgrag.corpus.corpus_id", ondelete="CASCADE"), primary_key=True)
    document_id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    external_id: Mapped[str] = mapped_column(Text)
    title: Mapped[str] = mapped_column(Text, server_default=sa_text("''"))
    body: Mapped[str] = mapped_column(Text)
    metadata_: Mapped[dict[str, Any]] = mapped_column(
        "metadata", JSONB, server_default=sa_text("'{}'::jsonb"))
    content_hash: Mapped[str | None] = mapped_column(
        Text, Computed("md5(title || E'\\n' || body)", persisted=True))
    indexed_hash: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class Sentence(Base):
    __tablename__ = "sentence"
    __table_args__ = (
        ForeignKeyConstraint(
            ["corpus_id", "document_id"], ["pgrag.document.corpus_id", "pgrag.document.document_id"],
            ondelete="CASCADE"),
    )

    corpus_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    document_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    ordinal: Mapped[int] = mapped_column(Integer, primary_key=True)
    text: Mapped[str] = mapped_column(Text)
    char_start: Mapped[int] = mapped_column(Integer)
    char_end: Mapped[int] = mapped_column(Integer)


class Chunk(Base):
    __tablename__ = "chunk"
    __table_args__ = (
        UniqueConstraint("corpus_id", "document_id", "ordinal"),
        ForeignKeyConstraint(
            ["corpus_id", "document_id"], ["pgrag.document.corpus_id", "pgrag.document.document_id"],
            ondelete="CASCADE"),
        # BM25 in SQL reads the lengths from here, not from the wide rows (migration 0014)
        Index("chunk_length_idx", "corpus_id", "chunk_id", postgresql_include=["n_tokens"]),
    )

    corpus_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    chunk_id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    document_id: Mapped[int] = mapped_column(BigInteger)
    ordinal: Mapped[int] = mapped_column(Integer)
    first_sentence: Mapped[int] = mapped_column(Integer)
    last_sentence: Mapped[int] = mapped_column(Integer)
    char_start: Mapped[int] = mapped_column(Integer)
    char_end: Mapped[int] = mapped_column(Integer)
    text: Mapped[str] = mapped_column(Text)
    n_tokens: Mapped[int] = mapped_column(Integer, server_default=sa_text("0"))
    embedding: Mapped[Any] = mapped_column(Vector())


class Token(Base):
    __tablename__ = "token"
    __table_args__ = (UniqueConstraint("corpus_id", "term"),)

    corpus_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("pgrag.corpus.corpus_id", ondelete="CASCADE"), primary_key=True)
    token_id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    term: Mapped[str] = mapped_column(Text)
    df: Mapped[int] = mapped_column(Integer)


class ChunkToken(Base):
    __tablename__ = "chunk_token"
    __table_args__ = (
        ForeignKeyConstraint(
            ["corpus_id", "chunk_id"], ["pgrag.chunk.corpus_id", "pgrag.chunk.chunk_id"],
            ondelete="CASCADE"),
        ForeignKeyConstraint(
            ["corpus_id", "token_id"], ["pgrag.token.corpus_id", "pgrag.token.token_id"]),
        Index("chunk_token_chunk_idx", "corpus_id", "chunk_id"),
    )

    corpus_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    token_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    chunk_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    tf: Mapped[int] = mapped_column(Integer)
    positions: Mapped[list[int]] = mapped_column(ARRAY(Integer))


class TokenEdge(Base):
    __tablename__ = "token_edge"
    __table_args__ = (
        ForeignKeyConstraint(
            ["corpus_id", "token_a"], ["pgrag.token.corpus_id", "pgrag.token.token_id"]),
        ForeignKeyConstraint(
            ["corpus_id", "token_b"], ["pgrag.token.corpus_id", "pgrag.token.token_id"]),
        Index("token_edge_b_idx", "corpus_id", "token_b"),
    )

    corpus_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    token_a: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    token_b: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    weight: Mapped[int] = mapped_column(BigInteger)


class ChunkEntity(Base):
    __tablename__ = "chunk_entity"
    __table_args__ = (
        ForeignKeyConstraint(
            ["corpus_id", "chunk_id"], ["pgrag.chunk.corpus_id", "pgrag.chunk.chunk_id"],
            ondelete="CASCADE"),
        Index("chunk_entity_entity_idx", "corpus_id", sa_text("lower(entity)")),
    )

    corpus_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    chunk_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    entity: Mapped[str] = mapped_column(Text)
    label: Mapped[str] = mapped_column(Text, primary_key=True)
    char_start: Mapped[int] = mapped_column(Integer, primary_key=True)
    char_end: Mapped[int] = mapped_column(Integer, primary_key=True)


class GraphVersion(Base):
    __tablename__ = "graph_version"

    corpus_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("pgrag.corpus.corpus_id", ondelete="CASCADE"), primary_key=True)
    version: Mapped[int] = mapped_column(BigInteger, server_default=sa_text("0"))
    # pgrag.chunk_removal holds every removal after this version (migration 0008)
    logged_from: Mapped[int] = mapped_column(BigInteger, server_default=sa_text("0"))


class ChunkRemoval(Base):
    """A removed chunk, its tokens and its edge counts, for the caches' deltas (migrations 0008, 0009)."""

    __tablename__ = "chunk_removal"
    __table_args__ = (Index("chunk_removal_version", "corpus_id", "version"),)

    corpus_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("pgrag.corpus.corpus_id", ondelete="CASCADE"), primary_key=True)
    chunk_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    version: Mapped[int] = mapped_column(BigInteger)
    tokens: Mapped[list[int]] = mapped_column(ARRAY(BigInteger))
    # its own window-pair counts (token_a < token_b), subtracted by the delta (migration 0009)
    edge_a: Mapped[list[int]] = mapped_column(ARRAY(BigInteger), server_default=sa_text("'{}'"))
    edge_b: Mapped[list[int]] = mapped_column(ARRAY(BigInteger), server_default=sa_text("'{}'"))
    edge_w: Mapped[list[int]] = mapped_column(ARRAY(BigInteger), server_default=sa_text("'{}'"))


class LlmCache(Base):
    __tablename__ = "llm_cache"

    corpus_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("pgrag.corpus.corpus_id", ondelete="CASCADE"), primary_key=True)
    key: Mapped[str] = mapped_column(Text, primary_key=True)
    model: Mapped[str] = mapped_column(Text)
    request: Mapped[dict[str, Any]] = mapped_column(JSONB)
    response: Mapped[str] = mapped_column(Text)
    finish_reason: Mapped[str | None] = mapped_column(Text)
    prompt_tokens: Mapped[int] = mapped_column(Integer, server_default=sa_text("0"))
    completion_tokens: Mapped[int] = mapped_column(Integer, server_default=sa_text("0"))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class Triple(Base):
    """A (subject, predicate, object) triple and its proposition embedding."""

    __tablename__ = "triple"
    __table_args__ = (
        UniqueConstraint("corpus_id", "chunk_id", "extractor", "ordinal"),
        ForeignKeyConstraint(
            ["corpus_id", "chunk_id"], ["pgrag.chunk.corpus_id", "pgrag.chunk.chunk_id"],
            ondelete="CASCADE"),
        CheckConstraint("0 <= char_start AND char_start <= char_end"),
    )

    corpus_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    triple_id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    chunk_id: Mapped[int] = mapped_column(BigInteger)
    extractor: Mapped[str] = mapped_column(Text)
    ordinal: Mapped[int] = mapped_column(Integer)
    subject: Mapped[str] = mapped_column(Text)
    predicate: Mapped[str] = mapped_column(Text)
    object: Mapped[str] = mapped_column(Text)
    proposition: Mapped[str] = mapped_column(Text)
    char_start: Mapped[int] = mapped_column(Integer)
    char_end: Mapped[int] = mapped_column(Integer)
    embedding: Mapped[Any] = mapped_column(Vector())


class ChunkExtraction(Base):
    __tablename__ = "chunk_extraction"
    __table_args__ = (
        ForeignKeyConstraint(
            ["corpus_id", "chunk_id"], ["pgrag.chunk.corpus_id", "pgrag.chunk.chunk_id"],
            ondelete="CASCADE"),
    )

    corpus_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    chunk_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    extractor: Mapped[str] = mapped_column(Text, primary_key=True)
    triples: Mapped[int] = mapped_column(Integer)
    failed: Mapped[bool] = mapped_column(Boolean, server_default=sa_text("false"))


class SemanticNode(Base):
    """A ThreadRAG semantic node: consecutive sentences of one document, with
    offsets into its body (``body[char_start:char_end] == text``)."""

    __tablename__ = "semantic_node"
    __table_args__ = (
        UniqueConstraint("corpus_id", "document_id", "ordinal"),
        ForeignKeyConstraint(
            ["corpus_id", "document_id"], ["pgrag.document.corpus_id", "pgrag.document.document_id"],
            ondelete="CASCADE"),
        ForeignKeyConstraint(
            ["corpus_id", "document_id", "first_sentence"],
            ["pgrag.sentence.corpus_id", "pgrag.sentence.document_id", "pgrag.sentence.ordinal"],
            ondelete="CASCADE"),
        CheckConstraint("first_sentence <= last_sentence AND 0 <= char_start AND char_start <= char_end"),
    )

    corpus_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    node_id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    document_id: Mapped[int] = mapped_column(BigInteger)
    ordinal: Mapped[int] = mapped_column(Integer)
    first_sentence: Mapped[int] = mapped_column(Integer)
    last_sentence: Mapped[int] = mapped_column(Integer)
    char_start: Mapped[int] = mapped_column(Integer)
    char_end: Mapped[int] = mapped_column(Integer)
    text: Mapped[str] = mapped_column(Text)
    embedding: Mapped[Any] = mapped_column(Vector())
    # pgrag.tokenize(text), written with the node (migration 0011); NULL for older nodes
    terms: Mapped[list[str] | None] = mapped_column(ARRAY(Text), nullable=True)


class EntityVector(Base):
    """The vector of a name one document mentions (ThreadRAG; migration 0010),
    keyed by ``pgrag.nlp.name_key``; it cascades with the sentence of the first mention."""

    __tablename__ = "entity_vector"
    __table_args__ = (
        ForeignKeyConstraint(
            ["corpus_id", "document_id", "sentence"],
            ["pgrag.sentence.corpus_id", "pgrag.sentence.document_id", "pgrag.sentence.ordinal"],
            ondelete="CASCADE"),
        CheckConstraint("key <> ''"),
        Index("entity_vector_key_idx", "corpus_id", "key", "document_id"),
    )

    corpus_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    document_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    key: Mapped[str] = mapped_column(Text, primary_key=True)
    sentence: Mapped[int] = mapped_column(Integer)
    embedding: Mapped[Any] = mapped_column(Vector())


class SemanticEdge(Base):
    """An undirected edge between two semantic nodes (node_a < node_b)."""

    __tablename__ = "semantic_edge"
    __table_args__ = (
        ForeignKeyConstraint(
            ["corpus_id", "node_a"], ["pgrag.semantic_node.corpus_id", "pgrag.semantic_node.node_id"],
            ondelete="CASCADE"),
        ForeignKeyConstraint(
            ["corpus_id", "node_b"], ["pgrag.semantic_node.corpus_id", "pgrag.semantic_node.node_id"],
            ondelete="CASCADE"),
        CheckConstraint("kind IN ('narrative', 'semantic', 'lexical')"),
        CheckConstraint("weight > 0"),
        CheckConstraint("node_a < node_b"),
        Index("semantic_edge_b_idx", "corpus_id", "node_b"),
    )

    corpus_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    node_a: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    node_b: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    kind: Mapped[str] = mapped_column(Text, primary_key=True)
    weight: Mapped[float] = mapped_column(DOUBLE_PRECISION)


class CorpusAcl(Base):
    """Which roles see a corpus once tenant isolation is on (row-level security)."""

    __tablename__ = "corpus_acl"

    corpus_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("pgrag.corpus.corpus_id", ondelete="CASCADE"), primary_key=True)
    role_name: Mapped[str] = mapped_column(Text, primary_key=True)


class Follow(Base):
    """A corpus that follows an application table (``pgrag.attach``)."""

    __tablename__ = "follow"
    __table_args__ = (
        CheckConstraint("triples IN ('spacy', 'llm')"),
        CheckConstraint("max_attempts >= 1"),
        CheckConstraint("retry_seconds >= 0"),
    )

    corpus_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("pgrag.corpus.corpus_id", ondelete="CASCADE"), primary_key=True)
    source_schema: Mapped[str] = mapped_column(Text)
    source_table: Mapped[str] = mapped_column(Text)
    id_column: Mapped[str] = mapped_column(Text)
    text_column: Mapped[str] = mapped_column(Text)
    title_column: Mapped[str | None] = mapped_column(Text, nullable=True)
    metadata_columns: Mapped[list[str]] = mapped_column(ARRAY(Text), server_default=sa_text("'{}'::text[]"))
    triples: Mapped[str | None] = mapped_column(Text, nullable=True)
    max_attempts: Mapped[int] = mapped_column(Integer, server_default=sa_text("5"))
    retry_seconds: Mapped[float] = mapped_column(DOUBLE_PRECISION, server_default=sa_text("10"))
    attached_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    last_processed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class FollowQueueItem(Base):
    """A changed row of a followed table, waiting for a worker (written by the trigger)."""

    __tablename__ = "follow_queue"
    __table_args__ = (
        CheckConstraint("op IN ('insert', 'update', 'delete')"),
        Index("follow_queue_key_idx", "corpus_id", "source_key"),
        Index("follow_queue_parked_idx", "corpus_id", postgresql_where=sa_text("parked_at IS NOT NULL")),
    )

    corpus_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)   # no foreign key: see the migration
    item_id: Mapped[int] = mapped_column(
        BigInteger, primary_key=True, server_default=sa_text("nextval('pgrag.follow_queue_item_id_seq'::regclass)"))
    source_key: Mapped[str] = mapped_column(Text)
    op: Mapped[str] = mapped_column(Text)
    enqueued_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    attempts: Mapped[int] = mapped_column(Integer, server_default=sa_text("0"))
    run_after: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    parked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
