"""One exception tree for the public API: catch ``PgragError`` for all of them.

Each class's docstring is its default message. ``sqlstate`` is the SQLSTATE the
same error carries when it is raised inside PostgreSQL (the in-server runtime),
so a SQL caller can tell them apart and the Python client maps them back.
"""

from __future__ import annotations


class PgragError(Exception):
    """pgrag failed."""

    sqlstate = "PR000"

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


class ConfigError(PgragError):
    """A setting is missing or invalid."""


class ConnectionFailed(PgragError):
    """Could not connect to PostgreSQL."""


class QueryCanceled(PgragError):
    """PostgreSQL cancelled the statement (a timeout or pg_cancel_backend); nothing of its transaction was kept."""


class ServerError(PgragError):
    """The embedded PostgreSQL server could not be started or stopped."""


class ExtensionMissing(PgragError):
    """The pgvector extension ('vector') is not available in this PostgreSQL installation."""


class UnsupportedServer(PgragError):
    """This PostgreSQL server is too old or misconfigured for pgrag."""


class CorpusNotFound(PgragError):
    """No corpus with that name exists."""

    sqlstate = "PR001"


class EmbeddingMismatch(PgragError):
    """The embedding model does not match the corpus's embedding dimension."""

    sqlstate = "PR002"


class InputError(PgragError):
    """The input (documents, a question, a call's arguments) is invalid; nothing was written."""

    sqlstate = "PR005"


class OptionError(InputError):
    """A method option the method does not take, or a value it cannot take; nothing ran."""

    sqlstate = "PR008"


class UnknownMethod(PgragError):
    """No retrieval method by that name."""

    sqlstate = "PR004"


class MethodNotBuilt(PgragError):
    """The corpus does not maintain the data this method needs; the message names the command that builds it."""

    sqlstate = "PR007"


class RuntimeMissing(PgragError):
    """This PostgreSQL server has no PL/Python (plpython3u): call pgrag from Python with pgrag.connect(dsn)."""

    sqlstate = "PR003"


class ModelRuntimeUnavailable(PgragError):
    """The model runtime could not be reached, or failed mid-call; start it with `pgrag server start` or `pgrag models serve`."""  # noqa: E501 (the message: one line)

    sqlstate = "PR011"


class AnswerFailed(PgragError):
    """The LLM could not produce the answer (unreachable endpoint, refused key, malformed replies)."""

    sqlstate = "PR010"


def by_sqlstate(state: str | None) -> type[PgragError] | None:
    """The exception class for a pgrag SQLSTATE (``PRnnn``), if it is one."""
    for cls in (PgragError, CorpusNotFound, EmbeddingMismatch, InputError, UnknownMethod, RuntimeMissing,
                AnswerFailed, AttachError, MethodNotBuilt, ModelRuntimeUnavailable, OptionError):
        if cls.sqlstate == state:
            return cls
    return None


class SchemaOutdated(PgragError):
    """The database schema is behind this pgrag version; run `pgrag db upgrade` as the schema owner."""


class AttachError(PgragError):
    """A corpus cannot follow that table (pgrag.attach / pgrag.detach); nothing was changed."""

    sqlstate = "PR006"


class RuntimeNotice(UserWarning):
    """The database has no in-server runtime (PL/Python): SQL's pgrag.retrieve and
    its kin raise PR003, and every method runs in the client process instead."""


# An error message repeats at most this many characters of a caller's value, so
# that a 10 MB key or option does not come back as a 10 MB message.
ECHOED = 60


def quoted(text: str) -> str:
    """``text`` as a message quotes it (Python's repr), cut to ``ECHOED`` characters."""
    return repr(text if len(text) <= ECHOED else text[:ECHOED - 1] + "…")


def echoed(value: object) -> str:
    """A caller's value as a message repeats it, in JSON's words (true, null,
    "text"), at most about ``ECHOED`` characters: a list or an object by its kind."""
    if value is None or isinstance(value, bool):
        return "true" if value is True else "false" if value is False else "null"
    if isinstance(value, int):
        return str(value) if value.bit_length() < 160 else "an integer of over 48 digits"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        import json

        return json.dumps(value if len(value) <= ECHOED else value[:ECHOED - 1] + "…", ensure_ascii=False)[:ECHOED * 2]
    kinds: dict[type, str] = {dict: "an object", list: "a list", tuple: "a list"}
    return kinds.get(type(value), type(value).__name__)
