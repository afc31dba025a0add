"""The tiny profile's committed base checkpoints match their sha256 manifest and load."""

from __future__ import annotations

import os
import shutil

import pytest

from orl.errors import CheckpointError
from orl.io import REPO_ROOT
from orl.model.base_manifest import (
    CHECKPOINTS,
    MANIFEST,
    MAX_FILE_BYTES,
    STAGES,
    base_problem,
    check_manifest,
    copy_base,
    settle_copies,
    take_base,
)
from orl.model.checkpoint import load_checkpoint
from orl.train.config import STAGE_SECTIONS, load_preset

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
    assert (
        manifest["checkpoints"]["ar"]["steps"] == 3
        and "train_state" not in manifest["checkpoints"]["ar"]["files"]
    )
    assert check_manifest(tmp_path / "base") == manifest
    (tmp_path / "base" / "ar" / "model.safetensors").write_bytes(b"other bytes")
    with pytest.raises(CheckpointError, match=r"model\.safetensors: its sha256 differs .*checkpoints\.ar"):
        check_manifest(tmp_path / "base")
    shutil.rmtree(tmp_path / "base" / "ar")
    with pytest.raises(CheckpointError, match="missing"):
        check_manifest(tmp_path / "base")


def _fake_base(tmp_path, digests):
    sources = {}
    for name in CHECKPOINTS:
        source = tmp_path / "trained" / name
        source.mkdir(parents=True)
        (source / "config.json").write_text('{"architectures": ["Qwen3ForCausalLM"]}')
        (source / "model.safetensors").write_bytes(name.encode() * 10)
        (source / "train_summary.json").write_text(f'{{"config_digest": "{digests[name]}-{STAGES[name]}"}}')
        sources[name] = source
    copy_base(sources, tmp_path / "base")
    return tmp_path / "base"


def test_the_base_stands_in_only_for_the_preset_it_was_trained_with(tmp_path):
    base = _fake_base(tmp_path, {"ar": "aaaa", "draft": "bbbb", "dlm": "cccc"})
    assert base_problem(base, {"ar": "aaaa", "draft": "bbbb", "dlm": "cccc"}) is None
    problem = base_problem(base, {"ar": "aaaa", "draft": "bbbb", "dlm": "dddd"})
    assert (
        "checkpoints.dlm" in problem and "'cccc'" in problem and "'dddd'" in problem and "convert" in problem
    )
    assert "not found" in base_problem(tmp_path / "elsewhere", {})


def test_taking_the_base_copies_checked_files(tmp_path):
    base = _fake_base(tmp_path, {"ar": "aaaa", "draft": "bbbb", "dlm": "cccc"})
    take_base(base, "dlm", tmp_path / "ckpt" / "dlm")
    copied = sorted(path.name for path in (tmp_path / "ckpt" / "dlm").iterdir())
    assert copied == ["config.json", "model.safetensors", "train_summary.json"]
    assert (tmp_path / "ckpt" / "dlm" / "model.safetensors").read_bytes() == b"dlm" * 10
    (base / "ar" / "model.safetensors").write_bytes(
        b"tampered"
    )  # any base file off its manifest: nothing taken
    with pytest.raises(CheckpointError, match="sha256 differs"):
        take_base(base, "draft", tmp_path / "ckpt" / "draft")
    assert not (tmp_path / "ckpt" / "draft" / "config.json").exists()


def test_settled_copies_are_as_old_as_the_base_and_others_are_left_alone(tmp_path):
    """A copy of the base gets the time of the newest base file it came from (Snakemake's fresh time would
    make every record measured from the base look older than it); a folder that is not a copy keeps its."""
    base = _fake_base(tmp_path, {"ar": "aaaa", "draft": "bbbb", "dlm": "cccc"})
    ckpt = tmp_path / "ckpt"
    for name in ("ar", "dlm"):
        take_base(base, name, ckpt / name)
    old = 1_700_000_000
    for path in base.rglob("*"):
        os.utime(path, (old, old))
    os.utime(base / "dlm" / "config.json", (old + 5, old + 5))  # the newest file the dlm copy came from
    (ckpt / "ar" / "model.safetensors").write_bytes(b"trained here")  # no longer the base's: left alone
    before = (ckpt / "ar" / "config.json").stat().st_mtime
    assert settle_copies(base, ckpt) == ["dlm"]  # draft was never taken
    assert {path.stat().st_mtime for path in (ckpt / "dlm").iterdir()} == {old + 5}
    assert (ckpt / "ar" / "config.json").stat().st_mtime == before


@pytest.mark.skipif(not (BASE / MANIFEST).is_file(), reason=f"no committed base checkpoints under {BASE}")
def test_the_committed_base_matches_the_tiny_preset():
    """The tiny profile's DAG copies the committed base only while the preset still gives its digests: a
    changed preset section without a retrained base would make every ORL-stage run train from it anyway."""
    preset = load_preset("tiny")
    digests = {name: preset.digest(*STAGE_SECTIONS[STAGES[name]]) for name in CHECKPOINTS}
    assert base_problem(BASE, digests) is None
