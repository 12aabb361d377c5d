"""HTML and SVG from the templates in pgrag/ui/templates (Jinja2, autoescaping on
for every template: a document body of ``<script>`` shows as text)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from .explain import Layer, MethodView

COLUMN = 200    # a layer's width in the picture, px
GAP = 44        # between layers
BOX = 24        # an item's height
STEP = 32       # from one item to the next
TOP = 34        # room for the layer labels
CHARS = 27      # characters shown in a box (the whole text is its tooltip)


@lru_cache(maxsize=1)
def environment() -> Any:
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("pgrag.ui", "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True)
    env.globals["picture"] = picture
    return env


@lru_cache(maxsize=1)
def stylesheet() -> str:
    return (resources.files("pgrag.ui") / "static" / "style.css").read_text(encoding="utf-8")


@dataclass(frozen=True)
class Box:
    x: int
    y: int
    text: str
    full: str


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    x: int
    hop: int | None
    boxes: list[Box]


@dataclass(frozen=True)
class Picture:
    width: int
    height: int
    columns: list[Column]
    edges: list[tuple[int, int, int, int]]
    box_width: int = COLUMN
    box_height: int = BOX


def picture(layers: list[Layer]) -> Picture:
    """Where each layer and item goes, and the lines from one layer to the next."""
    columns = []
    for i, layer in enumerate(layers):
        x = 10 + i * (COLUMN + GAP)
        boxes = [Box(x=x, y=TOP + j * STEP, full=item,
                     text=item if len(item) <= CHARS else item[:CHARS - 1] + "\u2026")
                 for j, item in enumerate(layer.items)]
        columns.append(Column(key=layer.key, label=layer.label, x=x, hop=layer.hop, boxes=boxes))
    edges = []
    for a, b in zip(columns, columns[1:]):
        pairs = ([(p, q) for p in a.boxes for q in b.boxes] if len(a.boxes) * len(b.boxes) <= 24
                 else [(a.boxes[min(j, len(a.boxes) - 1)], q) for j, q in enumerate(b.boxes)] if a.boxes else [])
        edges += [(p.x + COLUMN, p.y + BOX // 2, q.x, q.y + BOX // 2) for p, q in pairs]
    rows = max((len(c.boxes) for c in columns), default=1)
    return Picture(width=20 + len(columns) * (COLUMN + GAP) - GAP, height=TOP + rows * STEP + 6,
                   columns=columns, edges=edges)


def _render(template: str, **context: Any) -> str:
    return environment().get_template(template).render(css=stylesheet(), **context)


def page(*, corpora: list[str], methods: list[str], chosen: list[str], corpus: str | None, question: str,
         k: int, views: list[MethodView], filter: str = "") -> str:
    """The page: the form, then each method's hits side by side, then their pictures."""
    return _render("page.html", corpora=corpora, methods=methods, chosen=chosen, corpus=corpus,
                   question=question, k=k, views=views, filter=filter)


def standalone(view: MethodView, corpus: str) -> str:
    """One method's hits and picture as a self-contained HTML file (pgrag explain --html)."""
    return _render("explain.html", view=view, corpus=corpus)


def error(message: str, status: int) -> str:
    return _render("error.html", message=message, status=status)
