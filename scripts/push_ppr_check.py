"""Forward-push PPR against power iteration on the 2Wiki token graph.

    python scripts/push_ppr_check.py --out /tmp/push-ppr.json [--epsilon 1e-8]

For every question, the seeds are its tokens in the graph (as TIGRAG's first
hop takes them); both PPRs run at TIGRAG's damping and tolerance, one after the
other, in this one process. Reported: the share of questions whose top-γ token
sets are identical, the mean overlap, the largest per-node difference (and the
largest error of each against a tightly converged power iteration, with whether
push stayed within its documented bound), and p50/p95 milliseconds of each.
The corpus must have been indexed by ``pgrag eval`` (its eval corpus is reused).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pgrag  # noqa: E402
from pgrag import graph  # noqa: E402
from pgrag.bench.evaluate import corpus_name_for, load_questions  # noqa: E402
from pgrag.methods.tigrag import TigragSettings  # noqa: E402
from pgrag.bench.metrics import percentile  # noqa: E402

BENCH = ROOT.parent / "shared" / "bench" / "2wiki"


@dataclass
class Tally:
    """What the questions add up to."""

    same: int = 0
    overlap: list[float] = field(default_factory=list)
    difference: float = 0.0         # |push − power|, largest over nodes and questions
    push_error: float = 0.0         # |push − converged|
    power_error: float = 0.0        # |power − converged|
    outside_bound: int = 0          # questions where push left its per-node bound
    power_ms: list[float] = field(default_factory=list)
    push_ms: list[float] = field(default_factory=list)
    work: list[int] = field(default_factory=list)
    rounds: list[int] = field(default_factory=list)


def timed(run: Any) -> tuple[graph.PageRank, float]:
    t0 = time.perf_counter()
    result = run()
    return result, (time.perf_counter() - t0) * 1000


def compare(g: graph.TokenGraph, seeds: list[int], settings: TigragSettings, epsilon: float,
            tally: Tally) -> None:
    """Both PPRs on one seed set (push first on odd calls, so neither always runs warm)."""
    def power() -> graph.PageRank:
        return graph.personalized_pagerank(g, seeds, damping=settings.damping, tolerance=settings.tolerance,
                                           max_iterations=settings.max_iterations)

    def push() -> graph.PageRank:
        return graph.push_pagerank(g, seeds, damping=settings.damping, epsilon=epsilon)

    if len(tally.push_ms) % 2:
        (b, push_ms), (a, power_ms) = timed(push), timed(power)
    else:
        (a, power_ms), (b, push_ms) = timed(power), timed(push)
    converged = graph.personalized_pagerank(g, seeds, damping=settings.damping, tolerance=1e-13,
                                            max_iterations=1000).scores
    top_a = set(graph.top_nodes(a.scores, settings.gamma).tolist())
    top_b = set(graph.top_nodes(b.scores, settings.gamma).tolist())
    tally.same += top_a == top_b
    tally.overlap.append(len(top_a & top_b) / max(len(top_a), 1))
    tally.difference = max(tally.difference, float(np.abs(a.scores - b.scores).max()))
    error = converged - b.scores
    tally.push_error = max(tally.push_error, float(np.abs(error).max()))
    tally.power_error = max(tally.power_error, float(np.abs(converged - a.scores).max()))
    slack = 1e-12
    tally.outside_bound += bool((error > epsilon * g.degree + slack).any()
                                or (error < -settings.damping * epsilon * g.degree - slack).any())
    tally.power_ms.append(power_ms)
    tally.push_ms.append(push_ms)
    tally.work.append(b.work)
    tally.rounds.append(b.iterations)


def summary(tally: Tally, g: graph.TokenGraph, settings: TigragSettings, epsilon: float,
            questions: int) -> dict[str, Any]:
    n = len(tally.overlap)
    return {
        "nodes": g.nodes, "edges": g.edges, "questions": questions, "questions_with_seeds": n,
        "gamma": settings.gamma, "damping": settings.damping, "tolerance": settings.tolerance,
        "epsilon": epsilon,
        "same_top_share": round(tally.same / n, 4) if n else None,
        "mean_overlap": round(float(np.mean(tally.overlap)), 4) if n else None,
        "max_difference_push_vs_power": tally.difference,
        "max_error_push_vs_converged": tally.push_error,
        "max_error_power_vs_converged": tally.power_error,
        "questions_outside_push_bound": tally.outside_bound,
        "power_ms_p50": round(percentile(tally.power_ms, 50), 3),
        "power_ms_p95": round(percentile(tally.power_ms, 95), 3),
        "push_ms_p50": round(percentile(tally.push_ms, 50), 3),
        "push_ms_p95": round(percentile(tally.push_ms, 95), 3),
        "push_work_p50": percentile([float(w) for w in tally.work], 50),
        "push_work_max": max(tally.work, default=0),
        "push_rounds_p50": percentile([float(r) for r in tally.rounds], 50),
        "graph_nnz": int(g.transition.nnz),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True, help="write the JSON summary here")
    parser.add_argument("--corpus-file", type=Path, default=BENCH / "corpus.json")
    parser.add_argument("--questions", type=Path, default=BENCH / "questions.jsonl")
    parser.add_argument("--epsilon", type=float, default=None,
                        help="push threshold ε (default: TIGRAG's tolerance × PUSH_EPSILON_PER_TOLERANCE)")
    args = parser.parse_args()
    settings = TigragSettings()
    epsilon = args.epsilon or settings.tolerance * graph.PUSH_EPSILON_PER_TOLERANCE
    db = pgrag.connect()
    kb = db.corpus(corpus_name_for(args.corpus_file), create=False)
    g = graph.token_graph(db, kb.id)
    questions = load_questions(args.questions)
    seed_sets = [g.index.seeds(kb.tokenize(q.question)) for q in questions]
    tally = Tally()
    compare(g, seed_sets[0], settings, epsilon, Tally())    # warm-up, not counted
    for seeds in seed_sets:
        if seeds:
            compare(g, seeds, settings, epsilon, tally)
    result = summary(tally, g, settings, epsilon, len(questions))
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
