"""The option checker (MethodSpec.configure, pgrag.methods.spec): each method's options by their
settings' types and declared ranges, with a bounded message naming the method,
the option and what it takes."""

from __future__ import annotations

import dataclasses
import json
import typing
from pathlib import Path
from typing import Any

import pytest

from pgrag import OptionError, methods
from pgrag.exceptions import InputError, by_sqlstate
from pgrag.methods.spec import MAX_INTEGER, Range, apply, takes

SETTINGS = {name: methods.get(name).settings for name in ("tigrag", "threadrag", "cirag", "t2rag")}


def _refused(method: str, options: dict[str, Any]) -> str:
    with pytest.raises(OptionError) as caught:
        methods.get(method).configure(options)
    message = str(caught.value)
    assert len(message) < 300, message
    assert "Error" not in message and "Traceback" not in message, message
    return message


def test_option_error_is_an_input_error_with_its_own_sqlstate():
    assert issubclass(OptionError, InputError) and OptionError.sqlstate == "PR008"
    assert by_sqlstate("PR008") is OptionError


@pytest.mark.parametrize(("method", "options", "message"), [
    ("tigrag", {"hops": 1.5}, "tigrag option 'hops' takes an integer of at least 1, not 1.5"),
    ("tigrag", {"hops": True}, "tigrag option 'hops' takes an integer of at least 1, not true"),
    ("tigrag", {"hops": 0}, "tigrag option 'hops' takes an integer of at least 1, not 0"),
    ("tigrag", {"hops": "3"}, "tigrag option 'hops' takes an integer of at least 1, not \"3\""),
    ("tigrag", {"hops": 10 ** 12}, "(and at most 1,000,000,000), not 1000000000000"),
    ("tigrag", {"damping": 2}, "tigrag option 'damping' takes a number in (0, 1), not 2"),
    ("tigrag", {"damping": 1}, "tigrag option 'damping' takes a number in (0, 1), not 1"),
    ("tigrag", {"damping": "x"}, "tigrag option 'damping' takes a number in (0, 1), not \"x\""),
    ("tigrag", {"damping": float("nan")}, "takes a number in (0, 1), not nan"),
    ("tigrag", {"threshold": 0}, "tigrag option 'threshold' takes a number in (0, 1], not 0"),
    ("tigrag", {"tolerance": 0}, "tigrag option 'tolerance' takes a number above 0, not 0"),
    ("tigrag", {"graph_weight": float("inf")}, "takes a number of at least 0 (and at most 1e+09), not inf"),
    ("tigrag", {"max_pool": []}, "tigrag option 'max_pool' takes an integer of at least 1, not a list"),
    ("tigrag", {"rerank": "no"}, "tigrag option 'rerank' takes true or false, not \"no\""),
    ("tigrag", {"rerank": 0}, "tigrag option 'rerank' takes true or false, not 0"),
    ("tigrag", {"ppr": "fast"}, "tigrag option 'ppr' takes one of \"push\", \"power\", not \"fast\""),
    ("tigrag", {"entity_labels": "PERSON"}, "takes a list of strings or null, not \"PERSON\""),
    ("tigrag", {"entity_labels": ["PERSON", 3]}, "takes a list of strings or null, not a list"),
    ("threadrag", {"depth": "x"}, "threadrag option 'depth' takes an integer of at least 1, not \"x\""),
    ("threadrag", {"entity_labels": None}, "takes a list of strings, not null"),
    ("threadrag", {"semantic_threshold": 1.5}, "takes a number in [-1, 1], not 1.5"),
    ("threadrag", {"lexical_saturation": 0}, "takes an integer of at least 1, not 0"),
    ("threadrag", {"local_weight": 0}, "threadrag option 'local_weight' takes a number of at least 1e-06, not 0"),
    ("threadrag", {"steps": 10 ** 9}, "threadrag option 'steps' takes an integer in [0, 1000], not 1000000000"),
    ("threadrag", {"entity_documents": 1001}, "takes an integer in [0, 1000], not 1001"),
    ("cirag", {"extractor": "regex"}, "cirag option 'extractor' takes one of \"spacy\", \"llm\" or null"),
    ("cirag", {"fusion": None}, "cirag option 'fusion' takes true or false, not null"),
    ("t2rag", {"passages": "yes"}, "t2rag option 'passages' takes true or false, not \"yes\""),
])
def test_a_bad_value_names_the_method_the_option_and_what_it_takes(method, options, message):
    assert message in _refused(method, options)


def test_unknown_options_are_named_bounded_and_the_likeliest_one_suggested():
    assert "does not take option(s) 'gama' (did you mean 'gamma'?" in _refused("tigrag", {"gama": 3})
    assert "(settings: unique_chunks, max_rounds" in _refused("t2rag", {"rounds": 3})
    assert "'dense' does not take option(s) 'hops' (it takes none)" in _refused("dense", {"hops": 2})
    message = _refused("tigrag", {"k" * 10_000_000: 1, **{f"x{i}": i for i in range(1000)}})
    assert "and 998 more" in message


def test_a_long_value_is_echoed_shortened():
    message = _refused("tigrag", {"ppr": "p" * 10_000_000})
    assert '"ppppp' in message and "…" in message


def test_good_values_are_converted_to_the_fields_type():
    tigrag = methods.get("tigrag").configure({"graph_weight": 1, "hops": 2.0, "entity_labels": ["PERSON"],
                                              "rerank": False})
    assert (tigrag.graph_weight, tigrag.hops, tigrag.entity_labels, tigrag.rerank) == (1.0, 2, ("PERSON",), False)
    assert type(tigrag.graph_weight) is float and type(tigrag.hops) is int
    assert methods.get("tigrag").configure({"entity_labels": None}).entity_labels is None
    assert methods.get("cirag").configure({"extractor": None}).extractor is None
    assert methods.get("tigrag").configure({"hops": MAX_INTEGER}).hops == MAX_INTEGER


def test_the_rules_across_options_still_hold():
    # Every value in range, but __post_init__'s own check is still the settings' last word.
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Pair:
        low: int = 1
        high: int = 2

        def __post_init__(self) -> None:
            if self.low > self.high:
                raise ValueError("low must not exceed high")

    with pytest.raises(OptionError, match="bad mine option: low must not exceed high"):
        apply("mine", Pair(), {"low": 3})


def test_every_builtin_option_has_a_checked_type_and_every_default_is_in_range():
    """A new option of a type the checker does not know would go unchecked, and a
    default outside its declared range would refuse the method's own defaults."""
    from pgrag.methods import spec as options

    for spec in methods.registry().values():
        if spec.settings is None:
            continue
        hints = typing.get_type_hints(type(spec.settings))
        ranges = type(spec.settings).RANGES
        assert set(ranges) <= {f.name for f in dataclasses.fields(spec.settings)}, spec.name
        for field in dataclasses.fields(spec.settings):
            nullable, kind = options._nullable(hints[field.name])
            assert kind in options._CONVERT, (spec.name, field.name)
            if kind in (int, float):
                assert field.name in ranges, (spec.name, field.name)   # every number says where it lies
            default = getattr(spec.settings, field.name)
            assert options.checked(spec.name, field.name, hints[field.name], ranges.get(field.name),
                                   list(default) if isinstance(default, tuple) else default) == default


def test_ranges_in_words():
    assert Range(0, 1, low_open=True, high_open=True).words() == "in (0, 1)"
    assert Range(0, 1, low_open=True).words() == "in (0, 1]"
    assert Range(1).words() == "of at least 1"
    assert Range(0, low_open=True).words() == "above 0"
    assert Range(1e-4).words() == "of at least 0.0001"
    assert takes(int, None) == "an integer" and takes(bool, None, nullable=True) == "true or false or null"


def test_docs_settings_list_every_option_with_what_it_takes_and_its_default():
    text = (Path(__file__).resolve().parents[2] / "docs" / "settings.md").read_text(encoding="utf-8")
    for name in SETTINGS:
        section = text.split(f"\n### {name}\n", 1)[1].split("\n### ", 1)[0]
        for option, words, default in methods.get(name).described():
            shown = json.dumps(list(default) if isinstance(default, tuple) else default)
            assert f"| `{option}` | {words} | `{shown}` |" in section, (name, option)


def test_an_applications_settings_with_unresolvable_annotations_still_configure():
    # "Missing" exists only for its type checker: get_type_hints cannot resolve it.
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Mine:
        size: int = 1
        model: "Missing | None" = None  # type: ignore[name-defined]  # noqa: F821

    assert apply("mine", Mine(), {"size": 2}).size == 2
