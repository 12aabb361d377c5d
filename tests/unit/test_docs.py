"""The README documents every command, and opens with the two set-up commands."""

from __future__ import annotations

from pathlib import Path

import click

from pgrag.cli import main

README = Path(__file__).resolve().parents[2] / "README.md"


def commands(group: click.Group, prefix: str = "pgrag") -> list[tuple[str, click.Command]]:
    out = []
    for name, cmd in group.commands.items():
        path = f"{prefix} {name}"
        out.append((path, cmd))
        if isinstance(cmd, click.Group):
            out.extend(commands(cmd, path))
    return out


def test_every_command_has_help_and_is_in_the_readme():
    text = README.read_text()
    for path, cmd in commands(main):
        assert (cmd.help or "").strip(), f"{path} has no help"
        assert path in text, f"{path} is not in README.md"


def test_readme_opens_with_make_demo_and_make_test():
    head = README.read_text().splitlines()[:8]
    assert any(line.startswith("make demo") for line in head)
    assert any(line.startswith("make test") for line in head)


def test_benchmarks_doc_is_generated_not_edited():
    """docs/BENCHMARKS.md is exactly what scripts/benchmarks.py renders from the
    saved measurements (docs/benchmarks/*.json)."""
    import importlib.util

    root = README.parent
    spec = importlib.util.spec_from_file_location("benchmarks_script", root / "scripts" / "benchmarks.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert (root / "docs" / "BENCHMARKS.md").read_text(encoding="utf-8") == module.render() + "\n"
    for line in module.COMMANDS.values():
        path = " ".join(line.split()[:3]) if line.split()[1] == "bench" else " ".join(line.split()[:2])
        assert path in [p for p, _ in commands(main)], f"{line} is not a pgrag command"


def test_every_benchmark_data_file_is_cited_from_the_docs():
    """docs/benchmarks holds only what docs/*.md cites (BENCHMARKS.md lists what it is rendered from)."""
    docs = README.parent / "docs"
    text = "\n".join(p.read_text(encoding="utf-8") for p in docs.glob("*.md"))
    uncited = sorted(p.name for p in (docs / "benchmarks").iterdir() if p.name not in text)
    assert uncited == []


def test_every_script_is_cited():
    """scripts/ keeps only what a doc, the Makefile or the benchmark renderer runs:
    a probe whose question is answered goes (git keeps it)."""
    root = README.parent
    text = "\n".join(p.read_text(encoding="utf-8") for p in [*root.glob("*.md"), *(root / "docs").glob("*.md"),
                                                             root / "Makefile", root / "scripts" / "benchmarks.py"])
    uncited = sorted(p.name for p in (root / "scripts").iterdir() if p.name not in text)
    assert uncited == []
