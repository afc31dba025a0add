"""Conversion into SDAR's absolute block layout: the noise respects absolute blocks, the result is an SDAR
checkpoint."""

from __future__ import annotations

import json

import pytest
import torch

from orl.cli import main
from orl.model.checkpoint import load_checkpoint
from orl.train.data import encode_pair, pad_rows
from orl.train.objectives import noise_blocks


@pytest.mark.parametrize("noised", ["every", "one"])
@pytest.mark.parametrize("layout", ["after-prompt", "absolute"])
def test_noise_masks_the_completions_blocks_in_its_layout(tokenizer, layout, noised):
    B = 4
    rows = [encode_pair(tokenizer, "def f(x):\n" * k, "    return x + 1\n" * k, B, layout) for k in (1, 2, 3)]
    batch = pad_rows(rows, tokenizer.pad_id, 512)
    drawn, every_block = set(), set()
    for seed in range(20):
        noise = noise_blocks(batch, B, tokenizer.mask_id, torch.Generator().manual_seed(seed), layout, noised)
        for i, (prompt, completion) in enumerate(rows):
            P, end = len(prompt), len(prompt) + len(completion)
            origin = 0 if layout == "absolute" else P
            assert end % B == origin % B  # the completion ends on a block boundary of the layout
            first = origin + (P - origin) // B * B  # the block holding the completion's first token
            clean, start, stop = (int(x[i]) for x in (noise.clean_lengths, noise.copy_start, noise.copy_end))
            assert int(noise.mask_origin[i]) == origin
            every_block |= {(i, b) for b in range(first, end, B)}
            if noised == "every":
                assert (clean, start, stop) == (end, first, end)
            else:  # one block, after the clean tokens before it
                assert clean == start and (start - first) % B == 0 and stop == min(start + B, end)
                drawn.add((i, start))
            copy = noise.positions[i, clean : clean + stop - start].tolist()
            assert copy == list(range(start, stop))  # the copy sits at the row's own positions
            masked = noise.positions[i][noise.masked[i]].tolist()
            assert noise.masked[i, :clean].sum() == 0 and min(masked) >= P  # never clean, never the prompt
            blocks = {(m - origin) // B for m in masked}
            assert blocks == set(range((max(start, P) - origin) // B, (stop - origin) // B))  # each one
    if noised == "one":
        assert drawn == every_block  # over 20 draws every block of every row is drawn


def test_a_qwen3_checkpoint_converts_into_an_sdar_checkpoint(tmp_path):
    from .real_checkpoints import build_qwen3_checkpoint

    init = build_qwen3_checkpoint(tmp_path / "qwen3", tie=True, with_mask=True)
    config = tmp_path / "sdar.yaml"
    config.write_text(
        "convert: {steps: 2, batch_size: 2, warmup_steps: 1, checkpoint_every: 1}\n"
        "diffusion: {block_size: 4, block_layout: absolute, noised_blocks: every}\n"
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


def test_an_unknown_noised_blocks_setting_is_refused_naming_the_field(tmp_path, capsys):
    from .real_checkpoints import build_qwen3_checkpoint

    init = build_qwen3_checkpoint(tmp_path / "qwen3", tie=True, with_mask=True)
    config = tmp_path / "bad.yaml"
    config.write_text("convert: {steps: 1, batch_size: 2}\ndiffusion: {noised_blocks: all}\n")
    argv = ["convert", "--preset", "smoke", "--config", str(config), "--init", str(init)]
    assert main([*argv, "--out", str(tmp_path / "out"), "--no-progress"]) != 0
    assert "diffusion.noised_blocks: expected one of one, every, got 'all'" in capsys.readouterr().err
    assert not (tmp_path / "out" / "config.json").exists()
