"""pgrag imported once in the embedded server's postmaster, so that backends fork with it.

Without this, every new connection's first pgrag call starts PL/Python's
interpreter and imports numpy, scipy and pgrag itself (a first tigrag call of
290 ms on the sample against 70 ms with it, docs/SCALING.md). ``pgrag_preload`` (the C
library built from ``preload.c``, listed in ``shared_preload_libraries``)
starts the interpreter in the postmaster and calls ``in_postmaster``; each
backend then inherits the modules copy-on-write and its first call costs what
its second does.

- ``python -m pgrag.preload`` (run by ``make install``) compiles the library into
  the embedded PostgreSQL; it needs a C compiler and the headers of the Python
  that plpython3.so links. Where it cannot build, it says why, and the server
  runs as before.
- ``configure`` (called by pgrag.server on every start of the embedded server)
  writes ``pgrag_preload.conf`` in the data directory, which postgresql.conf
  includes: the library and where the postmaster imports pgrag from.
  ``PGRAG_PRELOAD=0`` leaves it out. A server you run yourself is untouched.
- A database whose schema owner recorded another pgrag than the preloaded one
  (``pgrag_internal._python_path``), or a backend that finds pgrag's files
  changed since the postmaster imported them, gets its own:
  ``pgrag_internal._py`` drops the preloaded pgrag modules in that backend
  before importing (``current``, ``forget``).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from . import config

LIBRARY = "pgrag_preload"
CONF = "pgrag_preload.conf"
INCLUDE = f"include_if_exists = '{CONF}'"

# What a backend's SQL entry points import (pgrag.inserver's calls, every
# built-in method with what it imports on its first run, the caches, the
# runtime's HTTP client, and mmap, which numpy imports when it maps the shared
# graph files). Not the ingest pipeline, spaCy or the LLM client: those load
# where they are used.
MODULES = ("pgrag.inserver", "pgrag.spi", "pgrag.context", "pgrag.methods", "pgrag.index.cache",
           "pgrag.index.shared_files", "pgrag.index.pagerank", "pgrag.families", "scipy.sparse.csgraph",
           "http.client", "mmap")

# Set in the postmaster by in_postmaster; a backend forked from it sees them.
PRELOADED = False
FINGERPRINT: tuple[int, int] | None = None


def in_postmaster() -> None:
    """Import what backends use; called once by pgrag_preload in the postmaster."""
    import gc
    import importlib

    global PRELOADED, FINGERPRINT
    FINGERPRINT = _fingerprint()   # before the imports: an edit during them counts as a change
    for name in MODULES:
        importlib.import_module(name)
    from . import methods

    methods.registry()   # imports every built-in method's module
    import numpy.random

    # Python's own `random` reseeds in each child (an at-fork handler, run by the
    # library); numpy's global generator does not, and would repeat across backends.
    os.register_at_fork(after_in_child=numpy.random.seed)
    # Objects the collector never visits stay on pages shared with the postmaster.
    gc.freeze()
    PRELOADED = True


def _fingerprint() -> tuple[int, int]:
    """The newest modification time among pgrag's Python files, and their count."""
    times = [p.stat().st_mtime_ns for p in Path(__file__).resolve().parent.rglob("*.py")]
    return max(times), len(times)


def current(paths: list[str]) -> bool:
    """Whether the pgrag preloaded in the postmaster may serve a database that
    records ``paths`` (pgrag_internal._python_path): it lives under one of them
    and its files have not changed since the postmaster imported them (an edit
    or an upgrade takes effect at once, before the server restarts)."""
    if not PRELOADED:
        return True
    here = Path(__file__).resolve().parent
    inside = not paths or any(here.is_relative_to(Path(p).resolve()) for p in paths)
    return inside and FINGERPRINT == _fingerprint()


def forget() -> None:
    """Drop every pgrag module from this backend, so that its next import reads them from disk."""
    for name in [m for m in sys.modules if m == "pgrag" or m.startswith("pgrag.")]:
        del sys.modules[name]


def library_file(root: Path) -> Path:
    return root / "lib" / f"{LIBRARY}.so"


def configure(data_dir: Path, root: Path, python_path: list[str]) -> bool:
    """Write the data directory's ``pgrag_preload.conf`` (and the line of
    postgresql.conf that includes it) for the server's next start; True when
    that changed anything. Empty where the library is not built or
    ``PGRAG_PRELOAD=0``, so that the server starts as it would without it."""
    conf = data_dir / "postgresql.conf"
    if not conf.exists():
        return False
    changed = False
    if INCLUDE not in conf.read_text().splitlines():
        with conf.open("a") as f:
            f.write(f"\n# pgrag: pgrag imported in the postmaster (pgrag/preload.py)\n{INCLUDE}\n")
        changed = True
    lines = ["# written by pgrag on each start of the embedded server (pgrag/preload.py)"]
    if config.preload_enabled() and library_file(root).exists():
        lines += [f"shared_preload_libraries = '{LIBRARY}'",
                  f"pgrag.python_path = '{_quoted(':'.join(python_path))}'"]
    text = "\n".join(lines) + "\n"
    target = data_dir / CONF
    if not target.exists() or target.read_text() != text:
        target.write_text(text)
        changed = True
    return changed


def configured(data_dir: Path) -> bool:
    """Whether the data directory's last start asked for the library
    (``pgrag_preload.conf`` names it)."""
    target = data_dir / CONF
    return target.exists() and f"shared_preload_libraries = '{LIBRARY}'" in target.read_text()


def _quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace("'", "''")


def python_version(root: Path) -> str | None:
    """The Python that the server's plpython3.so links, e.g. '3.11'."""
    so = root / "lib" / "plpython3.so"
    found = re.search(rb"libpython(3\.\d+)", so.read_bytes()) if so.exists() else None
    return found.group(1).decode() if found else None


def _python_include(version: str) -> Path | None:
    for python in (f"python{version}", sys.executable):
        try:
            out = subprocess.run([python, "-c", "import sys, sysconfig; "
                                  "print('%d.%d' % sys.version_info[:2], sysconfig.get_paths()['include'])"],
                                 capture_output=True, text=True, check=True).stdout.split()
        except (OSError, subprocess.CalledProcessError):
            continue
        if out[0] == version and (Path(out[1]) / "Python.h").exists():
            return Path(out[1])
    fallback = Path(f"/usr/include/python{version}")
    return fallback if (fallback / "Python.h").exists() else None


def build(root: Path, *, quiet: bool = False) -> bool:
    """Compile ``preload.c`` into ``root/lib``; False, with the reason on
    stderr, where this machine cannot (the server then runs without it)."""
    version = python_version(root)
    if version is None:
        return _cannot("the embedded server has no plpython3u (python -m pgrag.plpython)")
    if tuple(int(n) for n in version.split(".")) >= (3, 12):
        return _cannot(f"its plpython3.so links Python {version}, where PL/Python's registering of plpy "
                       "after this library has started Python is a fatal error (preload.c)")
    include = _python_include(version)
    if include is None:
        return _cannot(f"no headers for Python {version} (Debian: apt-get install libpython{version}-dev)")
    server_include = subprocess.run([str(root / "bin" / "pg_config"), "--includedir-server"],
                                    capture_output=True, text=True, check=True).stdout.strip()
    target = library_file(root)
    # Written beside the target and renamed over it: a server never maps a half-written file.
    with tempfile.NamedTemporaryFile(dir=target.parent, prefix=f".{LIBRARY}-", suffix=".so", delete=False) as tmp:
        partial = Path(tmp.name)
    cmd = [config.c_compiler(), "-O2", "-fPIC", "-shared", "-Wall", f"-I{server_include}", f"-I{include}",
           str(Path(__file__).with_name("preload.c")), "-o", str(partial), f"-lpython{version}"]
    try:
        result = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        return _cannot(f"no C compiler ({exc})")
    if result.returncode != 0:
        partial.unlink(missing_ok=True)
        return _cannot(f"the C compiler failed:\n{result.stderr.strip()[-1500:]}")
    partial.chmod(0o755)
    partial.replace(target)
    if not quiet:
        print(f"pgrag: {target.name} built into {target.parent} (Python {version}); "
              "the embedded server imports pgrag in its postmaster from its next start")
    return True


def _cannot(reason: str) -> bool:
    print(f"pgrag: {LIBRARY} not built: {reason}. The server runs without it: each backend "
          "imports pgrag on its first call.", file=sys.stderr)
    return False


def main() -> None:
    from .plpython import pginstall

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say whether it is built")
    args = parser.parse_args()
    root = pginstall()
    if args.check:
        ok = library_file(root).exists()
        print("built" if ok else "not built")
    else:
        ok = build(root)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
