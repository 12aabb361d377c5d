"""The package's layers point only down (docs/ARCHITECTURE.md): no import cycle,
the connector imports nothing above it, the ranking index (pgrag/index/) stands
on the base alone and is layered inside, no module uses another's private
names, and only config.py reads the environment.

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


def _package(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _source(node: ast.ImportFrom, package: str) -> str:
    """The module a ``from ... import`` reads from, its dots resolved against ``package``."""
    if not node.level:
        return node.module or ""
    base = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports (outside ``if TYPE_CHECKING``)."""
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        package = _package(name, path)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _type_checking_nodes(tree)
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.ImportFrom):
                target = _source(node, package)
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
    "pgrag.index.shared_files": {"pgrag.index.postings", "pgrag.index.graph", "pgrag.index.cache"},
    "pgrag.sqlscript": {"pgrag.distribute"},
}


def test_lower_layers_do_not_import_upper_ones():
    graph = import_graph()
    upward = {m: sorted(graph[m] & banned) for m, banned in DOWNWARD.items() if graph[m] & banned}
    assert upward == {}


# The ranking index in layers, lowest first: a module imports only from layers
# below its own. The files store knows nothing of what it stores; the cache,
# which puts everything together, sits on top.
INDEX_LAYERS = [
    {"pgrag.index.sweep", "pgrag.index.terms", "pgrag.index.energy", "pgrag.index.shared_files"},
    {"pgrag.index.graph", "pgrag.index.vectors"},
    {"pgrag.index.pagerank", "pgrag.index.postings"},
    {"pgrag.index.delta"},
    {"pgrag.index.cache"},
]
# What the index may import from the rest of the package: the base, nothing that
# knows of corpora, methods or connections (it reads through a QueryRunner it is given).
INDEX_BASE = {"pgrag.config", "pgrag.exceptions", "pgrag.queries"}


def test_the_index_is_layered_and_stands_on_the_base_alone():
    graph = import_graph()
    index = {m for m in graph if m.startswith("pgrag.index.")}
    assert index == set().union(*INDEX_LAYERS)
    level = {m: i for i, layer in enumerate(INDEX_LAYERS) for m in layer}
    upward = {m: sorted(t for t in graph[m] & index if level[t] >= level[m]) for m in sorted(index)}
    assert {m: t for m, t in upward.items() if t} == {}
    outside = {m: sorted(t for t in graph[m] - index - {"pgrag.index"} if t not in INDEX_BASE) for m in sorted(index)}
    assert {m: t for m, t in outside.items() if t} == {}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_uses(name: str, package: str, source: str, modules: set[str]) -> list[str]:
    """Where module ``name`` uses another package module's private name: ``from
    m import _x``, or ``m._x`` on a module ``m`` it imported (``import m as a``,
    ``from p import m``). Each as "name: m._x". A module's privates are its own;
    a name that must be shared gets a public one."""
    tree = ast.parse(source)
    bound: dict[str, str] = {}        # local name -> the package module it is
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            target = _source(node, package)
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if sub in modules:
                    bound[alias.asname or alias.name] = sub
                if _private(alias.name) and target in modules and target != name:
                    found.append(f"{name}: {target}.{alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:   # ``import a.b`` binds ``a``; ``import a.b as c`` binds c to a.b
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:
                    bound[alias.name.split(".")[0]] = alias.name.split(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            head, _, rest = ast.unparse(node.value).partition(".")
            if head in bound:
                owner = ".".join([bound[head], rest]) if rest else bound[head]
                if owner in modules and owner != name:
                    found.append(f"{name}: {owner}.{node.attr}")
    return found


def test_no_module_uses_another_modules_private_names():
    modules = _modules()
    found = [use for name, path in sorted(modules.items())
             for use in private_uses(name, _package(name, path), path.read_text(encoding="utf-8"), set(modules))]
    assert found == []


def test_the_private_name_finder_sees_both_kinds():
    modules = {"pgrag", "pgrag.a", "pgrag.b", "pgrag.sub", "pgrag.sub.c"}
    source = """
from .a import _hidden, shown
from . import b
from .sub import c as see
import pgrag.a
from ..x import _not_ours


def f():
    return b._inner() + see._deep + pgrag.a._again + b.shown + see.__doc__
"""
    assert sorted(private_uses("pgrag.d", "pgrag", source, modules)) == [
        "pgrag.d: pgrag.a._again", "pgrag.d: pgrag.a._hidden", "pgrag.d: pgrag.b._inner",
        "pgrag.d: pgrag.sub.c._deep"]
    assert private_uses("pgrag.a", "pgrag", "from . import a\nfrom .a import _mine\na._mine", modules) == []


def test_nothing_below_the_tools_imports_the_bench_tooling():
    graph = import_graph()
    tooling = {m for m in graph if m.startswith("pgrag.bench")}
    cli = {m for m in graph if m == "pgrag.cli" or m.startswith("pgrag.cli.")}
    tools = tooling | cli | {"pgrag.demo", "pgrag.__main__"}
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
