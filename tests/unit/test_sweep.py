"""pgrag.index.sweep: a product on several threads over views of the matrix's rows is
the single product to the bit, copies none of the matrix, its threads leave
signals to the calling thread (a PostgreSQL backend's) and end with the call."""

from __future__ import annotations

import signal
import threading

import numpy as np
import pytest
import scipy.sparse as sp

from pgrag.exceptions import ConfigError
from pgrag.index import sweep
from pgrag.index.graph import build_graph


def random_csr(n: int, nnz: int, seed: int, rows: int | None = None) -> sp.csr_matrix:
    """n × n, entries in the first ``rows`` rows only (the rest empty)."""
    rng = np.random.default_rng(seed)
    m = sp.coo_matrix((rng.uniform(1, 5, nnz), (rng.integers(0, rows or n, nnz), rng.integers(0, n, nnz))),
                      shape=(n, n)).tocsr()
    m.sum_duplicates()
    return m


@pytest.mark.parametrize("parts", [2, 3, 4, 7])
def test_blocks_cover_every_row_once_and_share_the_arrays(parts):
    m = random_csr(1000, 20_000, seed=parts, rows=500)     # empty rows at the end: cuts may coincide
    blocks = sweep.row_blocks(m, parts)
    assert blocks[0][0] == 0 and blocks[-1][1] == m.shape[0]
    assert all(b[1] == c[0] for b, c in zip(blocks, blocks[1:]))        # contiguous, no overlap
    assert all(np.shares_memory(view.data, m.data) for _, _, view in blocks if view.nnz)
    assert sum(view.nnz for _, _, view in blocks) == m.nnz


@pytest.mark.parametrize("parts", [2, 3, 4])
def test_the_threaded_product_is_the_product_to_the_bit(parts):
    m = random_csr(5000, 200_000, seed=1)
    x = np.random.default_rng(2).random(5000)
    with sweep.pool():
        got = sweep.product(m, sweep.row_blocks(m, parts), x)
    assert np.array_equal(got, m @ x)
    assert np.array_equal(sweep.product(m, None, x), m @ x)


def test_a_graph_past_the_size_sweeps_on_threads_with_the_same_result(monkeypatch):
    rng = np.random.default_rng(4)
    a, b = rng.integers(0, 3000, (2, 40_000))
    keep = a < b
    edges = (a[keep], b[keep], rng.uniform(1, 5, int(keep.sum())))

    def graph():
        return build_graph(1, np.arange(3000), [f"t{i}" for i in range(3000)], *edges)

    r = rng.random(3000)
    alone = graph()
    assert alone._sweep_blocks is None                 # far under the size: one thread
    monkeypatch.setattr(sweep, "PARALLEL_MIN_ENTRIES", 1000)
    monkeypatch.setattr(sweep, "threads", lambda: 3)
    threaded = graph()
    assert threaded._sweep_blocks is not None and len(threaded._sweep_blocks) == 3
    want = alone.step(r)
    seen = []
    product = sweep.product
    monkeypatch.setattr(sweep, "product", lambda m, blocks, x: seen.append(blocks) or product(m, blocks, x))
    with sweep.pool():
        assert np.array_equal(threaded.step(r), want)
    assert len(seen) == 1 and len(seen[0]) == 3        # the step went through the three blocks


def sweep_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("pgrag-sweep")]


def test_the_threads_end_with_the_call_and_none_start_outside_one():
    m = random_csr(1000, 20_000, seed=6)
    x = np.ones(1000)
    assert np.array_equal(sweep.product(m, sweep.row_blocks(m, 3), x), m @ x)
    assert sweep_threads() == []                          # no pool() block: the calling thread alone
    with sweep.pool():
        sweep.product(m, sweep.row_blocks(m, 3), x)
        with sweep.pool():                                # nested: the outer block's threads
            sweep.product(m, sweep.row_blocks(m, 3), x)
        assert sweep_threads()                          # started for this call
    assert sweep_threads() == []


def test_a_pagerank_on_a_large_graph_leaves_no_thread(monkeypatch):
    from pgrag.index.pagerank import personalized_pagerank, push_pagerank

    monkeypatch.setattr(sweep, "PARALLEL_MIN_ENTRIES", 1000)
    monkeypatch.setattr(sweep, "threads", lambda: 3)
    rng = np.random.default_rng(7)
    a, b = rng.integers(0, 2000, (2, 30_000))
    keep = a < b
    g = build_graph(1, np.arange(2000), [f"t{i}" for i in range(2000)], a[keep], b[keep],
                    rng.uniform(1, 5, int(keep.sum())))
    used = []
    product = sweep.product
    monkeypatch.setattr(sweep, "product", lambda m, blocks, x: used.append(sweep.pooled()) or product(m, blocks, x))
    personalized_pagerank(g, [1, 2, 3])
    push_pagerank(g, [1, 2, 3], tolerance=1e-9)
    assert used and all(used)                             # the sweeps ran inside a pool() block
    assert sweep_threads() == []


def test_pgrag_threads_sets_the_threads(monkeypatch):
    m = random_csr(100, 1000, seed=5)
    monkeypatch.setattr(sweep, "PARALLEL_MIN_ENTRIES", 10)
    monkeypatch.setenv("PGRAG_THREADS", "1")
    assert sweep.threads() == 1 and sweep.blocks_for(m) is None
    monkeypatch.setenv("PGRAG_THREADS", "3")
    assert sweep.threads() == 3 and len(sweep.blocks_for(m)) == 3
    monkeypatch.setenv("PGRAG_THREADS", "0")
    with pytest.raises(ConfigError, match="PGRAG_THREADS must be a positive integer"):
        sweep.threads()


def test_the_threads_block_every_signal():
    m = random_csr(100, 1000, seed=3)
    with sweep.pool():
        sweep.product(m, sweep.row_blocks(m, 2), np.ones(100))    # starts the threads
        seen = sweep._current.get().get().submit(lambda: signal.pthread_sigmask(signal.SIG_BLOCK, [])).result()
    assert seen == signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP}   # those two cannot be
    assert threading.current_thread() is threading.main_thread()
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])   # ours untouched
