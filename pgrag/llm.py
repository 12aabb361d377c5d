"""An OpenAI-compatible chat client with a database cache, retries, usage
accounting and defensive parsing of structured replies.

Any endpoint that speaks the OpenAI chat-completions protocol works: OpenAI,
vLLM, llama.cpp's server, Ollama. Every request is cached in ``pgrag.llm_cache``
(per corpus) under a hash of (model, messages, parameters), so a re-run costs
nothing. Transport failures (timeouts, 429, 5xx) are retried with exponential
backoff by the openai client; what still fails becomes a ``PgragError`` with a
message naming the endpoint. A structured reply that does not parse gets one
repair request, then a typed ``LLMReplyError`` that callers handle.
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


class LLMError(PgragError):
    """The endpoint refused or failed the request (unknown model, bad key, ...)."""


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
    PGRAG_LLM_MODEL and PGRAG_LLM_API_KEY (else OPENAI_API_KEY)."""

    base_url: str | None = None
    model: str | None = None
    api_key: str | None = None
    temperature: float = 0.0
    timeout: float = 60.0
    max_retries: int = 3
    max_tokens: int = 512

    @classmethod
    def from_env(cls, **overrides: Any) -> "LLMSettings":
        from .config import llm_environment

        env = llm_environment()
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
        request = {"model": self.model, "messages": list(messages), "params": params}
        key = hashlib.sha256(json.dumps(request, sort_keys=True, ensure_ascii=False).encode()).hexdigest()
        row = self.db.fetchone("llm_cache_get", {"corpus_id": self.corpus_id, "key": key})
        if row is not None:
            reply = Reply(text=row[0], finish_reason=row[1], prompt_tokens=row[2], completion_tokens=row[3],
                          cached=True)
            self.usage.cached += 1
        else:
            reply = self._call(list(messages), params)
            if self._writable():
                self._cache(key, request, reply)
        self.usage.calls += 1
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
            raise LLMError(f"the LLM endpoint {where} answered HTTP {exc.status_code}: {exc}") from exc
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

    def structured(self, messages: Sequence[Message], validate: Callable[[Any], T], **params: Any) -> T:
        """A JSON reply checked by ``validate`` (which raises ``ValueError`` on a
        wrong shape). Malformed output gets one repair request; if that fails too,
        ``LLMReplyError`` (counted in ``usage.failures``)."""
        reply = self.chat(messages, **params)
        try:
            return validate(parse_json(reply.text))
        except ValueError as first:
            self.usage.repairs += 1
            repair = [*messages, {"role": "assistant", "content": reply.text},
                      {"role": "user", "content": prompts.REPAIR.format(error=first)}]
            again = self.chat(repair, **params)
            try:
                return validate(parse_json(again.text))
            except ValueError as second:
                self.usage.failures += 1
                raise LLMReplyError(f"unusable LLM reply after a repair attempt: {second}", again.text) from second


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


def parse_json(text: str) -> Any:
    """The first JSON value in a reply, tolerating code fences and chatter around
    it. ``ValueError`` when there is none (empty, truncated, not JSON)."""
    if not text or not text.strip():
        raise ValueError("empty reply")
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    decoder = json.JSONDecoder()
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
