"""The docs: the README opens with the two set-up commands and stays a front page;
docs/cli.md documents every command; every page is reachable and every relative
link resolves; docs/README.md maps every file of the code; docs/benchmarks and
scripts/ hold only what is indexed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import click

from pgrag.cli import main

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
BENCHMARKS = DOCS / "benchmarks"


def commands(group: click.Group, prefix: str = "pgrag") -> list[tuple[str, click.Command]]:
    out = []
    for name, cmd in group.commands.items():
        path = f"{prefix} {name}"
        out.append((path, cmd))
        if isinstance(cmd, click.Group):
            out.extend(commands(cmd, path))
    return out


def pages() -> list[Path]:
    """Every Markdown page a reader may open: the root's and docs/'s."""
    return sorted([*ROOT.glob("*.md"), *DOCS.glob("*.md")])


def tracked_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def test_every_command_has_help_and_is_in_the_cli_page():
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    for path, cmd in commands(main):
        assert (cmd.help or "").strip(), f"{path} has no help"
        assert f"`{path}`" in text, f"{path} is not in docs/cli.md"


def test_readme_opens_with_make_demo_and_make_test():
    head = README.read_text(encoding="utf-8").splitlines()[:8]
    assert any(line.startswith("make demo") for line in head)
    assert any(line.startswith("make test") for line in head)


def test_the_readme_and_scaling_stay_short():
    """Reference goes to the topic pages, history to git log (issue 46)."""
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 400
    assert len((DOCS / "SCALING.md").read_text(encoding="utf-8").splitlines()) <= 400


def benchmarks_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("benchmarks_script", ROOT / "scripts" / "benchmarks.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_benchmarks_doc_is_generated_not_edited():
    """docs/BENCHMARKS.md is exactly what scripts/benchmarks.py renders from the
    saved measurements (docs/benchmarks/*.json)."""
    module = benchmarks_script()
    assert (DOCS / "BENCHMARKS.md").read_text(encoding="utf-8") == module.render() + "\n"
    for line in module.COMMANDS.values():
        path = " ".join(line.split()[:3]) if line.split()[1] == "bench" else " ".join(line.split()[:2])
        assert path in [p for p, _ in commands(main)], f"{line} is not a pgrag command"


def data_index() -> str:
    """The last section of docs/BENCHMARKS.md: the index of docs/benchmarks."""
    return (DOCS / "BENCHMARKS.md").read_text(encoding="utf-8").split("\n## Data\n", 1)[1]


def test_every_benchmark_file_is_in_the_index_and_every_indexed_one_exists():
    index = data_index()
    names = [p.name for p in tracked_files(BENCHMARKS)]
    assert [n for n in names if f"`{n}`" not in index] == []
    listed = re.findall(r"`([\w.-]+\.(?:json|jsonl|png))`", index)
    assert [n for n in listed if n not in names] == []


def test_every_run_in_runs_json_is_indexed_and_quoted_by_a_page():
    """runs.json holds the runs the docs quote by hand: each is listed in the index
    and named by a page (SCALING.md, citus.md, BENCHMARKS.md), so none lingers."""
    runs = json.loads((BENCHMARKS / "runs.json").read_text(encoding="utf-8"))
    index = data_index()
    text = "\n".join(p.read_text(encoding="utf-8").replace(index, "") for p in DOCS.glob("*.md"))
    assert runs and [k for k in runs if f"`{k}`" not in index] == []
    assert [k for k in runs if k not in text] == []


def test_runs_json_is_written_compact():
    """runs.json keeps the layout of scripts/benchmarks.py's dump_runs (lists of plain
    values on one line): a json.dumps(indent=1) rewrite grows it past the size limit."""
    text = (BENCHMARKS / "runs.json").read_text(encoding="utf-8")
    assert text == benchmarks_script().dump_runs(json.loads(text)) + "\n"


def test_data_and_scripts_stay_lean():
    files = tracked_files(BENCHMARKS)
    assert len(files) <= 20 and sum(p.stat().st_size for p in files) <= 300 * 1024
    assert len(tracked_files(ROOT / "scripts")) <= 10
    assert not (ROOT / ".coverage").exists() or ".coverage" in (ROOT / ".gitignore").read_text()


def test_the_code_map_names_every_module_sql_file_migration_and_script():
    text = (DOCS / "README.md").read_text(encoding="utf-8")
    files = [*(ROOT / "pgrag").rglob("*.py"), *(ROOT / "sql").glob("*.sql"),
             *(ROOT / "migrations" / "sql").glob("*.sql"), *tracked_files(ROOT / "scripts")]
    names = [p.relative_to(ROOT).as_posix() for p in files if "__pycache__" not in p.parts]
    assert len(names) > 80
    assert [n for n in names if f"`{n}`" not in text] == []


def test_every_script_a_page_names_exists():
    """A script named in the docs or the Makefile exists, unless the page says it
    was removed (`git log -- scripts/NAME`)."""
    missing = []
    for path in [*pages(), ROOT / "Makefile", ROOT / "scripts" / "benchmarks.py"]:
        text = path.read_text(encoding="utf-8")
        for name in set(re.findall(r"scripts/([\w.]+\.(?:py|sh))", text)):
            if not (ROOT / "scripts" / name).exists() and f"git log -- scripts/{name}" not in text:
                missing.append(f"{path.name}: scripts/{name}")
    assert missing == []


FENCE = re.compile(r"^```.*?^```", re.S | re.M)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(path: Path) -> set[str]:
    """GitHub's heading anchors of a Markdown page."""
    out = set()
    for line in FENCE.sub("", path.read_text(encoding="utf-8")).splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", title)))
    return out


def test_every_relative_link_and_anchor_resolves():
    broken = []
    for page in pages():
        for target in LINK.findall(FENCE.sub("", page.read_text(encoding="utf-8"))):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            dest = (page.parent / file).resolve() if file else page
            if not dest.exists():
                broken.append(f"{page.name}: {target}")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert broken == []


def test_every_docs_page_is_reachable_from_an_index():
    linked = set()
    for index in (README, DOCS / "README.md"):
        for target in LINK.findall(index.read_text(encoding="utf-8")):
            linked.add((index.parent / target.partition("#")[0]).resolve())
    assert [p.name for p in DOCS.glob("*.md") if p.name != "README.md" and p.resolve() not in linked] == []
