"""The embedded server with its model runtime: what every path that starts the
embedded PostgreSQL calls (``pgrag.connect()`` without a DSN, the CLI, the test
session), so that its backends embed through one runtime instead of loading
torch each (README, "One model runtime for the machine").

The runtime lives as long as the server (pgrag.server): it keeps running after
the process that started it exits, a runtime already answering is reused, and
``stop`` ends both. An existing PostgreSQL (a DSN) starts nothing here; it gets
its runtime from ``pgrag models serve``.
"""

from __future__ import annotations

from pathlib import Path

from . import config, model_service, server
from .exceptions import ServerError


def start(data_dir: Path, *, models: bool | None = None, embedding_model: str = config.DEFAULT_EMBEDDING_MODEL) -> str:
    """Start (or reuse) the embedded server in ``data_dir`` and, unless ``models``
    is False (default: ``PGRAG_START_MODELS``, else yes), the supervised model
    runtime beside it (``pgrag models serve``), waiting until it answers; return
    the server's URI."""
    uri = server.start(data_dir)
    if config.start_models() if models is None else models:
        try:
            model_service.start_detached(data_dir, embedding_model)
        except ServerError as exc:
            raise ServerError(f"{exc}\nPGRAG_START_MODELS=0 (or pgrag.connect(models=False)) starts the server "
                              "without it; backends then load their models in process") from exc
    return uri


def stop(data_dir: Path) -> bool:
    """Stop the model runtime beside the server in ``data_dir``, then the server;
    False when the server was not running."""
    model_service.stop_detached(data_dir)
    return server.stop(data_dir)
