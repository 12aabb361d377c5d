"""Energy diffusion over a weighted graph: ThreadRAG's Energy-Driven Pathfinding
(../shared/papers/threadrag.md §3.2).

Apart from the token graph's PageRank (pgrag.index.pagerank): ThreadRAG diffuses
over a small graph of semantic nodes it builds per question, so these take any
symmetric weight matrix, not a TokenGraph.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp


def propagate_energy(weights: sp.spmatrix | np.ndarray, initial: np.ndarray, *, decay: float,
                     steps: int) -> np.ndarray:
    """Energy after ``steps`` rounds of diffusion from ``initial``:
    E = sum over t = 0..steps of (decay * P)^t E0, where P[j, i] = w_ij / sum_k w_ik.
    Each round, every node passes ``decay`` times the energy it received in the
    previous round to its neighbours, split in proportion to the edge weights;
    energy accumulates, so a node reached by several anchors (or paths) sums
    their contributions. ``weights`` is a symmetric non-negative matrix."""
    w = sp.csr_matrix(weights, dtype=np.float64)
    out_weight = np.asarray(w.sum(axis=1)).ravel()
    inverse = np.divide(1.0, out_weight, out=np.zeros_like(out_weight), where=out_weight > 0)
    spread = (sp.diags(inverse) @ w).T.tocsr()          # column i: node i's shares to its neighbours
    energy = np.asarray(initial, dtype=np.float64).copy()
    wave = energy.copy()
    for _ in range(steps):
        wave = decay * (spread @ wave)
        energy += wave
    return energy


def reachable(weights: sp.spmatrix | np.ndarray, sources: Sequence[int], keep: np.ndarray) -> np.ndarray:
    """Nodes of ``keep`` (a boolean mask) connected to a source through nodes of ``keep``."""
    from scipy.sparse.csgraph import breadth_first_order

    w = sp.csr_matrix(weights)
    mask = np.asarray(keep, dtype=bool).copy()
    mask[list(sources)] = True
    sub = sp.diags(mask.astype(np.float64)) @ w @ sp.diags(mask.astype(np.float64))
    seen = np.zeros(len(mask), dtype=bool)
    for s in sources:
        if not seen[s]:
            seen[breadth_first_order(sp.csr_matrix(sub), s, directed=False, return_predecessors=False)] = True
    return seen & mask
