"""A token graph's vocabulary: node index -> term and term -> node index.

Both sides are plain numpy arrays (fixed-width UTF-8, a sorted copy and its
order), so that a graph mapped from the shared files (pgrag.index.shared_files)
needs no per-process dict of its vocabulary; a delta (pgrag.index.delta) adds
and removes terms beside the arrays instead of rebuilding them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np


class Terms:
    """Node index -> term, over one fixed-width UTF-8 array (``S<width>``), so
    that a memory-mapped graph needs no per-process copy of its vocabulary."""

    def __init__(self, by_node: np.ndarray) -> None:
        self.by_node = by_node

    @classmethod
    def of(cls, terms: Sequence[str]) -> "Terms":
        encoded = [t.encode() for t in terms]
        width = max((len(e) for e in encoded), default=1) or 1
        return cls(np.array(encoded, dtype=f"S{width}") if encoded else np.zeros(0, dtype="S1"))

    def extended(self, terms: Sequence[str]) -> "Terms":
        """These terms followed by ``terms`` (new tokens get the next node indexes)."""
        encoded = [t.encode() for t in terms]
        width = max([self.by_node.dtype.itemsize, *(len(e) for e in encoded)])
        return Terms(np.concatenate([self.by_node.astype(f"S{width}"), np.array(encoded, dtype=f"S{width}")]))

    def __len__(self) -> int:
        return len(self.by_node)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Terms) and np.array_equal(self.by_node, other.by_node)

    __hash__ = None  # type: ignore[assignment]  # mutable-array contents: equal by value, not hashable

    def __getitem__(self, i: int) -> str:
        return bytes(self.by_node[i]).decode()


class TermIndex:
    """Term -> node index by binary search over the terms in byte order (the
    sorted array and its node order, both mappable). After a delta, ``added``
    holds the terms of the new nodes and ``gone`` marks the nodes whose tokens
    left the vocabulary (a mapped base is never rebuilt for a small change)."""

    def __init__(self, sorted_terms: np.ndarray, order: np.ndarray, added: dict[str, int] | None = None,
                 gone: np.ndarray | None = None) -> None:
        self.sorted_terms, self.order = sorted_terms, order
        self.added, self.gone = added or {}, gone

    @classmethod
    def of(cls, terms: Terms) -> "TermIndex":
        order = np.argsort(terms.by_node, kind="stable")
        return cls(terms.by_node[order], order.astype(np.int64))

    def changed(self, added: dict[str, int], gone: np.ndarray | None) -> "TermIndex":
        """This index with new terms (term -> node) and the nodes now gone."""
        return TermIndex(self.sorted_terms, self.order, {**self.added, **added}, gone)

    def get(self, term: str) -> int | None:
        key = term.encode()
        if len(self.sorted_terms) and len(key) <= self.sorted_terms.dtype.itemsize and b"\0" not in key:
            j = int(np.searchsorted(self.sorted_terms, key))
            if j < len(self.order) and self.sorted_terms[j] == key:
                node = int(self.order[j])
                if self.gone is None or not self.gone[node]:
                    return node
        return self.added.get(term)

    def nodes(self, terms: Sequence[str]) -> np.ndarray:
        """``get`` of many terms in one binary search: the node of each term, −1
        where it has none (thousands of terms cost one numpy call, not a search each)."""
        out = np.full(len(terms), -1, dtype=np.int64)
        if len(terms) and len(self.sorted_terms):
            size = self.sorted_terms.dtype.itemsize
            keys = [t.encode() for t in terms]
            fits = np.array([len(k) <= size and b"\0" not in k for k in keys])
            probe = np.array([k if f else b"" for k, f in zip(keys, fits)], dtype=self.sorted_terms.dtype)
            j = np.minimum(np.searchsorted(self.sorted_terms, probe), len(self.order) - 1)
            node = self.order[j]
            hit = fits & (self.sorted_terms[j] == probe)
            if self.gone is not None:
                hit &= ~self.gone[node]
            out[hit] = node[hit]
        if self.added:
            for i in np.flatnonzero(out < 0).tolist():
                out[i] = self.added.get(terms[i], -1)
        return out

    def seeds(self, terms: Iterable[str]) -> list[int]:
        """The distinct nodes of the ``terms`` that are in the vocabulary, ascending
        (a query's PPR seeds)."""
        found = (self.get(t) for t in terms if isinstance(t, str))    # a NULL from SQL is no term
        return sorted({node for node in found if node is not None})

    def __contains__(self, term: object) -> bool:
        return isinstance(term, str) and self.get(term) is not None

    def __getitem__(self, term: str) -> int:
        i = self.get(term)
        if i is None:
            raise KeyError(term)
        return i
