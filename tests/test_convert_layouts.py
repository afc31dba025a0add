"""Conversion into SDAR's absolute block layout: the noise respects absolute blocks, the result is an SDAR
checkpoint."""

from __future__ import annotations

import json

import pytest
import torch

from orl.cli import main
from orl.model.checkpoint import load_checkpoint
from orl.train.data import encode_pair, pad_rows
from orl.train.objectives import noise_one_block


@pytest.mark.parametrize("layout", ["after-prompt", "absolute"])
def test_noise_masks_one_block_of_the_completion_in_its_layout(tokenizer, layout):
    B = 4
    rows = [encode_pair(tokenizer, "def f(x):\n" * k, "    return x + 1\n" * k, B, layout) for k in (1, 2, 3)]
    batch = pad_rows(rows, tokenizer.pad_id, 512)
    for seed in range(20):
        noise = noise_one_block(batch, B, tokenizer.mask_id, torch.Generator().manual_seed(seed), layout)
        for i, (prompt, completion) in enumerate(rows):
            P, end = len(prompt), len(prompt) + len(completion)
            masked = noise.masked[i].nonzero().flatten().tolist()
            origin = 0 if layout == "absolute" else P
            assert end % B == origin % B  # the completion ends on a block boundary of the layout
            assert masked and min(masked) >= P and max(masked) < end  # never a prompt position
            blocks = {(m - origin) // B for m in masked}
            assert len(blocks) == 1  # one block
            assert int(noise.lengths[i]) == min(origin + (blocks.pop() + 1) * B, end)  # cut after it
            assert int(noise.mask_origin[i]) == origin


def test_a_qwen3_checkpoint_converts_into_an_sdar_checkpoint(tmp_path):
    from .real_checkpoints import build_qwen3_checkpoint

    init = build_qwen3_checkpoint(tmp_path / "qwen3", tie=True, with_mask=True)
    config = tmp_path / "sdar.yaml"
    config.write_text(
        "convert: {steps: 2, batch_size: 2, warmup_steps: 1, checkpoint_every: 1}\n"
        "diffusion: {block_size: 4, block_layout: absolute}\n"
    )
    out = tmp_path / "sdar"
    assert (
        main(
            [
                "convert",
                "--preset",
                "smoke",
                "--config",
                str(config),
                "--init",
                str(init),
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    saved = json.loads((out / "config.json").read_text())
    assert saved["architectures"] == ["SDARForCausalLM"] and saved["block_size"] == 4
    assert saved["mask_token_id"] == 151669 and saved["block_layout"] == "absolute"
    ckpt = load_checkpoint(out)
    assert ckpt.is_diffusion and ckpt.model.config.block_layout == "absolute"
    assert set(ckpt.tokenizer.eos_ids) == {151645, 151643}  # the Qwen end tokens survive the conversion
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert [line["step"] for line in log] == [1, 2] and all(line["loss"] > 0 for line in log)
