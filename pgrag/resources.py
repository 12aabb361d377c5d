"""Locate the SQL files and migrations that ship with the package.

In a wheel they are package data (``pgrag/sql``, ``pgrag/migrations``); in an
editable checkout they sit at the top of the repository.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def resource_dir(name: str) -> Path:
    packaged = Path(str(resources.files("pgrag"))) / name
    if packaged.is_dir():
        return packaged
    checkout = Path(__file__).resolve().parent.parent / name
    if checkout.is_dir():
        return checkout
    raise FileNotFoundError(f"pgrag resource folder {name!r} is missing from the installation")


def sql_file(name: str) -> str:
    return (resource_dir("sql") / name).read_text(encoding="utf-8")
