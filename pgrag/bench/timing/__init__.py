"""Benchmarks (``pgrag bench``): wall-clock figures and ratios from one run.

Timings belong here, not in unit tests: these machines are shared and noisy, so
the figures to compare are ratios measured within the same run.

Each command has its module: ``ingest``, ``latency`` (``pgrag bench queries``),
``graph``, ``load`` and ``following`` (``pgrag bench follow``). Their entry
points are named here, where ``pgrag bench`` finds them.
"""

from __future__ import annotations

from .following import follow_benchmark
from .graph import graph_benchmark
from .ingest import ingest_benchmark
from .latency import query_benchmark
from .load import load_benchmark

__all__ = ["follow_benchmark", "graph_benchmark", "ingest_benchmark", "load_benchmark", "query_benchmark"]
