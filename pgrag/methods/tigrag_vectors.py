"""TIGRAG's rerank vectors of a hop after the first (TigragSettings.hop_embedding,
hop_remainder): which texts a hop encodes, in one call begun before the hop's
graph stage (Context.encode_later), and how "sum" combines the vectors."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from ..results import Trace

if TYPE_CHECKING:
    from ..context import Context
    from .tigrag_settings import TigragSettings


def joined(pending: Callable[[], tuple[list[np.ndarray], list[np.ndarray]]], trace: Trace, hop: int, mode: str,
           extra_step: dict[str, object]) -> list[np.ndarray]:
    """A hop's rerank vectors, the mode's then the remaining part's, once encoded."""
    t0 = time.perf_counter()
    own, rest = pending()
    # the wait is within the "embed" stage; a step of its own keeps the stage timings disjoint
    trace.step("hop_embeddings", hop=hop, mode=mode, vectors=len(own) + len(rest),
               ms=round((time.perf_counter() - t0) * 1000, 3), **extra_step)
    return [*own, *rest]


def hop_embeddings(ctx: "Context", question: str, question_vector: np.ndarray, entities: list[str],
                   query: str, settings: "TigragSettings", trace: Trace,
                   extra: list[str] | None = None) -> Callable[[], tuple[list[np.ndarray], list[np.ndarray]]]:
    """The rerank vectors of a hop after the first (``settings.hop_embedding``),
    and the vectors of the ``extra`` texts, encoded in the same call: one round
    trip to the model runtime, not two. No ``entities``: no vectors of the mode.
    The encoding starts now; the returned function gives both lists."""
    extra = extra or []
    if not entities:
        own: list[str] = []
    elif settings.hop_embedding == "concat":
        own = [f"{question} {e}" for e in entities]
    else:
        own = [query] if settings.hop_embedding == "joint" else list(entities)
    pending = ctx.encode_later([*own, *extra], trace)
    if settings.hop_embedding != "sum" or not own:
        def split() -> tuple[list[np.ndarray], list[np.ndarray]]:
            encoded = pending()
            return encoded[: len(own)], encoded[len(own):]

        return split
    weight = settings.entity_weight

    def summed() -> tuple[list[np.ndarray], list[np.ndarray]]:
        # normalise(q + w e) of unit vectors; einsum, not BLAS (see Postings.cosines)
        encoded = pending()
        q = np.asarray(question_vector, dtype=np.float32)
        e = np.asarray(encoded[: len(own)], dtype=np.float32)
        q = q / max(float(np.sqrt(np.einsum("i,i", q, q))), 1e-12)
        e = e / np.maximum(np.sqrt(np.einsum("ij,ij->i", e, e)), 1e-12)[:, None]
        v = q[None, :] + weight * e
        return list(v / np.maximum(np.sqrt(np.einsum("ij,ij->i", v, v)), 1e-12)[:, None]), encoded[len(own):]

    return summed
