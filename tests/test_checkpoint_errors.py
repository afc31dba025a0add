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
    with pytest.raises(
        CheckpointError, match=r"tokenizer\.json: vocabulary has \d+ tokens but .*vocab_size is 10"
    ):
        load_checkpoint(ckpt_copy)


def test_shape_mismatch_names_the_tensor(ckpt_copy):
    _edit_config(ckpt_copy, intermediate_size=96)
    with pytest.raises(
        CheckpointError, match=r"mlp\.\w+_proj\.weight: shape \(128, 64\) but config\.json implies \(96, 64\)"
    ):
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


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("hidden_size", True, r"config\.json: hidden_size: expected a positive integer, got true"),
        ("head_dim", "32", r'config\.json: head_dim: expected a positive integer, got "32"'),
        ("vocab_size", 1e9, r"config\.json: vocab_size: expected a positive integer, got 1000000000\.0"),
        (
            "num_hidden_layers",
            100000,
            r"config\.json: num_hidden_layers: 100000, but the weights hold layers 0\.\.1 \(2\)",
        ),
        (
            "vocab_size",
            10**9,
            r"config\.json: vocab_size: 1000000000, but .*model\.safetensors: "
            r"model\.embed_tokens\.weight has shape \(\d+, 64\)",
        ),
        (
            "hidden_size",
            2**20,
            r"config\.json: hidden_size: 1048576, but .*model\.embed_tokens\.weight has shape",
        ),
        (
            "num_key_value_heads",
            3,
            r"config\.json: num_key_value_heads: 3 does not divide num_attention_heads 4",
        ),
        (
            "rope_scaling",
            {"rope_type": "yarn", "factor": 4.0},
            r"config\.json: rope_scaling\.rope_type: \"yarn\" is not supported",
        ),
        ("torch_dtype", "int8", r"config\.json: torch_dtype: expected one of float32, bfloat16, float16"),
        ("hidden_act", "gelu", r'config\.json: hidden_act: expected one of "silu"'),
    ],
)
def test_bad_config_fails_before_any_model_is_built(ckpt_copy, monkeypatch, field, value, message):
    import orl.model.checkpoint as checkpoint

    def no_model(*args, **kwargs):
        raise AssertionError("a model was built from an invalid config.json")

    # Validation must come before construction: nothing is allocated for a config that is wrong.
    monkeypatch.setattr(checkpoint, "Transformer", no_model)
    _edit_config(ckpt_copy, **{field: value})
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(ckpt_copy)


@pytest.fixture
def qwen3_copy(qwen3_ckpt_dir, tmp_path):
    dst = tmp_path / "qwen3"
    shutil.copytree(qwen3_ckpt_dir, dst)
    return dst


def test_sharded_checkpoint_missing_a_shard_names_it(qwen3_copy):
    index = json.loads((qwen3_copy / "model.safetensors.index.json").read_text())
    shard = sorted(set(index["weight_map"].values()))[-1]
    (qwen3_copy / shard).unlink()
    with pytest.raises(
        CheckpointError, match=rf"{shard}: file not found \(named by model\.safetensors\.index\.json"
    ):
        load_checkpoint(qwen3_copy)


def test_sdar_checkpoint_without_any_mask_token_names_file_and_token(qwen3_copy):
    _edit_config(qwen3_copy, architectures=["SDARForCausalLM"], model_type="sdar", block_size=4)
    with pytest.raises(
        CheckpointError,
        match=r"tokenizer_config\.json: mask_token: a block-diffusion checkpoint "
        r"needs a mask token .*'<\|MASK\|>'",
    ):
        load_checkpoint(qwen3_copy)


def test_tokenizer_config_naming_an_absent_token(qwen3_copy):
    path = qwen3_copy / "tokenizer_config.json"
    config = json.loads(path.read_text())
    config["mask_token"] = "<|NOPE|>"
    path.write_text(json.dumps(config))
    with pytest.raises(
        CheckpointError,
        match=r"tokenizer_config\.json: mask_token: the token '<\|NOPE\|>' is not in "
        r".*tokenizer\.json",
    ):
        load_checkpoint(qwen3_copy)


def test_eos_id_outside_the_tokenizer(qwen3_copy):
    path = qwen3_copy / "generation_config.json"
    config = json.loads(path.read_text())
    config["eos_token_id"] = [151645, 999999]
    path.write_text(json.dumps(config))
    with pytest.raises(
        CheckpointError, match=r"generation_config\.json: eos_token_id: token id 999999 is outside"
    ):
        load_checkpoint(qwen3_copy)


@pytest.mark.parametrize("value", [None, [], {}, "x", -1, 1.5, True])
def test_any_odd_config_value_is_a_checkpoint_error_or_a_valid_load(ar_ckpt_dir, tmp_path, value):
    """Whatever a field holds, loading ends in a CheckpointError (naming config.json) or a model; never a
    crash."""
    config = json.loads((ar_ckpt_dir / "config.json").read_text())
    for field in [*config, "block_layout", "rope_scaling", "layer_types"]:
        dst = tmp_path / field
        shutil.copytree(ar_ckpt_dir, dst)
        _edit_config(dst, **{field: value})
        try:
            load_checkpoint(dst)
        except CheckpointError as exc:
            assert "config.json" in str(exc) or "tokenizer" in str(exc), (field, str(exc))
        shutil.rmtree(dst)
