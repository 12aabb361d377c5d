"""What the machine allows: the CPU a request costs, and throughput as a fraction
of the cores divided by it (``pgrag bench load``'s capacity figures).

A request's CPU is spread over three processes: the server backend that runs
the SQL function (and the PL/Python method in it), the model runtime that embeds
its texts, and the client. Each method runs alone on one connection, requests
back to back, and each process's CPU time is read from ``/proc/<pid>/stat``
before and after; so the figures hold on a busy machine too, as wall times do
not. ``capacity_rps`` is the cores divided by the load mix's mean CPU a request:
the most a perfectly packed machine could serve. Under load, the CPU the same
processes (the pool's backends, the runtime, the client) use a request says
where the rest goes: a request that costs more CPU under load than alone pays
for contention (sockets, batching windows, cache misses), one that costs the
same but leaves cores idle waits. The whole machine's busy share
(``/proc/stat``) says whether the cores were full, and whether other work on
the machine took them.

Linux only, and the backends' and the runtime's /proc must be readable (the
server's OS user, or root); elsewhere the figures are None and say why.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def stack_cpu_s(pids: Sequence[int]) -> float | None:
    """CPU seconds the processes ``pids`` have used in all (None: one cannot be read)."""
    try:
        return sum(process_cpu_s(pid) for pid in pids)
    except (OSError, ValueError, IndexError):
        return None


def machine_busy_s() -> float | None:
    """CPU seconds all cores have spent busy since boot (``/proc/stat``): every
    state but idle and iowait."""
    try:
        line = Path("/proc/stat").read_text().splitlines()[0]
    except OSError:
        return None
    ticks = [int(v) for v in line.split()[1:]]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    return (sum(ticks[:8]) - idle) / _TICK


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def model_runtime(conn: Any) -> dict[str, Any]:
    """``pgrag.model_runtime()``: the runtime the server's backends use, and its health."""
    row = conn.execute("SELECT pgrag.model_runtime()").fetchone()
    return (row[0] if row else None) or {}


def runtime_health(conn: Any) -> dict[str, Any]:
    """The model runtime's /health as the server's backends see it ({}: models in process)."""
    return model_runtime(conn).get("health") or {}


def runtime_pid(conn: Any) -> int | None:
    """The model runtime's pid as the server's backends see it (None: models in process)."""
    pid = runtime_health(conn).get("pid")
    return int(pid) if pid else None


def cache_share(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The texts the runtime received between two /health readings, and how many
    of them its VectorCache answered (no model call): ``{}`` without a runtime."""
    if "texts" not in before or "texts" not in after:
        return {}
    texts = after["texts"] - before["texts"]
    hits = (after.get("cache") or {}).get("hits", 0) - (before.get("cache") or {}).get("hits", 0)
    return {"runtime_texts": texts, "runtime_cache_hits": hits,
            "runtime_cache_share": round(hits / texts, 3) if texts else 0.0}


def cpu_alone(pool: Any, work: Sequence[tuple[str, tuple[str, dict[str, Any]]]],
              method_names: Sequence[str], *, requests: int = 40) -> dict[str, Any]:
    """Each method alone on one pooled connection, ``requests`` in a row after one
    warm-up: wall ms and CPU ms a request in the backend, the runtime and this client."""
    conn = pool.getconn()
    try:
        try:
            backend = int(conn.execute("SELECT pg_backend_pid()").fetchone()[0])
            runtime = runtime_pid(conn)
            process_cpu_s(backend)
        except (OSError, ValueError) as exc:
            return {"error": f"cannot read the server's processes: {exc}"}
        out: dict[str, Any] = {}
        for method in method_names:
            mine = [call for m, call in work if m == method]
            calls = [mine[i % len(mine)] for i in range(requests + 1)]   # the questions again if too few
            sql, params = calls[0]
            conn.execute(sql, params).fetchall()
            b0, r0 = process_cpu_s(backend), process_cpu_s(runtime) if runtime else 0.0
            c0, t0 = time.process_time(), time.perf_counter()
            for sql, params in calls[1:]:
                conn.execute(sql, params).fetchall()
            n = len(calls) - 1
            b1, r1 = process_cpu_s(backend), process_cpu_s(runtime) if runtime else 0.0
            c1, t1 = time.process_time(), time.perf_counter()
            parts = {"backend": (b1 - b0), "runtime": (r1 - r0), "client": (c1 - c0)}
            out[method] = {"requests": n, "wall_ms": round(1000 * (t1 - t0) / n, 2),
                           **{f"{k}_cpu_ms": round(1000 * v / n, 2) for k, v in parts.items()},
                           "cpu_ms": round(1000 * sum(parts.values()) / n, 2)}
    finally:
        pool.putconn(conn)
    mix = [out[m]["cpu_ms"] for m in method_names]
    mean = sum(mix) / len(mix)
    return {"cores": cores(), "runtime": "in process" if runtime is None else "shared", "methods": out,
            "mix_cpu_ms": round(mean, 2), "capacity_rps": round(1000 * cores() / mean, 2) if mean else None}


def busy_share(busy_before: float | None, seconds: float, requests: int) -> dict[str, Any]:
    """The whole machine's busy time over a timed window: the share of the cores
    and the CPU ms a request (everything on the machine counted, client included)."""
    after = machine_busy_s()
    if busy_before is None or after is None or seconds <= 0:
        return {}
    busy = after - busy_before
    return {"cores_busy": round(busy / (seconds * cores()), 3),
            "machine_cpu_ms_per_request": round(1000 * busy / requests, 2) if requests else None}
