"""One sparse product against pgrag.sweep's threaded product, on random
matrices of 0.1 M to 5.5 M stored entries (about 70 a row, as the token graph):
where the second thread pays for its hand-off (sweep.PARALLEL_MIN_ENTRIES).

    python scripts/sweep_threads.py

Best of three medians of 50 products each; the threaded product equals the
single one to the bit (tests/unit/test_sweep.py).
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import scipy.sparse as sp

from pgrag import sweep


def main() -> None:
    rng = np.random.default_rng(0)
    for nnz in (100_000, 250_000, 500_000, 1_000_000, 2_000_000, 5_500_000):
        n = max(nnz // 70, 1000)
        m = sp.coo_matrix((rng.uniform(1, 5, nnz), (rng.integers(0, n, nnz), rng.integers(0, n, nnz))),
                          shape=(n, n)).tocsr()
        x = rng.random(n)
        blocks = sweep.row_blocks(m, 2)
        best: dict[str, list[float]] = {"serial": [], "threads": []}
        for _ in range(3):
            for label, run in (("serial", lambda: m @ x), ("threads", lambda: sweep.product(m, blocks, x))):
                times = []
                for _ in range(50):
                    t0 = time.perf_counter()
                    run()
                    times.append((time.perf_counter() - t0) * 1000)
                best[label].append(statistics.median(times))
        one, two = min(best["serial"]), min(best["threads"])
        print(f"{m.nnz:>9} entries: one thread {one:.3f} ms, two {two:.3f} ms, {one / two:.2f}x")


if __name__ == "__main__":
    main()
