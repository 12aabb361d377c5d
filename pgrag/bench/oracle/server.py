"""The oracle over HTTP: an OpenAI-compatible chat server on 127.0.0.1 that
``pgrag eval --oracle`` points the answering methods at."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...exceptions import PgragError
from ..chat_server import ChatServer, Status
from .gold import Gold
from .reader import Oracle


def model_name() -> str:
    """The oracle's model name: it changes with the oracle's files (this package's
    modules), so cached replies of an older oracle are never reused."""
    source = b"".join(p.read_bytes() for p in sorted(Path(__file__).parent.glob("*.py")))
    return "pgrag-oracle-" + hashlib.sha256(source).hexdigest()[:12]


class OracleServer(ChatServer):
    """The oracle over HTTP on 127.0.0.1, speaking the OpenAI chat-completions
    protocol (``pgrag.bench.chat_server``); use as a context manager."""

    def __init__(self, golds: Sequence[Gold], *, model: str | None = None) -> None:
        self.oracle = Oracle(golds)
        self.errors: list[str] = []
        # One model name per server: replies are never served from an earlier
        # run's cache, so the oracle's log sees every prompt (``forget`` drops them).
        super().__init__(self._reply, model=model or f"{model_name()}-{secrets.token_hex(4)}")

    def _reply(self, body: dict[str, Any]) -> str | Status:
        try:
            return self.oracle.answer(body.get("messages") or [])
        except PgragError as exc:
            self.errors.append(f"{type(exc).__name__}: {exc}")
            return Status(400, str(exc), "invalid_request_error")

    def settings(self) -> Any:
        from ...llm import LLMSettings

        return LLMSettings(base_url=self.base_url, model=self.model, api_key="oracle", max_retries=0)

    def forget(self, db: Any, corpus_id: int) -> None:
        """Delete this server's replies from a corpus's LLM cache."""
        from ...queries import query

        with db.transaction() as conn:
            conn.execute(query("llm_cache_forget_model"), {"corpus_id": corpus_id, "model": self.model})

    def __enter__(self) -> "OracleServer":
        super().__enter__()
        return self
