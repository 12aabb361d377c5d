"""One copy per machine of a corpus's token graph and postings matrix.

Loading them from the database costs a COPY of every edge and posting and their
arrays cost memory in every process that queries (a client, each server backend,
each ``pgrag bench load`` client). So the arrays of one graph version are written
once as ``.npy`` files, and every process maps them read-only: the page cache
holds one copy, and a process's own memory grows only by the pages it touches.

Layout: ``$PGRAG_GRAPH_DIR`` (default ``<tempdir>/pgrag-graphs``) holds one folder
per OS user (``uid-<n>``); a version is a folder ``<corpus key>-v<version>``
written under a temporary name and renamed into place, so a reader sees all of
a version or none of it. The corpus key names the database (name, oid, port) and
the corpus (id, creation time), so two databases never share a folder.

Trust: a process maps only folders of its own OS user or of root, each owned by
that user and writable by nobody else (the ssh rule), under a shared folder that
is sticky like /tmp (or not writable by others). So another local user cannot
plant a graph (``np.load`` never unpickles, so a bad file could only give wrong
rankings, but it cannot be put there); the shared folder's owner could at most
remove a user's folder, which makes that user read the database again. A server backend (the server's
OS user) and a client running as root share root's copy; otherwise each OS user
keeps its own copy, still one per user instead of one per process.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import uuid
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..config import graph_dir_setting

if TYPE_CHECKING:
    from ..context import QueryRunner

# A version's arrays by name: what pgrag.index.cache makes of a graph and its postings.
Arrays = dict[str, np.ndarray]

GRAPH_ARRAYS = ("token_ids", "terms", "sorted_terms", "order", "degree", "w_data", "w_indices", "w_indptr")
POSTINGS_ARRAYS = ("chunk_ids", "tf_data", "tf_indices", "tf_indptr", "lengths", "documents", "df", "vector_ids",
                   "vectors")
# Part of every folder's name: a version written by an older pgrag, with other
# arrays, is never mistaken for one this code can map.
FORMAT = 6


def root() -> Path | None:
    """The shared folder, or None when ``PGRAG_GRAPH_DIR`` is set to ``off``."""
    configured = graph_dir_setting()
    if configured.lower() == "off":
        return None
    return Path(configured) if configured else Path(tempfile.gettempdir()) / "pgrag-graphs"


def corpus_key(db: "QueryRunner", corpus_id: int) -> str | None:
    """The folder name's stem, or None when this role cannot see the corpus row."""
    row = db.fetchone("graph_file_key", {"corpus_id": corpus_id})
    if row is None:
        return None
    name, oid, port, created = row
    safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in str(name))[:60]
    return f"{safe}-{oid}-{port}-{corpus_id}-{created}-f{FORMAT}"


def _safe_dir(path: Path, owner: int) -> bool:
    """A real folder owned by ``owner`` that no one else can write to."""
    try:
        info = path.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == owner and not info.st_mode & 0o022


def _safe_root(path: Path) -> bool:
    """A real folder that others cannot write to, or sticky like /tmp (then nobody
    but its owner can remove a user's folder, and none can replace its contents:
    those are checked per user)."""
    try:
        info = path.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and (not info.st_mode & 0o002 or bool(info.st_mode & stat.S_ISVTX))


def _owners() -> list[int]:
    me = os.geteuid()
    return [me] if me == 0 else [me, 0]


def load(db: "QueryRunner", corpus_id: int, version: int,
         latest: bool = False) -> tuple[int, Arrays] | None:
    """The arrays of ``version`` (with ``latest``, of the newest version before
    it: the caller applies the delta), mapped from a trusted folder, with their
    version; or None."""
    base = root()
    if base is None or not _safe_root(base):
        return None
    key = corpus_key(db, corpus_id)
    if key is None:
        return None
    for owner in _owners():
        mine = base / f"uid-{owner}"
        if not _safe_dir(mine, owner):
            continue
        wanted = [version] if not latest else sorted(
            (v for v in (_version_of(p.name, key) for p in mine.glob(f"{key}-v*")) if v is not None and v < version),
            reverse=True)[:1]
        for v in wanted:
            arrays = _map(mine / f"{key}-v{v}", owner)
            if arrays is not None:
                return v, arrays
    return None


def _version_of(name: str, key: str) -> int | None:
    tail = name[len(key) + 2:]
    return int(tail) if name.startswith(f"{key}-v") and tail.isdigit() else None


def _map(folder: Path, owner: int) -> Arrays | None:
    if not _safe_dir(folder, owner):
        return None
    try:
        return {n: np.load(folder / f"{n}.npy", mmap_mode="r", allow_pickle=False)
                for n in GRAPH_ARRAYS + POSTINGS_ARRAYS}
    except (OSError, ValueError):
        return None   # being removed by its owner, or not a pgrag folder: read the database


def save(db: "QueryRunner", corpus_id: int, version: int, arrays: Arrays) -> Path | None:
    """Write one version for every process of this OS user (and, as root, of all);
    older versions of the corpus in this user's folder are removed. Returns the
    folder, or None when there is no usable shared folder (a warning says why)."""
    key = corpus_key(db, corpus_id)
    return publish(key, version, arrays) if key is not None else None


def publish(key: str, version: int, arrays: Arrays) -> Path | None:
    """``save`` without the database (the key already read): safe in a thread of
    its own, even inside the server, where only the calling thread may use SPI."""
    base = root()
    if base is None:
        return None
    me = os.geteuid()
    mine = base / f"uid-{me}"
    try:
        base.mkdir(mode=0o1777, parents=True, exist_ok=True)
        if base.lstat().st_uid == me:
            base.chmod(0o1777)   # mkdir's mode is cut by the umask: every OS user adds its folder
        mine.mkdir(mode=0o755, exist_ok=True)
    except OSError as exc:
        warnings.warn(f"pgrag: no shared graph folder at {base} ({exc}); each process keeps its own copy",
                      stacklevel=2)
        return None
    if not (_safe_root(base) and _safe_dir(mine, me)):
        warnings.warn(f"pgrag: {mine} is not a folder only this user can write; graphs are not shared",
                      stacklevel=2)
        return None
    final = mine / f"{key}-v{version}"
    if not final.exists():
        _write(mine, final, arrays)
    for old in mine.glob(f"{key}-v*"):
        if old != final and old.name.rsplit("-v", 1)[-1].isdigit() and int(old.name.rsplit("-v", 1)[-1]) < version:
            shutil.rmtree(old, ignore_errors=True)   # mapped files stay readable until unmapped
    return final


def _write(mine: Path, final: Path, arrays: Arrays) -> None:
    staging = mine / f".{final.name}.{uuid.uuid4().hex}"
    staging.mkdir(mode=0o755)
    try:
        for name, array in arrays.items():
            np.save(staging / f"{name}.npy", np.ascontiguousarray(array), allow_pickle=False)
        os.chmod(staging, 0o755)
        staging.rename(final)
    except OSError:
        if not final.exists():
            raise
        # another process of this user published the same version first: keep theirs
    finally:
        shutil.rmtree(staging, ignore_errors=True)
