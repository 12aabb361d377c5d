"""The model runtime's vector cache during a benchmark (model_queue.VectorCache).

A benchmark times the model: the same question asked by several methods in
turn, through Python then SQL, or again by the next round of clients, would
otherwise cost only the first asker its encoding. So the timing commands empty
and switch off the cache of every runtime they reach for their run, and set it
back after; ``keep`` leaves it on, to measure what it saves.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from ... import model_client
from ...exceptions import PgragError


def _targets(dsn: str, settings: Sequence[str | None]) -> set[model_client.Endpoint]:
    """pgrag's runtimes that this process, the server's backends, and the
    ``settings`` (pgrag.model_runtime values) use."""
    import psycopg

    from .capacity import model_runtime

    with psycopg.connect(dsn, autocommit=True) as conn:
        served = model_runtime(conn).get("runtime")
    found = [model_client.endpoint(), *(model_client.endpoint(s) for s in [served, *settings] if s)]
    return {t for t in found if t is not None and t.serves_nlp}


@contextlib.contextmanager
def runtime_cache(dsn: str, keep: bool, settings: Sequence[str | None] = ()) -> Iterator[dict[str, Any]]:
    """The block with the runtimes' vector caches off (``keep``: as they are);
    yields what to record: ``{"runtime_cache": "off"}`` or ``"kept"``."""
    if keep:
        yield {"runtime_cache": "kept"}
        return
    before, missed = {}, []
    for target in _targets(dsn, settings):
        try:
            before[target] = model_client.resize_cache(target, 0)
        except PgragError:   # down, or a runtime without a cache: nothing to switch off there
            missed.append(target.describe())
    try:
        yield {"runtime_cache": "off"} if not missed else {"runtime_cache": "off", "runtime_cache_not_switched": missed}
    finally:
        for target, cache in before.items():
            if "size" in cache:
                model_client.resize_cache(target, int(cache["size"]))
