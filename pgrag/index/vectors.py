"""The chunks' embeddings of a corpus held in memory, for the rerank's cosines
and exact nearest-chunk search (pgrag.index.postings) without a query over the
pool.

They are unit rows of float32, in blocks of ascending chunk ids: a delta
(pgrag.index.delta) adds a block for the new chunks instead of copying every
vector, and a fold merges the blocks. Mapped from the shared files
(pgrag.index.shared_files) they are read-only, which torch (``products``) only reads.
"""

from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..config import blas_single_threaded
from ..exceptions import PgragError
from ..queries import binary_results, query

# The shared vectors are a read-only mapping; torch only reads them (``products``).
warnings.filterwarnings("ignore", message="The given NumPy array is not writable", category=UserWarning)


@dataclass(frozen=True)
class Vectors:
    """Chunk embeddings (unit rows, float32) by chunk id, in blocks of ascending
    ids: a delta adds a block for the new chunks instead of copying every vector
    (115 MB at 10x 2Wiki). Rows of deleted chunks stay until a fold; only
    current chunks are ever looked up."""

    blocks: tuple[tuple[np.ndarray, np.ndarray], ...]

    @classmethod
    def of(cls, ids: np.ndarray, rows: np.ndarray) -> "Vectors":
        return cls(((np.asarray(ids, dtype=np.int64), rows),))

    @property
    def nbytes(self) -> int:
        return int(sum(ids.nbytes + rows.nbytes for ids, rows in self.blocks))

    def rows(self, chunk_ids: np.ndarray) -> np.ndarray:
        """The vectors of ``chunk_ids`` (each must be in a block)."""
        wanted = np.asarray(chunk_ids, dtype=np.int64)
        out = np.empty((len(wanted), self.blocks[0][1].shape[1]), dtype=np.float32)
        found = np.zeros(len(wanted), dtype=bool)
        for ids, rows in self.blocks:
            at = np.minimum(np.searchsorted(ids, wanted), max(len(ids) - 1, 0))
            hit = (ids[at] == wanted) if len(ids) else np.zeros(len(wanted), dtype=bool)
            out[hit] = rows[at[hit]]
            found |= hit
        if not found.all():
            raise PgragError(f"no cached vector for chunks {wanted[~found][:5].tolist()}")
        return out

    def added(self, ids: np.ndarray, rows: np.ndarray) -> "Vectors":
        """These vectors and a block of those of chunks ``ids`` (above every id
        here): nothing is copied; a fold merges the blocks."""
        if not len(ids):
            return self
        return Vectors(self.blocks + ((np.asarray(ids, dtype=np.int64), rows),))

    @property
    def count(self) -> int:
        """Rows held, deleted chunks' included until a fold."""
        return int(sum(len(ids) for ids, _ in self.blocks))

    def merged(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids, rows) in one block, ascending: what the shared files hold."""
        if len(self.blocks) == 1:
            return self.blocks[0]
        ids = np.unique(np.concatenate([b[0] for b in self.blocks]))
        return ids, self.rows(ids)



def products(rows: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """rows · queriesᵀ (float32). A numpy product wakes OpenBLAS's threads,
    whose spinning afterwards takes a core from the next embedding: the model
    runtime's workers, or torch in process (see ``Postings.cosines``). With
    torch loaded, its threads do the product; where BLAS is on one thread (a
    server backend), numpy does; else einsum, on this thread (0.44 against 0.11
    ms for 2Wiki's 7,520 chunks and one question; interleaved with dense in
    `pgrag bench queries`, tigrag's embedding took 116 ms a question after the
    BLAS product and 84 ms without it)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        return (torch.from_numpy(rows) @ torch.from_numpy(queries).T).numpy()
    if blas_single_threaded():
        return np.asarray(rows @ queries.T)
    return np.einsum("ij,kj->ik", rows, queries)


def unit_rows(vectors: list[Any] | np.ndarray, dim: int) -> np.ndarray:
    """Embeddings as a float32 matrix of unit rows (``dim`` columns even when empty)."""
    # pgvector's binary loader gives Vector objects, the text one and SPI arrays
    rows = [v.to_numpy() if hasattr(v, "to_numpy") else v for v in vectors]
    m = np.asarray(rows, dtype=np.float32).reshape(-1, dim)
    return m / np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)


def read_vectors(conn: Any, corpus_id: int, chunk_ids: np.ndarray, every: bool = False) -> np.ndarray | None:
    """The unit embeddings of ``chunk_ids`` (ascending; ``every`` chunk of the
    corpus, read without sending their ids), one row each; None when the chunks
    are no longer those (a concurrent change committed between two statements:
    the caller reads again, as for a version change)."""
    rows = conn.execute(query("chunk_vectors"), {
        "corpus_id": corpus_id, "chunk_ids": None if every else chunk_ids.tolist()},
        binary=binary_results("chunk_vectors")).fetchall()
    if [r[0] for r in rows] != chunk_ids.tolist():
        return None
    dim = int(conn.execute(query("corpus_dim"), {"corpus_id": corpus_id}).fetchone()[0])
    return unit_rows([r[1] for r in rows], dim)
