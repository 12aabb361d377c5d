"""A sparse matrix times a vector on several threads, for the PPR sweeps over
large graphs (pgrag.index.graph, pgrag.index.pagerank).

A sweep multiplies the whole weight matrix; past a few million stored entries
it is bound by memory and one core does not saturate it. The rows are cut into
blocks of about equal entries, each block a view of the matrix's arrays (no
copy: the matrix may be a read-only mapping shared by every process), and each
block's product is scipy's, which releases the GIL. Every output entry is one
row's sum, computed as in the single product, so the result is the same to the
bit.

The threads belong to one call: ``with pool():`` around a PPR's iterations
starts them on the first product that wants them and joins them when the block
ends, so no thread of pgrag's outlives the call that started it. Outside such a
block a product runs on the calling thread alone (the same result to the bit).
The threads block every signal: inside a PostgreSQL backend, where this also
runs, the server's signal handlers must run on the backend's own thread.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import signal
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import scipy.sparse as sp

from ..config import sweep_threads

# Products over matrices of fewer stored entries stay on the calling thread:
# below this the hand-off (about 0.4 ms on the 2-core machine) costs more than
# the second core saves. Measured there, one product against two threads:
# 0.5 M entries 0.52 / 1.08 ms, 1 M 1.09 / 0.85, 2 M 1.78 / 1.54, 5.5 M 6.45 / 3.85.
PARALLEL_MIN_ENTRIES = 1_000_000
MAX_THREADS = 4


class _CallPool:
    """The threads of one ``pool()`` block, started when first wanted."""

    def __init__(self) -> None:
        self.executor: ThreadPoolExecutor | None = None

    def get(self) -> ThreadPoolExecutor:
        if self.executor is None:
            self.executor = ThreadPoolExecutor(max_workers=threads() - 1, thread_name_prefix="pgrag-sweep",
                                               initializer=_quiet)
        return self.executor


_current: contextvars.ContextVar[_CallPool | None] = contextvars.ContextVar("pgrag_sweep_pool", default=None)


@contextlib.contextmanager
def pool() -> Iterator[None]:
    """Products inside the block may use threads, which end with it (nested
    blocks share the outer one's)."""
    if _current.get() is not None:
        yield
        return
    call = _CallPool()
    token = _current.set(call)
    try:
        yield
    finally:
        _current.reset(token)
        if call.executor is not None:
            call.executor.shutdown(wait=True)


def threads() -> int:
    """Threads a product may use: ``PGRAG_THREADS``, else the machine's cores,
    at most MAX_THREADS."""
    return max(1, min(MAX_THREADS, sweep_threads(os.cpu_count() or 1)))


def row_blocks(matrix: sp.csr_matrix, parts: int) -> list[tuple[int, int, sp.csr_matrix]]:
    """(first row, end row, view) of ``parts`` row blocks holding about equal
    stored entries. The views share ``matrix``'s data and indices."""
    n = matrix.shape[0]
    cuts = [0] + [int(np.searchsorted(matrix.indptr, matrix.nnz * i // parts)) for i in range(1, parts)] + [n]
    blocks = []
    for a, b in zip(cuts, cuts[1:]):
        if b <= a:
            continue
        lo, hi = int(matrix.indptr[a]), int(matrix.indptr[b])
        # Set, not passed to the constructor: scipy copies an array that is a
        # view of less than half of another (scipy.sparse's prune).
        view = sp.csr_matrix((b - a, matrix.shape[1]), dtype=matrix.dtype)
        view.data, view.indices = matrix.data[lo:hi], matrix.indices[lo:hi]
        view.indptr = (matrix.indptr[a:b + 1] - lo).astype(matrix.indptr.dtype)
        blocks.append((a, b, view))
    return blocks


def pooled() -> bool:
    """Whether a ``pool()`` block is open on this thread."""
    return _current.get() is not None


def product(matrix: sp.csr_matrix, blocks: list[tuple[int, int, sp.csr_matrix]] | None,
            x: np.ndarray) -> np.ndarray:
    """matrix @ x, one block per thread when ``blocks`` has more than one and a
    ``pool()`` block is open (the calling thread takes the first)."""
    call = _current.get()
    if blocks is None or len(blocks) < 2 or call is None:
        return np.asarray(matrix @ x)
    out = np.empty(matrix.shape[0], dtype=np.result_type(matrix.dtype, x.dtype))

    def block(i: int) -> None:
        a, b, view = blocks[i]
        out[a:b] = view @ x

    executor = call.get()
    futures = [executor.submit(block, i) for i in range(1, len(blocks))]
    block(0)
    for future in futures:
        future.result()
    return out


def blocks_for(matrix: sp.csr_matrix) -> list[tuple[int, int, sp.csr_matrix]] | None:
    """The row blocks a sweep over ``matrix`` uses, or None to stay on one thread."""
    parts = threads()
    if parts < 2 or matrix.nnz < PARALLEL_MIN_ENTRIES:
        return None
    return row_blocks(matrix, parts)


def _quiet() -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
