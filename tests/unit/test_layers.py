"""The package's layers point only down (docs/ARCHITECTURE.md): no import cycle,
the connector imports nothing above it, and only config.py reads the environment.

Imports are read from the source (ast), lazy ones inside functions included:
a cycle through a function-level import is still a cycle a reader must untangle."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "pgrag"


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for n in ast.walk(node))
    return skip


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports (outside ``if TYPE_CHECKING``)."""
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _type_checking_nodes(tree)
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    graph[name].add(sub if sub in modules else target)
            elif isinstance(node, ast.Import):
                graph[name].update(a.name for a in node.names)
        graph[name] = {m for m in graph[name] if m in modules and m != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_package_has_no_import_cycle():
    assert cycles(import_graph()) == []


def test_the_cycle_finder_sees_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# Each lower module, and what it must not import (directly): the layers above it.
DOWNWARD = {
    "pgrag.db": {"pgrag.corpus", "pgrag.follow", "pgrag.database", "pgrag.schema", "pgrag.ingest"},
    "pgrag.families": {"pgrag.methods"},
    "pgrag.follow": {"pgrag.corpus", "pgrag.database"},
    **{f"pgrag.ingest{sub}": {"pgrag.db", "pgrag.database", "pgrag.corpus", "pgrag.follow"}
       for sub in ("", ".changes", ".hooks", ".nodes", ".pipeline", ".prepare", ".report", ".write")},
    # A method gets derived data through its Context (ctx.ensure_triples, ctx.require_family).
    **{f"pgrag.methods{sub}": {"pgrag.ingest", "pgrag.families", "pgrag.extract"}
       for sub in ("", ".bm25", ".cirag", ".dense", ".hybrid", ".t2rag", ".threadrag", ".tigrag")},
    "pgrag.graph_files": {"pgrag.postings", "pgrag.graph"},
    "pgrag.sqlscript": {"pgrag.distribute"},
}


def test_lower_layers_do_not_import_upper_ones():
    graph = import_graph()
    upward = {m: sorted(graph[m] & banned) for m, banned in DOWNWARD.items() if graph[m] & banned}
    assert upward == {}


def test_nothing_below_the_tools_imports_the_bench_tooling():
    graph = import_graph()
    tooling = {m for m in graph if m.startswith("pgrag.bench")}
    tools = tooling | {"pgrag.cli", "pgrag.demo", "pgrag.__main__"}
    users = {m: sorted(graph[m] & tooling) for m in graph if m not in tools and graph[m] & tooling}
    assert users == {}


def test_only_config_reads_the_environment():
    readers = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                     if p.name != "config.py" and re.search(r"os\.environ|os\.getenv", p.read_text(encoding="utf-8")))
    assert readers == []


def test_no_module_asks_what_kind_of_connection_it_holds():
    askers = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                    if re.search(r"hasattr\([^)]*cursor", p.read_text(encoding="utf-8")))
    assert askers == []
