"""`orl export`: our checkpoints as SDAR / Qwen3 directories; export, load, identical logits."""

from __future__ import annotations

import json

import pytest
import torch

from orl.errors import CheckpointError, InputError
from orl.model.checkpoint import load_checkpoint, save_checkpoint
from orl.model.transformer import Transformer

from .conftest import small_config


@pytest.fixture(scope="module")
def dlm_ckpt_dir(tokenizer, tmp_path_factory):
    """A random block-diffusion checkpoint of ours (after-prompt layout, residual α 0.5)."""
    torch.manual_seed(3)
    model = Transformer(
        small_config(tokenizer, attention_mode="block-causal", block_size=4, residual_alpha=0.5)
    )
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.2)
    return save_checkpoint(
        model, tokenizer, tmp_path_factory.mktemp("dlm"), extra_config={"orl_model_name": "d"}
    )


def _logits(ckpt_dir, ids, mask=None):
    with torch.no_grad():
        return load_checkpoint(ckpt_dir).model(ids, mask=mask)


def test_sdar_export_round_trips_with_identical_logits(dlm_ckpt_dir, tokenizer, tmp_path, capsys):
    from orl.cli import main
    from orl.model.masks import block_causal_limits, mask_from_limits

    out = tmp_path / "sdar"
    assert main(["export", str(dlm_ckpt_dir), "--format", "sdar", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(f"exported {out}") and "always place blocks at absolute positions" in printed
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["SDARForCausalLM"] and config["model_type"] == "sdar"
    assert (config["block_size"], config["mask_token_id"], config["block_layout"]) == (
        4,
        tokenizer.mask_id,
        "after-prompt",
    )
    assert config["orl_model_name"] == "d"
    tok_config = json.loads((out / "tokenizer_config.json").read_text())
    assert tok_config["mask_token"] == "[MASK]" and tok_config["eos_token"] == "<eos>"
    exported = load_checkpoint(out)
    assert exported.arch == "SDARForCausalLM" and exported.model.config.block_layout == "after-prompt"
    assert exported.model.config.residual_alpha == 0.5 and exported.tokenizer.mask_id == tokenizer.mask_id
    ids = torch.randint(3, tokenizer.vocab_size, (2, 13), generator=torch.Generator().manual_seed(0))
    idx = torch.arange(13)
    mask = mask_from_limits(block_causal_limits(idx.expand(2, 13), 5, 4), idx)
    assert torch.equal(_logits(dlm_ckpt_dir, ids, mask), _logits(out, ids, mask))


def test_sdar_export_loads_in_transformers_tokenizer_with_its_mask_token(dlm_ckpt_dir, tmp_path):
    from transformers import AutoTokenizer

    from orl.model.export import export_checkpoint

    out = export_checkpoint(dlm_ckpt_dir, tmp_path / "sdar", "sdar").out_dir
    theirs = AutoTokenizer.from_pretrained(str(out))
    assert (
        theirs.mask_token == "[MASK]"
        and theirs.convert_tokens_to_ids("[MASK]") == load_checkpoint(dlm_ckpt_dir).tokenizer.mask_id
    )


def test_qwen3_export_is_plain_qwen3_for_transformers(ar_ckpt_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    from orl.model.export import export_checkpoint

    result = export_checkpoint(ar_ckpt_dir, tmp_path / "qwen3", "qwen3", max_shard_bytes=60_000)
    out = result.out_dir
    assert "model.safetensors.index.json" in result.files and result.notes == []
    assert sum(name.endswith(".safetensors") for name in result.files) >= 2
    ids = torch.randint(3, 400, (1, 11), generator=torch.Generator().manual_seed(2))
    ours = _logits(ar_ckpt_dir, ids)
    assert torch.equal(ours, _logits(out, ids))
    theirs = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32).eval()
    with torch.no_grad():
        assert (theirs(ids).logits - ours).abs().max().item() <= 1e-4


def test_export_refuses_the_wrong_family_and_an_existing_directory(ar_ckpt_dir, dlm_ckpt_dir, tmp_path):
    from orl.model.export import export_checkpoint

    with pytest.raises(
        CheckpointError, match=r"is an AR checkpoint; --format sdar needs a block-diffusion one"
    ):
        export_checkpoint(ar_ckpt_dir, tmp_path / "a", "sdar")
    with pytest.raises(
        CheckpointError, match=r"is a block-diffusion checkpoint; as Qwen3 it would run as an AR"
    ):
        export_checkpoint(dlm_ckpt_dir, tmp_path / "b", "qwen3")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    with pytest.raises(InputError, match=r"--out .*full: the directory exists and is not empty"):
        export_checkpoint(dlm_ckpt_dir, tmp_path / "full", "sdar")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no half-written export left behind


def test_sdar_export_copies_modeling_code_from_a_local_release(dlm_ckpt_dir, tmp_path):
    from orl.model.export import export_checkpoint

    release = tmp_path / "release"
    release.mkdir()
    auto_map = {
        "AutoConfig": "configuration_sdar.SDARConfig",
        "AutoModelForCausalLM": "modeling_sdar.SDARForCausalLM",
    }
    (release / "config.json").write_text(json.dumps({"auto_map": auto_map}))
    for name in ("configuration_sdar.py", "modeling_sdar.py"):
        (release / name).write_text("# stand-in for the release's file\n")
    result = export_checkpoint(dlm_ckpt_dir, tmp_path / "out", "sdar", sdar_code=release)
    assert {"configuration_sdar.py", "modeling_sdar.py"} <= set(result.files)
    assert json.loads((result.out_dir / "config.json").read_text())["auto_map"] == auto_map
    assert not any("no modeling code" in note for note in result.notes)


def test_max_shard_size_parsing():
    import argparse

    from orl.commands.export import parse_size

    assert parse_size("5GB") == 5 * 10**9 and parse_size("500MB") == 5 * 10**8
    assert parse_size("1.5GiB") == 3 * 2**29 and parse_size("1048576") == 1048576
    for bad in ("", "-1GB", "5 parsecs", "0"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected a size such as 5GB"):
            parse_size(bad)
