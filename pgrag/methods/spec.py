"""What a retrieval method is: a ``MethodSpec`` (see ``pgrag.methods``), and how
its options are checked.

A method's settings are a frozen dataclass (``MethodSpec.settings``); each field
is an option. ``MethodSpec.configure`` checks every option a caller gives by the
field's type (``typing.get_type_hints``) and by its range, declared beside the
settings in a ``RANGES`` class variable (a ``Range`` for a number, the allowed
words for a string), and raises an ``OptionError`` naming the method, the option
and what it takes. Options come as JSON from SQL, so the types are JSON's: a
bool takes only true or false, an int an integer (not true, not 1.5), a float
any finite number, a ``tuple[str, ...]`` a list of strings. Only then does the
dataclass's own ``__post_init__`` run, for the rules that tie options together.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union

from ..exceptions import OptionError, echoed, quoted

if TYPE_CHECKING:
    from ..context import Context
    from ..results import Hits

Run = Callable[["Context", str, int, Any], "Hits"]   # (ctx, question, k, settings) -> Hits


@dataclass(frozen=True, kw_only=True)
class MethodSpec:
    """One registered method."""

    name: str
    run: Run
    settings: Any = None            # default settings (a frozen dataclass instance); None: no options
    needs_triples: bool = False     # retrieves triples/propositions (the corpus must have them)
    takes_llm: bool = False         # uses ``ctx.llm`` when there is one
    answers: bool = False           # returns an answer (``Hits.answer``), not only hits
    family: str | None = None       # stored data it needs that a corpus keeps only when asked (pgrag.families)
    filters: bool = False           # finds only inside ``ctx.scope``, a metadata filter's documents

    def options(self) -> list[str]:
        return [f.name for f in dataclasses.fields(self.settings)] if self.settings is not None else []

    def described(self) -> list[tuple[str, str, Any]]:
        """Each option: its name, what it takes in words, its default (docs/settings.md lists them)."""
        if self.settings is None:
            return []
        hints = _hints(type(self.settings))
        ranges: Mapping[str, Allowed] = getattr(type(self.settings), "RANGES", {})
        rows = []
        for field in dataclasses.fields(self.settings):
            nullable, kind = _nullable(hints.get(field.name))
            rows.append((field.name, takes(kind, ranges.get(field.name), nullable), getattr(self.settings, field.name)))
        return rows

    def configure(self, options: Mapping[str, Any]) -> Any:
        """The settings with ``options`` applied, each checked by its type and range
        (see this module's docstring); an ``OptionError`` naming a bad one."""
        if not options:
            return self.settings
        if self.settings is None:
            raise OptionError(unknown_message(self.name, list(options), []))
        return apply(self.name, self.settings, options)


# -- options ---------------------------------------------------------------------

# Beyond these the options are no longer counts or weights but numbers numpy's
# fixed-size integers and a loop's patience were never meant for.
MAX_INTEGER = 1_000_000_000
MAX_NUMBER = 1e9
MAX_ITEMS = 1_000          # items in a list option
MAX_CHARS = 200            # characters in a string option or a list option's item


@dataclass(frozen=True)
class Range:
    """Where a number option lies: from ``low`` to ``high`` (None: unbounded
    there; the MAX_ bounds above still hold), each end included unless open."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def holds(self, value: float) -> bool:
        above = self.low is None or (value > self.low if self.low_open else value >= self.low)
        below = self.high is None or (value < self.high if self.high_open else value <= self.high)
        return above and below

    def words(self) -> str:
        if self.low is not None and self.high is not None:
            return (f"in {'(' if self.low_open else '['}{_number(self.low)}, "
                    f"{_number(self.high)}{')' if self.high_open else ']'}")
        if self.low is not None:
            return f"{'above' if self.low_open else 'of at least'} {_number(self.low)}"
        if self.high is not None:
            return f"{'below' if self.high_open else 'of at most'} {_number(self.high)}"
        return ""


AT_LEAST_0 = Range(0)
AT_LEAST_1 = Range(1)
ABOVE_0 = Range(0, low_open=True)
UNIT = Range(0, 1)                                       # [0, 1]
Allowed = Range | tuple[str, ...]                        # a number's range, or a string's words


def apply(method: str, settings: Any, options: Mapping[str, Any]) -> Any:
    """``settings`` (a frozen dataclass) with ``options`` checked and applied; an
    ``OptionError`` for an option it does not have or a value it cannot take."""
    names = [f.name for f in dataclasses.fields(settings)]
    unknown = [key for key in options if key not in names]
    if unknown:
        raise OptionError(unknown_message(method, unknown, names))
    hints = _hints(type(settings))
    ranges: Mapping[str, Allowed] = getattr(type(settings), "RANGES", {})
    values = {name: checked(method, name, hints.get(name), ranges.get(name), value) for name, value in options.items()}
    try:
        return dataclasses.replace(settings, **values)
    except (TypeError, ValueError) as exc:   # __post_init__'s rules across options
        raise OptionError(f"bad {method} option: {str(exc)[:200]}") from None


def unknown_message(method: str, unknown: list[Any], names: list[str]) -> str:
    """"method 'x' does not take option(s) ...", with the likeliest meant option,
    bounded however many and however long the unknown keys are."""
    given = ", ".join(quoted(str(k)) for k in unknown[:3])
    if len(unknown) > 3:
        given += f" and {len(unknown) - 3} more"
    listing = ", ".join(names)
    if not names:
        listing = "it takes none"
    elif len(listing) > 120:
        close = difflib.get_close_matches(str(unknown[0])[:MAX_CHARS], names, n=1)
        listing = (f"did you mean {close[0]!r}? " if close else "") + f"its {len(names)} options: docs/settings.md"
    else:
        listing = f"settings: {listing}"
    return f"method {method!r} does not take option(s) {given} ({listing})"


def checked(method: str, name: str, hint: Any, allowed: Allowed | None, value: Any) -> Any:
    """``value`` as option ``name`` of type ``hint`` holds it (an int for a float
    becomes a float, a list a tuple); an ``OptionError`` saying what it takes."""
    nullable, kind = _nullable(hint)
    if value is None and nullable:
        return None
    convert = _CONVERT.get(kind)
    if convert is None:   # a type this checker does not know (an application's own): __post_init__ judges
        return value
    result = convert(value)
    if result is _BAD or not _within(kind, allowed, result):
        words = takes(kind, allowed, nullable)
        unbounded = not isinstance(allowed, Range) or allowed.high is None
        if kind in (int, float) and unbounded and _beyond(value, MAX_INTEGER if kind is int else MAX_NUMBER):
            words += f" (and at most {MAX_INTEGER:,})" if kind is int else f" (and at most {MAX_NUMBER:g})"
        raise OptionError(f"{method} option {name!r} takes {words}, not {echoed(value)}")
    return result


def takes(kind: Any, allowed: Allowed | None, nullable: bool = False) -> str:
    """What an option of type ``kind`` and range ``allowed`` takes, in words."""
    if isinstance(allowed, tuple):
        words = "one of " + ", ".join(f'"{a}"' for a in allowed)
    elif kind in (int, float):
        bound = (allowed or Range()).words()
        words = ("an integer" if kind is int else "a number") + (f" {bound}" if bound else "")
    else:
        words = _WORDS.get(kind, getattr(kind, "__name__", str(kind)))
    return words + (" or null" if nullable else "")


# -- option types -------------------------------------------------------------------------

_BAD = object()
_STRINGS = tuple[str, ...]


def _hints(settings: type) -> dict[str, Any]:
    """The settings' field types; none for an application's settings whose
    annotations name what only its type checker imports (its options then go
    unchecked here, to its own __post_init__)."""
    try:
        return typing.get_type_hints(settings)
    except (NameError, TypeError):
        return {}


def _nullable(hint: Any) -> tuple[bool, Any]:
    """(whether None is allowed, the type without None)."""
    if typing.get_origin(hint) in (Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return len(args) < len(typing.get_args(hint)), args[0]
    return False, hint


def _as_bool(value: Any) -> Any:
    return value if isinstance(value, bool) else _BAD


def _as_int(value: Any) -> Any:
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)   # JSON has one number type: 3.0 is the integer 3
    if isinstance(value, bool) or not isinstance(value, int) or abs(value) > MAX_INTEGER:
        return _BAD
    return value


def _as_float(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or abs(value) > MAX_NUMBER:
        return _BAD
    number = float(value)
    return number if math.isfinite(number) else _BAD


def _as_str(value: Any) -> Any:
    return value if isinstance(value, str) and len(value) <= MAX_CHARS else _BAD


def _as_strings(value: Any) -> Any:
    if not isinstance(value, (list, tuple)) or len(value) > MAX_ITEMS:
        return _BAD
    if not all(isinstance(v, str) and len(v) <= MAX_CHARS for v in value):
        return _BAD
    return tuple(value)


_CONVERT: dict[Any, Callable[[Any], Any]] = {bool: _as_bool, int: _as_int, float: _as_float, str: _as_str,
                                             _STRINGS: _as_strings}
_WORDS = {bool: "true or false", str: "a string", _STRINGS: "a list of strings"}


def _beyond(value: Any, cap: float) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) > cap   # nan is not


def _within(kind: Any, allowed: Allowed | None, value: Any) -> bool:
    if isinstance(allowed, tuple):
        return value in allowed
    if isinstance(allowed, Range) and kind in (int, float):
        return allowed.holds(value)
    return True


def _number(bound: float) -> str:
    return f"{bound:g}" if isinstance(bound, float) else str(bound)
