"""An OpenAI-compatible chat client with a database cache, retries, usage
accounting and defensive parsing of structured replies.

Any endpoint that speaks the OpenAI chat-completions protocol works: OpenAI,
vLLM, llama.cpp's server, Ollama. Every request is cached in ``pgrag.llm_cache``
(per corpus) under a hash of (model, messages, parameters), so a re-run costs
nothing. Transport failures (timeouts, 429, 5xx) are retried with exponential
backoff by the openai client; what still fails becomes a ``PgragError`` with a
message naming the endpoint. A structured reply that does not parse gets one
repair request, then a typed ``LLMReplyError`` that callers handle.

Constrained decoding: a structured prompt declares the JSON schema of its reply
(pgrag.prompts.SCHEMAS), and ``structured`` sends it as the request's
``response_format`` in the form ``LLMSettings.constrain`` names, so that an
endpoint that constrains decoding (llama.cpp's grammar, OpenAI's structured
outputs) can only produce a reply of that shape. The schema is part of the
request, hence of the cache key. An endpoint that refuses ``response_format``
(HTTP 400 or 422) gets the same request without it, once: the client then stops
sending it, and the trace of the run that met the refusal says so.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from . import prompts
from .exceptions import ConfigError, PgragError
from .queries import query

if TYPE_CHECKING:
    from .context import QueryRunner

T = TypeVar("T")
Message = dict[str, str]

CONSTRAIN_MODES = ("off", "json_object", "json_schema")
# What an endpoint answers to a response_format it does not take: 400 (OpenAI,
# vLLM, llama.cpp's server on a schema it cannot compile), 422 (a server that
# validates the body, e.g. llama-cpp-python on the json_schema form).
_REFUSED = (400, 422)


class LLMError(PgragError):
    """The endpoint refused or failed the request (unknown model, bad key, ...)."""

    status: int | None = None       # the HTTP status of an error reply, when there was one


class LLMUnavailable(LLMError):
    """The endpoint cannot be reached (after retries)."""


class LLMReplyError(LLMError):
    """A structured reply stayed unusable after one repair attempt."""

    def __init__(self, message: str, reply: str) -> None:
        super().__init__(message)
        self.reply = reply


@dataclass(frozen=True, kw_only=True)
class LLMSettings:
    """Where and how to call the LLM. ``from_env`` reads PGRAG_LLM_BASE_URL,
    PGRAG_LLM_MODEL and PGRAG_LLM_API_KEY (else OPENAI_API_KEY), and
    PGRAG_LLM_CONSTRAIN (``constrain``)."""

    base_url: str | None = None
    model: str | None = None
    api_key: str | None = None
    temperature: float = 0.0
    timeout: float = 60.0
    max_retries: int = 3
    max_tokens: int = 512
    # How structured prompts send their reply's JSON schema (response_format):
    # "json_object" ({"type": "json_object", "schema": ...}: llama.cpp's servers,
    # the C++ one and llama-cpp-python's, which pgrag runs locally, turn it into a
    # grammar; the latter accepts no other form), "json_schema" (OpenAI's
    # structured outputs, {"type": "json_schema", "json_schema": {...}}: OpenAI,
    # vLLM, Ollama, llama.cpp's C++ server) or "off" (no response_format).
    constrain: str = "json_object"

    def __post_init__(self) -> None:
        if self.constrain not in CONSTRAIN_MODES:
            raise ConfigError(f"unknown LLM constrain mode {self.constrain!r} "
                              f"(PGRAG_LLM_CONSTRAIN: one of {', '.join(CONSTRAIN_MODES)})")

    @classmethod
    def from_env(cls, **overrides: Any) -> "LLMSettings":
        from .config import llm_environment

        env = {k: v for k, v in llm_environment().items() if v is not None or k != "constrain"}
        return cls(**{**env, **{k: v for k, v in overrides.items() if v is not None}})

    @property
    def configured(self) -> bool:
        return bool(self.model and (self.base_url or self.api_key))


@dataclass(kw_only=True)
class Usage:
    """What a run of LLM calls cost. Cached replies count their tokens too (the
    method's cost does not depend on the cache) and are also counted apart."""

    calls: int = 0
    cached: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    repairs: int = 0
    failures: int = 0
    # Structured replies: how many were checked (first replies and repairs), how
    # many of those did not parse into the expected shape, how many were asked
    # with their schema as response_format, and how many requests fell back to
    # no response_format because the endpoint refused it.
    replies: int = 0
    parse_failures: int = 0
    constrained: int = 0
    unconstrained: int = 0

    def add(self, other: "Usage") -> None:
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def since(self, before: "Usage") -> "Usage":
        """What was spent after ``before`` (a copy taken with ``dataclasses.replace``)."""
        return Usage(**{f.name: getattr(self, f.name) - getattr(before, f.name) for f in dataclasses.fields(self)})


@dataclass(frozen=True, kw_only=True)
class Reply:
    text: str
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    cached: bool


@dataclass
class LLM:
    """A chat client bound to one corpus's cache."""

    db: "QueryRunner"
    corpus_id: int
    settings: LLMSettings
    usage: Usage = field(default_factory=Usage)
    # Why the endpoint's replies are no longer constrained (its refusal), once it refused.
    constraint_refused: str | None = None

    def __post_init__(self) -> None:
        if not self.settings.model:
            raise ConfigError("no LLM model configured (set PGRAG_LLM_MODEL, or pass --llm-model)")
        if not (self.settings.base_url or self.settings.api_key):
            raise ConfigError("no LLM endpoint configured (set PGRAG_LLM_BASE_URL, or an API key for OpenAI)")
        import openai

        self._client = openai.OpenAI(
            base_url=self.settings.base_url, api_key=self.settings.api_key or "not-needed",
            timeout=self.settings.timeout, max_retries=self.settings.max_retries)

    def close(self) -> None:
        """Close the HTTP connections the client keeps for reuse."""
        client = self.__dict__.pop("_client", None)
        if client is not None:
            client.close()

    def __enter__(self) -> "LLM":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        # An LLM is a light handle that callers pass around and drop; dropping
        # it releases its pooled connections rather than leaving their sockets
        # to the collector (and its ResourceWarning).
        self.close()

    @property
    def model(self) -> str:
        assert self.settings.model
        return self.settings.model

    def chat(self, messages: Sequence[Message], **params: Any) -> Reply:
        """One chat completion, from the cache when this exact request was made before."""
        params = {"temperature": self.settings.temperature, "max_tokens": self.settings.max_tokens, **params}
        if self.constraint_refused is not None:
            params.pop("response_format", None)
        request = {"model": self.model, "messages": list(messages), "params": params}
        key = hashlib.sha256(json.dumps(request, sort_keys=True, ensure_ascii=False).encode()).hexdigest()
        row = self.db.fetchone("llm_cache_get", {"corpus_id": self.corpus_id, "key": key})
        if row is not None:
            reply = Reply(text=row[0], finish_reason=row[1], prompt_tokens=row[2], completion_tokens=row[3],
                          cached=True)
            self.usage.cached += 1
        else:
            try:
                reply = self._call(list(messages), params)
            except LLMError as exc:
                if "response_format" not in params or exc.status not in _REFUSED:
                    raise
                # The endpoint does not take response_format (or not this one):
                # the same request without it, and none from here on once that works.
                reply = self.chat(messages, **{k: v for k, v in params.items() if k != "response_format"})
                self.constraint_refused = str(exc)
                self.usage.unconstrained += 1
                return reply
            if self._writable():
                self._cache(key, request, reply)
        self.usage.calls += 1
        self.usage.constrained += "response_format" in params
        self.usage.prompt_tokens += reply.prompt_tokens
        self.usage.completion_tokens += reply.completion_tokens
        return reply

    def _writable(self) -> bool:
        """False in a read-only transaction or on a hot standby (inside the server):
        the loops then run without writing the cache."""
        return self.db.fetch_row("transaction_read_only")[0] is not True

    def _cache(self, key: str, request: dict[str, Any], reply: Reply) -> None:
        from psycopg.types.json import Jsonb  # here, not at import: a server backend's query path has no psycopg

        with self.db.transaction() as conn:
            conn.execute(query("llm_cache_put"), {
                "corpus_id": self.corpus_id, "key": key, "model": self.model, "request": Jsonb(request),
                "response": reply.text, "finish_reason": reply.finish_reason,
                "prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens})

    def _call(self, messages: list[Message], params: dict[str, Any]) -> Reply:
        import openai

        where = self.settings.base_url or "the OpenAI API"
        try:
            response = self.db.wait(lambda: self._client.chat.completions.create(
                model=self.model, messages=messages, **params))  # type: ignore[arg-type]
        except (openai.APIConnectionError, openai.APITimeoutError) as exc:
            raise LLMUnavailable(f"cannot reach the LLM endpoint {where} ({type(exc).__name__}: {exc})") from exc
        except openai.NotFoundError as exc:
            raise LLMError(f"model {self.model!r} is not served by {where} ({exc})") from exc
        except openai.AuthenticationError as exc:
            raise LLMError(f"the LLM endpoint {where} refused the API key ({exc})") from exc
        except openai.APIStatusError as exc:
            error = LLMError(f"the LLM endpoint {where} answered HTTP {exc.status_code}: {exc}")
            error.status = exc.status_code
            raise error from exc
        except openai.OpenAIError as exc:
            raise LLMError(f"LLM request to {where} failed: {exc}") from exc
        choice = response.choices[0] if response.choices else None
        usage = response.usage
        return Reply(
            text=(choice.message.content or "") if choice else "",
            finish_reason=choice.finish_reason if choice else None,
            prompt_tokens=usage.prompt_tokens if usage else 0,
            completion_tokens=usage.completion_tokens if usage else 0,
            cached=False)

    def structured(self, messages: Sequence[Message], validate: Callable[[Any], T],
                   schema: "prompts.ReplySchema | None" = None, **params: Any) -> T:
        """A JSON reply checked by ``validate`` (which raises ``ValueError`` on a
        wrong shape). With ``schema`` (the prompt's reply schema) the request asks
        the endpoint to constrain its reply to it (``LLMSettings.constrain``).
        Malformed output gets one repair request; if that fails too,
        ``LLMReplyError`` (counted in ``usage.failures``). Every reply checked
        counts in ``usage.replies``, every one that did not parse in
        ``usage.parse_failures``."""
        form = response_format(self.settings.constrain, schema)
        if form is not None and self.constraint_refused is None:
            params = {**params, "response_format": form}
        reply = self.chat(messages, **params)
        try:
            return self._checked(reply.text, validate)
        except ValueError as first:
            self.usage.repairs += 1
            repair = [*messages, {"role": "assistant", "content": reply.text},
                      {"role": "user", "content": prompts.REPAIR.format(error=first)}]
            again = self.chat(repair, **params)
            try:
                return self._checked(again.text, validate)
            except ValueError as second:
                self.usage.failures += 1
                raise LLMReplyError(f"unusable LLM reply after a repair attempt: {second}", again.text) from second

    def _checked(self, text: str, validate: Callable[[Any], T]) -> T:
        self.usage.replies += 1
        try:
            return validate(parse_json(text))
        except ValueError:
            self.usage.parse_failures += 1
            raise


def response_format(mode: str, schema: "prompts.ReplySchema | None") -> dict[str, Any] | None:
    """The ``response_format`` that asks for a reply of ``schema`` in the form
    ``mode`` names (LLMSettings.constrain); None for "off" or no schema."""
    if schema is None or mode == "off":
        return None
    if mode == "json_object":
        return {"type": "json_object", "schema": schema.schema}
    return {"type": "json_schema", "json_schema": {"name": schema.name, "schema": schema.schema,
                                                   "strict": strict(schema.schema)}}


def strict(schema: Any) -> bool:
    """Whether OpenAI's strict mode takes ``schema``: every object lists all its
    properties as required and allows no others (a map of any names does not)."""
    if isinstance(schema, dict):
        if schema.get("type") == "object" and (
                schema.get("additionalProperties") is not False
                or set(schema.get("required", ())) != set(schema.get("properties", {}))):
            return False
        return all(strict(v) for v in schema.values())
    if isinstance(schema, list):
        return all(strict(v) for v in schema)
    return True


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


def parse_json(text: str) -> Any:
    """The first JSON value in a reply, tolerating code fences and chatter around
    it. ``ValueError`` when there is none (empty, truncated, not JSON)."""
    if not text or not text.strip():
        raise ValueError("empty reply")
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    # strict=False: a raw line break or tab inside a string is taken as it is.
    # llama-cpp-python's JSON-schema grammar lets a model write them there.
    decoder = json.JSONDecoder(strict=False)
    for candidate in candidates:
        for start in (i for i, ch in enumerate(candidate) if ch in "{["):
            try:
                value, _ = decoder.raw_decode(candidate[start:])
                return value
            except json.JSONDecodeError:
                continue
    raise ValueError(f"no JSON value in the reply (starts {text.strip()[:80]!r})")


_ANSWER_MARK = re.compile(r"answer\s*[:：]", re.IGNORECASE)


def short_answer(text: str) -> str | None:
    """The answer in a short-answer reply: the text after the last "Answer:" when
    there is one, its first non-empty line, without quotes, asterisks or a final
    period. None when nothing is left."""
    marks = list(_ANSWER_MARK.finditer(text))
    if marks:
        text = text[marks[-1].end():]
    for line in text.splitlines():
        line = line.strip()
        if line.endswith(".") and not line.endswith(".."):
            line = line[:-1]
        line = line.strip().strip("\"'`*").strip()
        if line:
            return line
    return None
