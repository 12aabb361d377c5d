"""MiniLM on ONNX Runtime (issue 45): the vectors sentence-transformers gives on
torch, from an export pgrag makes and caches itself; a corrupt or stale export
is rebuilt, never used. Real model, real exporter, real ONNX Runtime."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from pgrag import config, onnx_export
from pgrag.config import DEFAULT_EMBEDDING_MODEL
from pgrag.embed import OnnxEmbedder, SentenceTransformerEmbedder, _embedder, _model_path, calls, get_embedder
from pgrag.exceptions import ConfigError

DATA = Path(__file__).resolve().parents[2] / "pgrag" / "data"
MODEL_DIR = Path(_model_path(DEFAULT_EMBEDDING_MODEL)).resolve()
# Texts at the tokenizer's edges: empty, blank, spaces around, past 256 tokens
# (truncated), non-ASCII (lower-casing and accents in the uncased tokenizer).
EDGES = ["", " \t\n", "  spaces around  ", "word " * 600, "x" * 3000,
         "Ünïcödé — “Quotes” 東京 🙂 Ærø", "Who was the mother of Lothair II?"]


def sample_texts() -> list[str]:
    corpus = json.loads((DATA / "sample_corpus.json").read_text())
    questions = [json.loads(line)["question"] for line in (DATA / "sample_questions.jsonl").read_text().splitlines()]
    return [d["title"] + "\n" + d["text"] for d in corpus] + questions


@pytest.fixture(scope="module")
def torch_model() -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder(DEFAULT_EMBEDDING_MODEL)


@pytest.fixture(scope="module")
def onnx_model() -> OnnxEmbedder:
    """MiniLM from the user's cache (config.onnx_cache_dir()), exported there first if missing."""
    return OnnxEmbedder(DEFAULT_EMBEDDING_MODEL, MODEL_DIR)


def assert_same_vectors(a: np.ndarray, b: np.ndarray) -> None:
    assert a.shape == b.shape and b.dtype == np.float32
    assert np.allclose(np.linalg.norm(b, axis=1), 1.0, atol=1e-6)
    worst = float(np.max(1 - np.sum(a * b, axis=1)))
    assert worst < 1e-5, f"a vector is {worst:.2e} of cosine from torch's"


def test_the_default_model_runs_on_onnx_and_the_setting_chooses_torch(monkeypatch):
    monkeypatch.delenv("PGRAG_EMBEDDING_BACKEND", raising=False)
    assert config.embedding_backend() == "auto"
    assert isinstance(get_embedder(DEFAULT_EMBEDDING_MODEL), OnnxEmbedder)
    monkeypatch.setenv("PGRAG_EMBEDDING_BACKEND", "Torch")
    assert isinstance(get_embedder(DEFAULT_EMBEDDING_MODEL), SentenceTransformerEmbedder)
    monkeypatch.setenv("PGRAG_EMBEDDING_BACKEND", "tensorrt")
    with pytest.raises(ConfigError, match="PGRAG_EMBEDDING_BACKEND"):
        config.embedding_backend()


def test_onnx_required_for_a_model_it_cannot_run_says_why():
    with pytest.raises(ConfigError, match="ONNX Runtime.*float32"):
        _embedder(DEFAULT_EMBEDDING_MODEL, "bfloat16", "onnx")
    # auto keeps torch for it (bfloat16 is a torch precision)
    assert isinstance(_embedder(DEFAULT_EMBEDDING_MODEL, "bfloat16", "auto"), SentenceTransformerEmbedder)


def test_onnx_vectors_equal_torchs_on_the_sample_2wiki_and_edge_texts(torch_model, onnx_model, bench_2wiki):
    passages = json.loads((bench_2wiki / "corpus.json").read_text())[:200]
    questions = [json.loads(line)["question"] for line in (bench_2wiki / "questions.jsonl").read_text().splitlines()]
    texts = sample_texts() + [p["title"] + "\n" + p["text"] for p in passages] + questions[:50] + EDGES
    assert onnx_model.dim == torch_model.dim == 384 and onnx_model.uncased == torch_model.uncased
    expected = torch_model.encode(texts)
    assert_same_vectors(expected, onnx_model.encode(texts))
    # other batch shapes: one text at a time, and batches that mix lengths
    assert_same_vectors(expected[-len(EDGES):], np.vstack([onnx_model.encode([t]) for t in EDGES]))
    assert_same_vectors(expected, onnx_model.encode(texts, batch_size=7))
    assert onnx_model.encode([]).shape == (0, 384)


def test_the_tokenizer_cuts_and_pads_as_sentence_transformers_does(torch_model, onnx_model):
    for text in EDGES:
        theirs = torch_model._model.preprocess([text])["input_ids"][0].tolist()
        ours = onnx_model._tokenizer.encode_batch([text])[0].ids
        assert ours == theirs
    assert len(onnx_model._tokenizer.encode_batch(["word " * 600])[0].ids) == onnx_model.max_length == 256


def test_calls_hold_at_most_eight_texts_and_256_positions():
    # token counts, longest first: a full chunk alone, then as many as fit, never none
    lengths = [300, 256, 128, 128, 100, 64, 64, 64, 20] + [10] * 9
    runs = calls(lengths)
    assert [(r.start, r.stop) for r in runs] == [(0, 1), (1, 2), (2, 4), (4, 6), (6, 10), (10, 18)]
    assert calls([]) == []
    assert [(r.start, r.stop) for r in calls([5] * 5, most=2)] == [(0, 2), (2, 4), (4, 5)]


class _Recording:
    """The real session, noting each call's input shape."""

    def __init__(self, session) -> None:
        self.session, self.shapes = session, []

    def run(self, names, feed):
        self.shapes.append(feed["input_ids"].shape)
        return self.session.run(names, feed)


def test_encode_cuts_its_calls_by_length_and_the_vectors_stay(torch_model, bench_2wiki, monkeypatch):
    model = OnnxEmbedder(DEFAULT_EMBEDDING_MODEL, MODEL_DIR)
    recording = _Recording(model._session)
    monkeypatch.setattr(model, "_session", recording)
    passages = [p["title"] + "\n" + p["text"] for p in json.loads((bench_2wiki / "corpus.json").read_text())[:40]]
    questions = [json.loads(line)["question"] for line in (bench_2wiki / "questions.jsonl").read_text().splitlines()]
    texts = passages + questions[:20]
    vectors = model.encode(texts)
    assert sum(rows for rows, _ in recording.shapes) == len(texts)
    assert all(rows <= 8 and (rows == 1 or rows * width <= 256) for rows, width in recording.shapes)
    assert any(width == 256 for _, width in recording.shapes)        # a passage past 256 tokens, alone
    assert any(rows == 8 for rows, _ in recording.shapes)            # questions share a call
    assert_same_vectors(torch_model.encode(texts), vectors)


def _copy_export(onnx_model: OnnxEmbedder, cache: Path) -> Path:
    """The user's cached export copied into ``cache`` (so a test may break it)."""
    folder = cache / onnx_model.model_file.parent.name
    shutil.copytree(onnx_model.model_file.parent, folder)
    return folder


def test_a_corrupt_export_is_rebuilt_not_used(onnx_model, torch_model, tmp_path):
    folder = _copy_export(onnx_model, tmp_path)
    model = folder / onnx_export.MODEL_FILE
    good = json.loads((folder / onnx_export.MANIFEST).read_text())
    key, _ = onnx_export.export_key(MODEL_DIR)
    assert onnx_export.check(folder, key) == model

    # One flipped byte, same size: only the checksum sees it.
    data = bytearray(model.read_bytes())
    data[len(data) // 2] ^= 0xFF
    model.write_bytes(bytes(data))
    with pytest.raises(onnx_export.OnnxExportError, match="does not match"):
        onnx_export.check(folder, key)

    # Truncated, as a crash or a full disk leaves it: not loadable without a build
    model.write_bytes(bytes(data[: len(data) // 3]))
    with pytest.raises(onnx_export.OnnxExportError, match="does not match"):
        OnnxEmbedder(DEFAULT_EMBEDDING_MODEL, MODEL_DIR, cache_dir=tmp_path, build=False)
    rebuilt = OnnxEmbedder(DEFAULT_EMBEDDING_MODEL, MODEL_DIR, cache_dir=tmp_path)
    assert rebuilt.model_file == model and model.stat().st_size == good["size"]
    assert json.loads((folder / onnx_export.MANIFEST).read_text())["sha256"] == onnx_export._sha256(model)
    assert [p.name for p in tmp_path.iterdir()] == [folder.name]   # no temporary folder left behind
    texts = sample_texts()[:8]
    assert_same_vectors(torch_model.encode(texts), rebuilt.encode(texts))


def test_a_stale_export_is_rebuilt_and_the_old_one_removed(onnx_model, monkeypatch, tmp_path):
    old = _copy_export(onnx_model, tmp_path)
    # The user's cache may hold an export another virtual environment built (the
    # same files give the same key): make the copy this model folder's own.
    manifest_file = old / onnx_export.MANIFEST
    manifest_file.write_text(json.dumps({**json.loads(manifest_file.read_text()),
                                         "model_dir": str(MODEL_DIR.resolve())}))
    real = onnx_export.library_versions()
    # A model file changed: another key. (A copy of the model folder, a link to its weights.)
    edited = tmp_path / "edited-model"
    shutil.copytree(MODEL_DIR, edited, ignore=shutil.ignore_patterns("model.safetensors"))
    (edited / "model.safetensors").symlink_to(MODEL_DIR / "model.safetensors")
    before, _ = onnx_export.export_key(edited)
    config_file = edited / "config.json"
    config_file.write_text(config_file.read_text().replace("}", ', "pgrag_test": 1}', 1))
    assert onnx_export.export_key(edited)[0] != before

    # A library upgraded: torch's version is part of the key.
    monkeypatch.setattr(onnx_export, "library_versions", lambda: {**real, "torch": real["torch"] + ".post-test"})
    with pytest.raises(onnx_export.OnnxExportError, match="no ONNX export"):
        onnx_export.ensure(MODEL_DIR, tmp_path, build=False)
    fresh = onnx_export.ensure(MODEL_DIR, tmp_path)
    assert fresh.parent != old and not old.exists()
    manifest = json.loads((fresh.parent / onnx_export.MANIFEST).read_text())
    assert manifest["libraries"]["torch"].endswith(".post-test")
    assert onnx_export.ensure(MODEL_DIR, tmp_path, build=False) == fresh   # and now it is found


def test_a_folder_the_onnx_path_does_not_fit_is_refused(tmp_path):
    shutil.copytree(MODEL_DIR, tmp_path / "m", ignore=shutil.ignore_patterns("model.safetensors"))
    pooling = tmp_path / "m" / "1_Pooling" / "config.json"
    pooling.write_text(pooling.read_text().replace('"pooling_mode_cls_token": false', '"pooling_mode_cls_token": true'))
    with pytest.raises(onnx_export.OnnxExportError, match="not mean pooling"):
        onnx_export.layout(tmp_path / "m")
    with pytest.raises(onnx_export.OnnxExportError, match="not a local model folder"):
        onnx_export.layout(tmp_path / "sentence-transformers-hub-name")


def test_int8_quantizes_the_float32_export_beside_it_and_moves_vectors_a_little(onnx_model, monkeypatch, tmp_path):
    folder = _copy_export(onnx_model, tmp_path)
    manifest_file = folder / onnx_export.MANIFEST   # this model folder's own (see the stale test)
    manifest_file.write_text(json.dumps({**json.loads(manifest_file.read_text()),
                                         "model_dir": str(MODEL_DIR.resolve())}))
    quantized = OnnxEmbedder(DEFAULT_EMBEDDING_MODEL, MODEL_DIR, cache_dir=tmp_path, precision="int8")
    # quantized from the cached float32 export, which stays: each precision has its own key
    assert quantized.model_file.parent != folder and (folder / onnx_export.MODEL_FILE).exists()
    assert quantized.model_file.stat().st_size < onnx_model.model_file.stat().st_size / 3
    key, _ = onnx_export.export_key(MODEL_DIR, "int8")
    assert onnx_export.check(quantized.model_file.parent, key) == quantized.model_file
    texts = sample_texts()
    full, small = onnx_model.encode(texts), quantized.encode(texts)
    cosines = np.sum(full * small, axis=1)
    assert np.allclose(np.linalg.norm(small, axis=1), 1.0, atol=1e-5)
    assert 0.9 < float(cosines.min()) and float(cosines.max()) < 1 - 1e-5   # near, but other vectors
    # the setting chooses it; torch cannot run it, and says so
    monkeypatch.setenv("PGRAG_ONNX_CACHE", str(tmp_path))
    assert _embedder(DEFAULT_EMBEDDING_MODEL, "int8", "auto").model_file == quantized.model_file
    with pytest.raises(ConfigError, match="int8"):
        _embedder(DEFAULT_EMBEDDING_MODEL, "int8", "torch")
