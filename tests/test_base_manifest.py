"""The tiny profile's committed base checkpoints match their sha256 manifest and load."""

from __future__ import annotations

import shutil

import pytest

from orl.errors import CheckpointError
from orl.io import REPO_ROOT
from orl.model.base_manifest import CHECKPOINTS, MANIFEST, MAX_FILE_BYTES, check_manifest, copy_base
from orl.model.checkpoint import load_checkpoint

BASE = REPO_ROOT / "results" / "tiny" / "base"


@pytest.mark.skipif(not (BASE / MANIFEST).is_file(), reason=f"no committed base checkpoints under {BASE}")
def test_committed_base_matches_its_manifest_and_loads():
    manifest = check_manifest(BASE)
    assert not list(BASE.rglob("*.jsonl"))  # every .jsonl under results/<profile>/ is read as records
    assert set(manifest["checkpoints"]) == set(CHECKPOINTS)
    for name, entry in manifest["checkpoints"].items():
        assert all(f["bytes"] <= MAX_FILE_BYTES for f in entry["files"].values())
        ckpt = load_checkpoint(BASE / name)
        assert ckpt.model.config.vocab_size == ckpt.tokenizer.vocab_size


def test_a_changed_file_is_refused(tmp_path):
    source = tmp_path / "ckpt"
    source.mkdir()
    (source / "config.json").write_text('{"architectures": ["Qwen3ForCausalLM"]}')
    (source / "model.safetensors").write_bytes(b"not really weights")
    (source / "train_summary.json").write_text('{"stage": "ar", "steps": 3}')
    manifest = copy_base({"ar": source}, tmp_path / "base")
    assert manifest["checkpoints"]["ar"]["steps"] == 3 and "train_state" not in manifest["checkpoints"]["ar"]["files"]
    assert check_manifest(tmp_path / "base") == manifest
    (tmp_path / "base" / "ar" / "model.safetensors").write_bytes(b"other bytes")
    with pytest.raises(CheckpointError, match=r"model\.safetensors: its sha256 differs .*checkpoints\.ar"):
        check_manifest(tmp_path / "base")
    shutil.rmtree(tmp_path / "base" / "ar")
    with pytest.raises(CheckpointError, match="missing"):
        check_manifest(tmp_path / "base")
