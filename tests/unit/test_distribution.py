"""What users install and read first: the distribution name on PyPI (the import
package stays ``pgrag``), the install line in README, and the bundled sample's
questions as the demo prints them."""

from __future__ import annotations

import tomllib
from pathlib import Path

from pgrag.demo import sample_documents, sample_questions

ROOT = Path(__file__).resolve().parents[2]
DISTRIBUTION = "pgrag-multihop"


def test_distribution_name_is_the_free_one_and_readme_installs_it():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    # `pgrag` on PyPI is an unrelated project: pip install pgrag would install someone else's code.
    assert project["project"]["name"] == DISTRIBUTION
    assert project["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"] == ["pgrag"]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"pip install {DISTRIBUTION}" in readme
    assert "pip install pgrag\n" not in readme and "pip install pgrag " not in readme


def test_sample_questions_spell_titles_as_the_titles_do():
    """The demo prints these questions verbatim: "Lothair II", not the dataset's "Lothair Ii"."""
    titles = {d["title"] for d in sample_documents()}
    questions = sample_questions()
    assert questions[0]["question"] == "When did Lothair II's mother die?"
    for q in questions:
        for title in q["supporting_titles"]:
            assert title in titles
            if title.lower() in q["question"].lower():
                assert title in q["question"], (title, q["question"])
