"""The wheel ships the SQL, the migrations and the sample data; the code type-checks and lints clean."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_wheel_contains_sql_migrations_and_data(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path),
         str(ROOT)],
        check=True, capture_output=True)
    [wheel] = tmp_path.glob("pgrag_multihop-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {
        "pgrag/sql/00_search_path.sql", "pgrag/sql/20_index.sql", "pgrag/sql/80_runtime_missing.sql",
        "pgrag/sql/queries_retrieval.sql", "pgrag/sql/distribute.sql",
        "pgrag/migrations/env.py", "pgrag/migrations/versions/0001_core_schema.py",
        "pgrag/migrations/sql/0001_core_schema.sql",
        "pgrag/data/sample_corpus.json", "pgrag/data/sample_questions.jsonl", "pgrag/data/ATTRIBUTION.md",
        "pgrag/py.typed",
        "pgrag/ui/templates/page.html", "pgrag/ui/templates/macros.html", "pgrag/ui/static/style.css",
    }
    assert expected <= names, expected - names
    assert not any(n.startswith("tests/") for n in names)


@pytest.mark.slow  # a cold mypy run over the package takes minutes on two cores
def test_mypy_passes():
    result = subprocess.run([sys.executable, "-m", "mypy", "pgrag"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_passes():
    """ruff (pyproject.toml's [tool.ruff]) finds nothing in the package, the tests, the scripts or the
    examples; seconds, so fast."""
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "pgrag", "tests", "scripts", "examples"],
                            cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
