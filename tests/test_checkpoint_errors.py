"""Bad input gets one clear error naming the file and the field, never a torch traceback."""

from __future__ import annotations

import json
import shutil

import pytest

from orl.errors import CheckpointError, ConfigError
from orl.model.checkpoint import load_checkpoint


@pytest.fixture
def ckpt_copy(ar_ckpt_dir, tmp_path):
    dst = tmp_path / "ckpt"
    shutil.copytree(ar_ckpt_dir, dst)
    return dst


def _edit_config(path, **changes):
    config = json.loads((path / "config.json").read_text())
    config.update(changes)
    (path / "config.json").write_text(json.dumps(config))


def test_missing_weights_file(ckpt_copy):
    (ckpt_copy / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"model\.safetensors: file not found"):
        load_checkpoint(ckpt_copy)


def test_truncated_weights_file(ckpt_copy):
    data = (ckpt_copy / "model.safetensors").read_bytes()
    (ckpt_copy / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"model\.safetensors: .*truncated"):
        load_checkpoint(ckpt_copy)


def test_missing_config(ckpt_copy):
    (ckpt_copy / "config.json").unlink()
    with pytest.raises(CheckpointError, match=r"config\.json: file not found"):
        load_checkpoint(ckpt_copy)


def test_unsupported_architecture(ckpt_copy):
    _edit_config(ckpt_copy, architectures=["LlamaForCausalLM"])
    with pytest.raises(CheckpointError, match=r"config\.json: architectures: unsupported"):
        load_checkpoint(ckpt_copy)


def test_tokenizer_vocabulary_mismatch(ckpt_copy):
    _edit_config(ckpt_copy, vocab_size=10)
    with pytest.raises(CheckpointError, match=r"tokenizer\.json: vocabulary has \d+ tokens but .*vocab_size is 10"):
        load_checkpoint(ckpt_copy)


def test_shape_mismatch_names_the_tensor(ckpt_copy):
    _edit_config(ckpt_copy, intermediate_size=96)
    with pytest.raises(CheckpointError, match=r"mlp\.\w+_proj\.weight: shape \(128, 64\) but config\.json implies \(96, 64\)"):
        load_checkpoint(ckpt_copy)


def test_diffusion_config_without_mask_token(ckpt_copy):
    _edit_config(ckpt_copy, architectures=["OrlBlockDiffusionLM"], block_size=8, mask_token_id=None)
    with pytest.raises(CheckpointError, match=r"config\.json: mask_token_id"):
        load_checkpoint(ckpt_copy)


def test_unknown_config_key_names_file_and_key(tmp_path):
    from orl.train.config import load_preset

    bad = tmp_path / "bad.yaml"
    bad.write_text("ar:\n  stepz: 3\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: ar: unknown key 'stepz'"):
        load_preset("smoke", bad)


def test_bad_config_type_names_the_key(tmp_path):
    from orl.train.config import load_preset

    bad = tmp_path / "bad.yaml"
    bad.write_text("convert:\n  lr: fast\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: convert\.lr: expected float"):
        load_preset("smoke", bad)


def test_cli_prints_one_line_error(ckpt_copy, capsys):
    from orl.cli import main

    (ckpt_copy / "model.safetensors").unlink()
    code = main(["generate", "--ckpt", str(ckpt_copy), "--engine", "reference", "--prompt", "def f(x):\n"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("orl generate: error:") and "model.safetensors" in err and "Traceback" not in err
