"""The install line works: the sdist builds, a wheel built from that sdist
installs into a fresh virtual environment (CPU PyTorch first, as README says),
and from there pgrag creates its database, ingests the bundled sample and
answers a multi-hop question from SQL, with the in-server runtime importing the
installed package, not this checkout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.serving import ROOT

USE = """
import json, pgrag
from pgrag.demo import SAMPLE_CORPUS, sample_documents
db = pgrag.connect()
try:
    db.corpus(SAMPLE_CORPUS).ingest(sample_documents(), progress=False)
    with db.transaction() as conn:
        runtime = conn.execute("SELECT pgrag.runtime()").fetchone()[0]
        paths = conn.execute("SELECT pgrag_internal._python_path()").fetchone()[0]
        titles = [r[0] for r in conn.execute("SELECT title FROM pgrag.retrieve(%s, %s, 'tigrag', 3)",
                                             (SAMPLE_CORPUS, "When did Lothair II's mother die?"))]
    print(json.dumps({"package": pgrag.__file__, "runtime": runtime, "paths": paths, "titles": titles}))
finally:
    db.close()
"""


def run(*args: str | Path, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, env=env, cwd=cwd, timeout=900)
    assert done.returncode == 0, f"{args}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done.stdout


def clean_env(data: Path) -> dict[str, str]:
    """This process's environment without this checkout or its settings: the
    installed package alone, with an embedded server of its own."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME") and not k.startswith("PGRAG_")}
    return {**env, "XDG_DATA_HOME": str(data)}


@pytest.mark.slow   # a 2 GB environment: a few minutes from pip's cache
def test_the_wheel_built_from_the_sdist_installs_and_answers_from_sql(tmp_path):
    dist = tmp_path / "dist"
    run(sys.executable, "-m", "hatchling", "build", "-t", "sdist", "-d", dist, cwd=ROOT)
    [sdist] = dist.glob("pgrag_multihop-*.tar.gz")
    members = tarfile.open(sdist).getnames()
    assert any(m.endswith("/sql/20_index.sql") for m in members) and not any("/.venv/" in m for m in members)
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", dist, sdist)
    [wheel] = dist.glob("pgrag_multihop-*.whl")

    venv, data = tmp_path / "venv", tmp_path / "data"
    env = clean_env(data)
    try:
        run(sys.executable, "-m", "venv", venv, env=env)
        python = venv / "bin" / "python"
        run(python, "-m", "pip", "install", "-q", "torch==2.13.0", env=env)
        run(python, "-m", "pip", "install", "-q", wheel, env=env)
        cuda = run(python, "-c", "import torch; print(torch.version.cuda)", env=env).strip()
        installed = run(python, "-m", "pip", "list", "--format=json", env=env)
        assert cuda == "None" and not [p for p in json.loads(installed) if p["name"].startswith("nvidia")]

        # from elsewhere than the checkout, whose pgrag/ "python -c" would import first
        run(python, "-m", "pgrag.plpython", env=env, cwd=tmp_path)   # PL/Python into the installed server
        found = json.loads(run(python, "-c", USE, env=env, cwd=tmp_path).strip().splitlines()[-1])
        assert Path(found["package"]).is_relative_to(venv)
        assert found["runtime"] == "plpython3u" and all(Path(p).is_relative_to(venv) for p in found["paths"])
        assert found["titles"][:2] == ["Lothair II", "Ermengarde of Tours"]
    finally:
        if (venv / "bin" / "python").exists():
            subprocess.run([str(venv / "bin" / "python"), "-m", "pgrag", "server", "stop"], env=env,
                           cwd=tmp_path, capture_output=True, timeout=120)
        shutil.rmtree(venv, ignore_errors=True)
