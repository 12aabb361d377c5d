"""A sentence-transformers model exported to ONNX, cached on disk.

The model runtime and the in-process encoder run all-MiniLM-L6-v2 (or any local
sentence-transformers folder of the same shape: a transformer, mean pooling,
normalising) through ONNX Runtime instead of torch. The export is made here from
the model files pgrag already installs, with ``torch.onnx.export`` (the legacy
TorchScript exporter, opset 17): no hub, no optimum. sentence-transformers'
own ``backend="onnx"`` needs optimum-onnx, which pins transformers below 4.58 and
would downgrade this environment's transformers 5 (and its tokenizers), so it
is not used.

The exported graph is the transformer plus sentence-transformers' mean pooling
and normalising, so it returns the sentence vectors themselves.

Cache: one folder per export under ``config.onnx_cache_dir()``, named by a key
over the model files' contents and the versions of the libraries that made the
export (torch, transformers, onnx, onnxruntime) and of this format. A changed
model file or library gives a new key, so a stale export is never found; it is
rebuilt, and the old folder of the same model folder removed. An export is
written under a temporary name and renamed into place complete, with a manifest
holding the size and SHA-256 of ``model.onnx``; a folder whose manifest is
missing or does not match its file (a truncated or altered export) is rebuilt.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

log = logging.getLogger("pgrag.onnx")

FORMAT = 1          # bump when the graph's inputs/outputs or the export recipe change
OPSET = 17
MODEL_FILE = "model.onnx"
MANIFEST = "manifest.json"
LIBRARIES = ("torch", "transformers", "onnx", "onnxruntime")
# Files of the model folder the export (or the tokenizer beside it) depends on.
_SKIP = {"README.md", ".gitattributes"}


class OnnxExportError(RuntimeError):
    """The model could not be exported to ONNX or the export could not be loaded."""


@dataclass(frozen=True)
class ModelLayout:
    """What the ONNX path needs to know of a sentence-transformers folder."""

    directory: Path
    max_length: int      # tokens, [CLS] and [SEP] included, as sentence-transformers truncates
    do_lower_case: bool  # sentence-transformers' own lower-casing before the tokenizer


def layout(model_dir: Path) -> ModelLayout:
    """The layout of the sentence-transformers folder ``model_dir``, or
    OnnxExportError saying why the ONNX path does not fit it (then the caller
    uses torch): only a transformer, mean pooling and an optional Normalize,
    the transformer's files at the folder's root, a fast tokenizer file."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise OnnxExportError(f"{model_dir} is not a local model folder")
    try:
        modules = json.loads((model_dir / "modules.json").read_text())
        bert = json.loads((model_dir / "sentence_bert_config.json").read_text())
        config = json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise OnnxExportError(f"{model_dir} is not a sentence-transformers folder: {exc}") from exc
    kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules]
    if kinds not in (["Transformer", "Pooling", "Normalize"], ["Transformer", "Pooling"]) or modules[0].get("path"):
        raise OnnxExportError(f"{model_dir}: modules {kinds} are not transformer + pooling (+ normalize)")
    try:
        pooling = json.loads((model_dir / modules[1]["path"] / "config.json").read_text())
    except (OSError, ValueError, KeyError) as exc:
        raise OnnxExportError(f"{model_dir}: no pooling config: {exc}") from exc
    modes = {k for k, v in pooling.items() if k.startswith("pooling_mode_") and v}
    if modes != {"pooling_mode_mean_tokens"}:
        raise OnnxExportError(f"{model_dir}: pooling {sorted(modes)} is not mean pooling")
    if not (model_dir / "tokenizer.json").is_file():
        raise OnnxExportError(f"{model_dir}: no tokenizer.json (fast tokenizer)")
    max_length = bert.get("max_seq_length")
    if not isinstance(max_length, int) or max_length < 2:
        raise OnnxExportError(f"{model_dir}: sentence_bert_config.json has no max_seq_length")
    # sentence-transformers caps the tokenizer's length at the model's positions.
    positions = config.get("max_position_embeddings")
    if isinstance(positions, int):
        max_length = min(max_length, positions)
    return ModelLayout(model_dir, max_length, bool(bert.get("do_lower_case", False)))


def library_versions() -> dict[str, str]:
    """The installed versions of the libraries an export depends on (read from
    package metadata: no import, so torch is not loaded to check a cache)."""
    versions = {}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "absent"
    return versions


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def model_files(model_dir: Path) -> dict[str, str]:
    """SHA-256 of each file of the model folder, by its path in the folder."""
    files = {}
    for path in sorted(Path(model_dir).rglob("*")):
        if path.is_file() and path.name not in _SKIP:
            files[path.relative_to(model_dir).as_posix()] = _sha256(path)
    return files


PRECISIONS = ("float32", "int8")


def export_key(model_dir: Path, precision: str = "float32") -> tuple[str, dict[str, Any]]:
    """The cache key of ``model_dir``'s export and what it was computed from."""
    inputs: dict[str, Any] = {"format": FORMAT, "opset": OPSET, "libraries": library_versions(),
                              "files": model_files(model_dir)}
    if precision != "float32":   # float32 keys stay as they were before int8 existed
        inputs["precision"] = precision
    key = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()
    return key, inputs


def _slug(model_dir: Path) -> str:
    name = model_dir.name if model_dir.name != "model" else model_dir.parent.name
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name)[:60] or "model"


def check(folder: Path, key: str) -> Path:
    """``folder``'s model file if it holds a complete export for ``key``, else
    OnnxExportError: a missing or unreadable manifest, another key, or a model
    file whose size or SHA-256 is not the manifest's (a truncated or altered file)."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise OnnxExportError(f"{folder}: no readable manifest ({exc})") from exc
    if manifest.get("key") != key:
        raise OnnxExportError(f"{folder}: made for key {manifest.get('key')!r}, not {key!r}")
    model = folder / MODEL_FILE
    try:
        size = model.stat().st_size
    except OSError as exc:
        raise OnnxExportError(f"{folder}: {exc}") from exc
    if size != manifest.get("size") or _sha256(model) != manifest.get("sha256"):
        raise OnnxExportError(f"{model} does not match its manifest (size {size:,}, "
                              f"manifest {manifest.get('size')!r}): truncated or altered")
    return model


def export(model_dir: Path, target: Path) -> None:
    """Write ``model_dir``'s transformer with mean pooling and normalising to the
    ONNX file ``target`` (inputs input_ids, attention_mask and, where the model
    takes it, token_type_ids, all int64 [batch, tokens]; output sentence_embedding,
    float32 [batch, dim]). Needs torch and transformers; runs once per cache key."""
    import inspect
    import warnings

    import torch
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()   # no "Loading weights" bar in a server's or runtime's log

    # eager attention: the TorchScript exporter traces it to plain MatMul/Softmax
    # on every torch version; the vectors equal the default (sdpa) path's to 1e-7.
    transformer = AutoModel.from_pretrained(str(model_dir), attn_implementation="eager").eval()
    takes_types = "token_type_ids" in inspect.signature(transformer.forward).parameters

    class Pooled(torch.nn.Module):
        """sentence-transformers' Transformer -> Pooling(mean) -> Normalize, in one graph."""

        def __init__(self) -> None:
            super().__init__()
            self.transformer = transformer

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any = None) -> Any:
            extra = {"token_type_ids": token_type_ids} if token_type_ids is not None else {}
            tokens = self.transformer(input_ids=input_ids, attention_mask=attention_mask, **extra)[0]
            mask = attention_mask.unsqueeze(-1).to(tokens.dtype)
            # as sentence_transformers.models.Pooling (mean) and Normalize compute it
            mean = (tokens * mask).sum(1) / torch.clamp(mask.sum(1), min=1e-9)
            return torch.nn.functional.normalize(mean, p=2, dim=1)

    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if takes_types else [])
    # a traced sample with padding, so the mask path is in the graph
    ids = torch.tensor([[101, 7592, 2088, 102, 0, 0], [101, 7592, 2088, 2003, 1037, 102]], dtype=torch.int64)
    mask = (ids != 0).to(torch.int64)
    sample = (ids, mask, torch.zeros_like(ids)) if takes_types else (ids, mask)
    axes = {name: {0: "batch", 1: "tokens"} for name in names}
    axes["sentence_embedding"] = {0: "batch"}
    with torch.no_grad(), warnings.catch_warnings():
        # The tracer warns where Python branches on a shape (transformers' mask
        # helpers): each such branch is the same at every batch and length for an
        # encoder, and the tests check vectors at many shapes against torch's.
        warnings.simplefilter("ignore")
        torch.onnx.export(Pooled().eval(), sample, str(target), input_names=names,
                          output_names=["sentence_embedding"], dynamic_axes=axes,
                          opset_version=OPSET, do_constant_folding=True, dynamo=False)


def quantize(source: Path, target: Path) -> None:
    """``source``'s float32 export with its weights quantized to int8 (ONNX
    Runtime's dynamic quantization: activations are quantized per call). About
    2.5x less CPU a text on this project's 2-core machine, but the vectors move
    (a cosine of 0.94 to float32's at worst), so it is an option, measured on
    recall in docs/model-runtime.md, not the default."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)   # its advice to pre-process the graph goes to the root logger
    try:
        quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8)
    finally:
        root.setLevel(level)


def ensure(model_dir: Path, cache_dir: Path, *, build: bool = True, precision: str = "float32") -> Path:
    """The checked ONNX file of ``model_dir``'s export in ``cache_dir``, exported
    first when there is none for the current key or the one there is corrupt
    (OnnxExportError when ``build`` is False and no valid export exists).
    ``precision`` int8 quantizes the float32 export (made first if missing)."""
    if precision not in PRECISIONS:
        raise OnnxExportError(f"the ONNX path runs {' or '.join(PRECISIONS)}, not {precision}")
    model_dir = Path(model_dir).resolve()
    layout(model_dir)
    if not build and not os.access(cache_dir, os.R_OK | os.X_OK):
        # before hashing the model files: a server backend whose OS user cannot
        # read the cache learns it at once
        raise OnnxExportError(f"cannot read the ONNX cache {cache_dir}")
    key, inputs = export_key(model_dir, precision)
    suffix = "" if precision == "float32" else f"-{precision}"
    folder = Path(cache_dir) / f"{_slug(model_dir)}{suffix}-{key[:20]}"
    if folder.exists():
        try:
            return check(folder, key)
        except OnnxExportError as exc:
            if not build:
                raise
            log.warning("rebuilding the ONNX export: %s", exc)
    elif not build:
        raise OnnxExportError(f"no ONNX export of {model_dir} in {cache_dir}")
    if precision == "float32":
        make = functools.partial(export, model_dir)
    else:
        make = functools.partial(quantize, ensure(model_dir, cache_dir, build=True))
    return _build(model_dir, Path(cache_dir), folder, key, inputs, make)


def _build(model_dir: Path, cache_dir: Path, folder: Path, key: str, inputs: dict[str, Any],
           make: Callable[[Path], None]) -> Path:
    cache_dir.mkdir(parents=True, exist_ok=True)
    _remove_abandoned(cache_dir)
    # A temporary folder beside the final one (same file system, so the rename is
    # atomic): a crash mid-export leaves only a ".tmp-" folder nobody loads.
    tmp = cache_dir / f".tmp-{folder.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        started = time.monotonic()
        log.info("exporting %s to ONNX in %s", model_dir, folder)
        try:
            make(tmp / MODEL_FILE)
        except Exception as exc:  # the exporter fails in many types (torch, onnx, transformers)
            raise OnnxExportError(f"cannot export {model_dir} to ONNX: {exc}") from exc
        model = tmp / MODEL_FILE
        manifest = {"key": key, "size": model.stat().st_size, "sha256": _sha256(model),
                    "model_dir": str(model_dir), "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "export_s": round(time.monotonic() - started, 1), **inputs}
        with open(tmp / MANIFEST, "w") as f:
            json.dump(manifest, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        if folder.exists():   # corrupt (checked by the caller), or another process's complete export
            aside = cache_dir / f".old-{folder.name}-{uuid.uuid4().hex[:8]}"
            with contextlib.suppress(FileNotFoundError):
                os.rename(folder, aside)
                shutil.rmtree(aside, ignore_errors=True)
        try:
            os.rename(tmp, folder)
        except OSError:   # another process renamed its export into place first: use that one
            return check(folder, key)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    _remove_stale(cache_dir, folder, model_dir, inputs.get("precision", "float32"))
    return check(folder, key)


def _remove_stale(cache_dir: Path, keep: Path, model_dir: Path, precision: str = "float32") -> None:
    """Remove older exports of the same model folder and precision (an upgraded
    library or model): their key can never match again. Other folders' exports
    (another virtual environment's) and the other precision's stay."""
    suffix = "" if precision == "float32" else f"-{precision}"
    for other in cache_dir.iterdir():
        if other == keep or other.name.startswith(".") or not other.is_dir():
            continue
        try:
            manifest = json.loads((other / MANIFEST).read_text())
            same = (manifest.get("model_dir") == str(model_dir)
                    and manifest.get("precision", "float32") == precision)
        except (OSError, ValueError):   # a broken export of this model and precision
            same = re.fullmatch(re.escape(_slug(model_dir) + suffix) + r"-[0-9a-f]{20}", other.name) is not None
        if same:
            shutil.rmtree(other, ignore_errors=True)


def _remove_abandoned(cache_dir: Path, age_s: float = 3600) -> None:
    """Temporary folders of exports that died (an hour old: no export takes that long)."""
    now = time.time()
    for other in cache_dir.glob(".*-*"):
        with contextlib.suppress(OSError):
            if now - other.stat().st_mtime > age_s:
                shutil.rmtree(other, ignore_errors=True)
