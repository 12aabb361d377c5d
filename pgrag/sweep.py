"""A sparse matrix times a vector on several threads, for the PPR sweeps over
large graphs (pgrag.graph).

A sweep multiplies the whole weight matrix; past a few million stored entries
it is bound by memory and one core does not saturate it. The rows are cut into
blocks of about equal entries, each block a view of the matrix's arrays (no
copy: the matrix may be a read-only mapping shared by every process), and each
block's product is scipy's, which releases the GIL. Every output entry is one
row's sum, computed as in the single product, so the result is the same to the
bit.

The threads block every signal: inside a PostgreSQL backend, where this also
runs, the server's signal handlers must run on the backend's own thread.
"""

from __future__ import annotations

import os
import signal
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import scipy.sparse as sp

from .config import sweep_threads

# Products over matrices of fewer stored entries stay on the calling thread:
# below this the hand-off (about 0.4 ms on the 2-core machine) costs more than
# the second core saves. Measured there, one product against two threads:
# 0.5 M entries 0.52 / 1.08 ms, 1 M 1.09 / 0.85, 2 M 1.78 / 1.54, 5.5 M 6.45 / 3.85.
PARALLEL_MIN_ENTRIES = 1_000_000
MAX_THREADS = 4

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


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


def product(matrix: sp.csr_matrix, blocks: list[tuple[int, int, sp.csr_matrix]] | None,
            x: np.ndarray) -> np.ndarray:
    """matrix @ x, one block per thread when ``blocks`` has more than one (the
    calling thread takes the first)."""
    if blocks is None or len(blocks) < 2:
        return np.asarray(matrix @ x)
    out = np.empty(matrix.shape[0], dtype=np.result_type(matrix.dtype, x.dtype))

    def block(i: int) -> None:
        a, b, view = blocks[i]
        out[a:b] = view @ x

    pool = _executor()
    futures = [pool.submit(block, i) for i in range(1, len(blocks))]
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


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=threads() - 1, thread_name_prefix="pgrag-sweep",
                                       initializer=_quiet)
        return _pool


def _forget_pool() -> None:
    # a forked child has none of the parent's threads: it starts its own pool
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_pool)
