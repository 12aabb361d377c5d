"""One exception tree for the public API: catch ``PgragError`` for all of them.

Each class's docstring is its default message.
"""

from __future__ import annotations


class PgragError(Exception):
    """pgrag failed."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


class ConfigError(PgragError):
    """A setting is missing or invalid."""


class ConnectionFailed(PgragError):
    """Could not connect to PostgreSQL."""


class ServerError(PgragError):
    """The embedded PostgreSQL server could not be started or stopped."""


class ExtensionMissing(PgragError):
    """The pgvector extension ('vector') is not available in this PostgreSQL installation."""


class UnsupportedServer(PgragError):
    """This PostgreSQL server is too old or misconfigured for pgrag."""


class CorpusNotFound(PgragError):
    """No corpus with that name exists."""


class EmbeddingMismatch(PgragError):
    """The embedding model does not match the corpus's embedding dimension."""


class InputError(PgragError):
    """The input documents are invalid; nothing was written."""


class UnknownMethod(PgragError):
    """No retrieval method by that name."""


class SchemaOutdated(PgragError):
    """The database schema is behind this pgrag version; run `pgrag db upgrade` as the schema owner."""


class AttachError(PgragError):
    """A corpus cannot follow that table (pgrag.attach / pgrag.detach); nothing was changed."""
