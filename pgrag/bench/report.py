"""Rendering of evaluation reports: a Markdown table and a Recall@k bar chart.

Both work from the JSON form of a report, so saved reports can be re-rendered
without re-running anything (scripts/benchmarks.py does that for the docs).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def recall_keys(report: dict[str, Any]) -> list[str]:
    return [f"recall@{k}" for k in report.get("ks", (2, 5))]


def interval_keys(report: dict[str, Any], values: list[dict[str, Any]] | None = None) -> list[str]:
    """The ``interval@k``, then ``group_interval@k``, keys that some method of
    the report (or some of ``values``) has: older reports have none, and a set
    whose questions share no gold passage no group intervals."""
    held = list(report["methods"].values()) if values is None else values
    return [f"{kind}@{k}" for kind in ("interval", "group_interval") for k in report.get("ks", (2, 5))
            if any(f"{kind}@{k}" in m for m in held)]


def _interval_header(key: str) -> str:
    kind, k = key.split("@")
    return f"R@{k} 95 %" + (" by group" if kind == "group_interval" else "")


def _interval(value: Any) -> str:
    return "–" if not value else f"{value[0]:.1f}–{value[1]:.1f}"


def markdown_table(report: dict[str, Any]) -> str:
    """Methods as rows: Recall@k, the 95 % bootstrap intervals, EM, F1, latency
    p50/p95, LLM tokens per question."""
    keys = recall_keys(report)
    intervals = interval_keys(report)
    n = max(report["questions"], 1)
    header = ["method", *(k.replace("recall@", "R@") for k in keys), "EM", "F1",
              "p50 ms", "p95 ms", "prompt tok/q", "completion tok/q",
              *(_interval_header(k) for k in intervals)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, m in report["methods"].items():
        cells = [name, *(_fmt(m[k]) for k in keys), _fmt(m["em"]), _fmt(m["f1"]),
                 _fmt(m["latency_ms_p50"]), _fmt(m["latency_ms_p95"]),
                 _fmt(m["llm_prompt_tokens"] / n, 0), _fmt(m["llm_completion_tokens"] / n, 0),
                 *(_interval(m.get(k)) for k in intervals)]
        lines.append("| " + " | ".join(cells) + " |")
    outcomes = [f"- {name}: " + "; ".join(f"{key} " + ", ".join(f"{v} {n}" for v, n in values.items())
                                           for key, values in m["outcomes"].items())
                for name, m in report["methods"].items() if m.get("outcomes")]
    if outcomes:
        lines += ["", "How the runs ended (questions per outcome):", "", *outcomes]
    return "\n".join(lines)


def type_table(report: dict[str, Any]) -> str:
    """Recall@k per question type, a row per method and type, with the type's
    95 % intervals where the report has them (empty when no method of the
    report has types)."""
    keys = recall_keys(report)
    rows = [(name, t, values) for name, m in report["methods"].items()
            for t, values in (m.get("recall_by_type") or {}).items()]
    if not rows:
        return ""
    intervals = interval_keys(report, [values for _, _, values in rows])
    grouped = any("groups" in values for _, _, values in rows)
    header = ["method", "type", "questions", *(["groups"] if grouped else []),
              *(k.replace("recall@", "R@") for k in keys), *(_interval_header(k) for k in intervals)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, t, values in rows:
        counts = [str(values["questions"]), *([_fmt(values.get("groups", values["questions"]))] if grouped else [])]
        lines.append("| " + " | ".join([name, t, *counts, *(_fmt(values.get(k)) for k in keys),
                                        *(_interval(values.get(k)) for k in intervals)]) + " |")
    return "\n".join(lines)


def loop_table(report: dict[str, Any]) -> str:
    """The LLM loops (methods with rounds and LLM calls): Recall@k, EM, F1,
    rounds and LLM calls per question, T2RAG's share of questions with every
    placeholder resolved; then, for an oracle run, where the failures lost
    their evidence. Empty when no method ran a loop with an LLM."""
    keys = recall_keys(report)
    n = max(report["questions"], 1)
    loops = {name: m for name, m in report["methods"].items() if m.get("rounds") is not None and m["llm_calls"]}
    if not loops:
        return ""
    header = ["method", *(k.replace("recall@", "R@") for k in keys), "EM", "F1", "rounds/q", "LLM calls/q",
              "all placeholders resolved %"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, m in loops.items():
        cells = [name, *(_fmt(m[k]) for k in keys), _fmt(m["em"]), _fmt(m["f1"]), _fmt(m["rounds"], 2),
                 _fmt(m["llm_calls"] / n, 2), _fmt(m.get("resolved"))]
        lines.append("| " + " | ".join(cells) + " |")
    if report.get("failures"):
        lines += ["", "Where the failed questions lost their evidence (pgrag.bench.oracle.diagnose):", ""]
        lines += [f"- {name}: " + ", ".join(f"{label} {count}" for label, count in labels.items())
                  for name, labels in report["failures"].items()]
    return "\n".join(lines)


def llm_table(report: dict[str, Any]) -> str:
    """Per method that called an LLM: calls and tokens a question, the structured
    replies checked, how many did not parse into their prompt's shape (before any
    repair), and how many requests carried their reply's schema (constrained
    decoding). Empty when no method called an LLM."""
    n = max(report["questions"], 1)
    used = {name: m for name, m in report["methods"].items() if m.get("llm_calls")}
    if not used:
        return ""
    header = ["method", "LLM calls/q", "prompt tokens/q", "completion tokens/q", "structured replies",
              "parse failures", "parse failures %", "constrained requests"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, m in used.items():
        replies, failed = m.get("llm_replies", 0), m.get("parse_failures", 0)
        cells = [name, _fmt(m["llm_calls"] / n, 2), _fmt(m["llm_prompt_tokens"] / n, 0),
                 _fmt(m["llm_completion_tokens"] / n, 0), str(replies), str(failed),
                 _fmt(100 * failed / replies if replies else None), str(m.get("constrained_calls", 0))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def markdown_report(report: dict[str, Any]) -> str:
    c = report["corpus"]
    reader = ("\n\nReader: the oracle (pgrag.bench.oracle), which answers each prompt from the question's gold "
              "evidence and the prompt's own text: an upper bound under ideal reasoning, not a model's figures."
              if report.get("reader") == "oracle" else "")
    untitled = (" without its titles: Recall@k counts the titles of the hits' document ids"
                if c.get("untitled") else "")
    loops = loop_table(report)
    llm = llm_table(report)
    types = type_table(report)
    return (
        f"Corpus `{c['file']}` ({c['documents']} documents, {c['chunks']} chunks, "
        f"{c['embedding_model']}, indexed in {c['index_seconds']:.0f} s{untitled}); "
        f"{report['questions']} questions; each method returned {report['depth']} chunks, "
        f"Recall@k counts the first k distinct documents. Recall, EM and F1 in percent; R@k 95 % is a "
        f"percentile bootstrap interval over the questions (1,000 resamples, seed 0){_groups_note(report)}."
        f"{reader}\n\n"
        + markdown_table(report) + "\n"
        + ("\nRecall@k by question type:\n\n" + types + "\n" if types else "")
        + ("\nThe LLM loops:\n\n" + loops + "\n" if loops else "")
        + ("\nLLM calls and structured replies:\n\n" + llm + "\n" if llm else "")
    )


def _groups_note(report: dict[str, Any]) -> str:
    groups = next((m["groups"] for m in report["methods"].values() if "groups" in m), None)
    if groups is None:
        return ""
    return (f"; the {report['questions']} questions form {groups} groups that share gold passages, and "
            "\"by group\" resamples those groups (questions of a group succeed or fail together)")


def plot_recall(report: dict[str, Any], path: Path) -> None:
    """A grouped bar chart of Recall@k per method, written as PNG."""
    import matplotlib

    matplotlib.use("Agg")  # no display on servers
    import matplotlib.pyplot as plt

    keys = recall_keys(report)
    names = list(report["methods"])
    width = 0.8 / max(len(keys), 1)
    fig, ax = plt.subplots(figsize=(max(4.0, 1.3 * len(names) + 2), 3.6), dpi=120)
    for i, key in enumerate(keys):
        xs = [j + (i - (len(keys) - 1) / 2) * width for j in range(len(names))]
        values = [report["methods"][n][key] for n in names]
        bars = ax.bar(xs, values, width, label=key.replace("recall@", "Recall@"))
        ax.bar_label(bars, fmt="%.1f", fontsize=7)
    ax.set_xticks(range(len(names)), names)
    ax.set_ylim(0, 100)
    ax.set_ylabel("percent")
    ax.set_title(f"{report['questions']} questions, {report['corpus']['documents']} documents", fontsize=9)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    # A bar chart has a handful of colours: a 64-colour palette PNG is about a third the size
    # of matplotlib's RGBA one and looks the same (docs/benchmarks keeps its files small).
    from PIL import Image  # matplotlib's own dependency

    with Image.open(buffer) as image:
        image.convert("RGB").quantize(colors=64).save(path, format="PNG", optimize=True)
