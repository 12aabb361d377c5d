"""MiniLM in the model runtime on torch against ONNX Runtime (issue 45), in one run.

Starts two runtimes (``python -m pgrag.model_service``) on sockets of their own,
one with PGRAG_EMBEDDING_BACKEND=torch and one with =onnx, and times the same
requests against each, interleaved (torch, onnx, torch, ...), so that a busy
machine slows both alike: one question, a batch of 8 questions, a batch of 64
2Wiki passages. Then it encodes ``--texts`` passages through each and reads each
runtime's resident memory (VmRSS, VmHWM). It also checks that both return the
same vectors. Usage:

    PYTHONPATH=. python scripts/onnx_vs_torch.py --bench ../shared/bench/2wiki [--reps 30] [--texts 3000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from pgrag.model_client import Endpoint, RemoteEmbedder, health


def start(backend: str, folder: Path) -> tuple[subprocess.Popen, Path]:
    sock = folder / f"{backend}.sock"
    env = {**os.environ, "PGRAG_EMBEDDING_BACKEND": backend}
    proc = subprocess.Popen([sys.executable, "-m", "pgrag.model_service", "--socket", str(sock)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            health(Endpoint(socket=sock))
            return proc, sock
        except Exception:   # not up yet
            time.sleep(0.3)
    proc.kill()
    raise SystemExit(f"the {backend} runtime did not start")


def memory(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0]) // 1024
    return fields


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bench", type=Path, required=True)
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--texts", type=int, default=3000)
    args = parser.parse_args()
    questions = [json.loads(line)["question"] for line in (args.bench / "questions.jsonl").read_text().splitlines()]
    corpus = json.loads((args.bench / "corpus.json").read_text())
    passages = [d["title"] + "\n" + d["text"] for d in corpus]

    with tempfile.TemporaryDirectory() as tmp:
        runtimes = {b: start(b, Path(tmp)) for b in ("torch", "onnx")}
        try:
            embedders = {b: RemoteEmbedder(Endpoint(socket=s), "all-MiniLM-L6-v2") for b, (_, s) in runtimes.items()}
            for b, (proc, _) in runtimes.items():
                print(f"{b}: started, {memory(proc.pid)} MB, health backend {health(Endpoint(socket=runtimes[b][1]))['backend']}")
            same = {b: e.encode(passages[:200] + questions) for b, e in embedders.items()}
            print(f"vectors: max 1-cos over 200 passages + {len(questions)} questions:",
                  f"{float(np.max(1 - np.sum(same['torch'] * same['onnx'], axis=1))):.2e}")
            cases = {"one question": lambda i: questions[i % len(questions):][:1],
                     "8 questions": lambda i: (questions * 2)[i % len(questions):][:8],
                     "64 passages": lambda i: passages[(i * 64) % 4000:][:64]}
            for label, texts_of in cases.items():
                times: dict[str, list[float]] = {"torch": [], "onnx": []}
                for i in range(args.reps):
                    texts = texts_of(i)
                    for b in ("torch", "onnx") if i % 2 else ("onnx", "torch"):
                        t = time.perf_counter()
                        embedders[b].encode(texts)
                        times[b].append((time.perf_counter() - t) * 1000)
                t_ms, o_ms = statistics.median(times["torch"]), statistics.median(times["onnx"])
                print(f"{label}: median torch {t_ms:.1f} ms, onnx {o_ms:.1f} ms, torch/onnx {t_ms / o_ms:.2f}x "
                      f"({args.reps} each, interleaved)")
            for b in ("torch", "onnx"):
                t = time.perf_counter()
                for i in range(0, args.texts, 64):
                    embedders[b].encode(passages[i % len(passages):][:64])
                took = time.perf_counter() - t
                print(f"{b}: {args.texts} passages in {took:.1f} s; then {memory(runtimes[b][0].pid)} MB")
        finally:
            for proc, _ in runtimes.values():
                proc.terminate()
                proc.wait(timeout=30)


if __name__ == "__main__":
    main()
