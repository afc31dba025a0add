"""Real-format checkpoints (built by transformers): loading, logits parity, greedy decoding, SDAR's loop."""

from __future__ import annotations

import json
import pickle

import pytest
import torch

from orl.model.checkpoint import load_checkpoint
from orl.model.masks import absolute_block_limits, block_causal_limits, mask_from_limits

from .real_checkpoints import (
    ENDOFTEXT,
    IM_END,
    SDAR_MASK_ID,
    load_hf_qwen3,
    sdar_block_mask,
    sdar_generate,
    transfer_counts,
)

PROMPT = "def add(a, b):\n    return"


def test_sharded_bf16_qwen3_loads_in_its_own_dtype(qwen3_ckpt_dir):
    index = json.loads((qwen3_ckpt_dir / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) >= 2  # really sharded
    ckpt = load_checkpoint(qwen3_ckpt_dir)  # dtype None: config.json says bfloat16
    model = ckpt.model
    assert ckpt.precision == "bfloat16" and ckpt.arch == "Qwen3ForCausalLM" and not ckpt.is_diffusion
    assert model.lm_head.weight is model.model.embed_tokens.weight  # tied, one tensor
    assert (model.config.rope_theta, model.config.max_position_embeddings, model.config.vocab_size) == (
        1e6,
        40960,
        151936,
    )
    assert ckpt.tokenizer.eos_ids == (IM_END, ENDOFTEXT) and ckpt.tokenizer.pad_id == ENDOFTEXT
    assert ckpt.tokenizer.mask_id is None
    assert load_checkpoint(qwen3_ckpt_dir, dtype=torch.float16).precision == "float16"


def test_sdar_checkpoint_is_the_block_diffusion_family_with_absolute_blocks(sdar_ckpt):
    ckpt = load_checkpoint(sdar_ckpt.dir)
    cfg = ckpt.model.config
    assert ckpt.arch == "SDARForCausalLM" and ckpt.is_diffusion
    assert (cfg.attention_mode, cfg.block_layout, cfg.block_size) == ("block-causal", "absolute", 4)
    assert cfg.mask_token_id == SDAR_MASK_ID == ckpt.tokenizer.mask_id
    assert cfg.residual_alpha == 0.0 and not cfg.tie_word_embeddings


@pytest.mark.parametrize("which", ["qwen3", "sdar"])
def test_causal_logits_match_transformers_qwen3(which, qwen3_ckpt_dir, sdar_ckpt):
    ours_dir, hf_dir = (
        (qwen3_ckpt_dir, qwen3_ckpt_dir) if which == "qwen3" else (sdar_ckpt.dir, sdar_ckpt.hf_dir)
    )
    ours = load_checkpoint(ours_dir, dtype=torch.float32).model
    theirs = load_hf_qwen3(hf_dir)
    ids = torch.randint(0, 151669, (2, 19), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        diff = (ours(ids) - theirs(ids).logits).abs().max().item()
    assert diff <= 1e-4, diff


@pytest.mark.parametrize("layout", ["absolute", "after-prompt"])
def test_block_causal_logits_match_transformers_with_a_4d_mask(layout, sdar_ckpt):
    ours = load_checkpoint(sdar_ckpt.dir, dtype=torch.float32).model
    theirs = load_hf_qwen3(sdar_ckpt.hf_dir)
    seq, block, prompt_len = 18, 4, 7
    idx = torch.arange(seq)
    limits = (
        absolute_block_limits(idx[None], block)
        if layout == "absolute"
        else block_causal_limits(idx[None], prompt_len, block)
    )
    mask = mask_from_limits(limits, idx)  # [1, t, t]
    assert not bool(mask.all()) and not bool(torch.equal(mask[0], torch.ones(seq, seq).tril().bool()))
    ids = torch.randint(0, 151669, (1, seq), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        a = ours(ids, mask=mask)
        b = theirs(input_ids=ids, attention_mask=mask[:, None]).logits
    assert (a - b).abs().max().item() <= 1e-4


def _greedy_transformers(model, prompt_ids: list[int], max_new_tokens: int, eos_ids) -> list[int]:
    """Greedy AR decoding over transformers' Qwen3, recomputing the whole sequence each step."""
    seq = list(prompt_ids)
    out: list[int] = []
    with torch.no_grad():
        for _ in range(max_new_tokens):
            token = int(model(torch.tensor([seq])).logits[0, -1].argmax())
            out.append(token)
            if token in eos_ids:
                break
            seq.append(token)
    return out


def _until_eos(tokens: list[int], eos_ids) -> list[int]:
    ends = [i for i, t in enumerate(tokens) if t in eos_ids]
    return tokens[: ends[0] + 1] if ends else tokens


@pytest.mark.parametrize("engine", ["reference", "hf"])
def test_greedy_tokens_of_reference_and_hf_engines_equal_an_independent_loop(engine, qwen3_ckpt_dir, capsys):
    from orl.cli import main
    from orl.engines.registry import build_engine

    ckpt = load_checkpoint(qwen3_ckpt_dir, dtype=torch.float32)
    tok = ckpt.tokenizer
    expected = _greedy_transformers(load_hf_qwen3(qwen3_ckpt_dir), tok.encode(PROMPT), 12, tok.eos_ids)
    gen = build_engine(engine, qwen3_ckpt_dir, dtype=torch.float32).generate(PROMPT, 12)
    # Compared up to the first eos of either kind: the stopping rule is the decoder's, the tokens are the
    # model's.
    assert _until_eos(gen.token_ids, tok.eos_ids) == _until_eos(expected, tok.eos_ids)
    code = main(
        [
            "generate",
            "--ckpt",
            str(qwen3_ckpt_dir),
            "--engine",
            engine,
            "--dtype",
            "float32",
            "--prompt",
            PROMPT,
            "--max-new-tokens",
            "12",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0 and out.startswith(PROMPT + tok.decode_completion(expected))
    assert f"tokens={len(gen.token_ids)}" in out.splitlines()[-1]


def test_loading_never_unpickles(qwen3_ckpt_dir, sdar_ckpt, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a checkpoint load unpickled something")

    for module, name in ((pickle, "load"), (pickle, "loads"), (pickle, "Unpickler"), (torch, "load")):
        monkeypatch.setattr(module, name, refuse)
    load_checkpoint(qwen3_ckpt_dir)
    load_checkpoint(sdar_ckpt.dir)


# --------------------------------------------------------------------------------------
# The SDAR oracle (tests/real_checkpoints.py), checked by hand on a scripted model
# --------------------------------------------------------------------------------------


class ScriptedLM(torch.nn.Module):
    """Predicts token 10 + p at absolute position p with logit SCORES[p] (else 0); records every call."""

    VOCAB, MASK = 50, 49
    SCORES = {5: 3.0, 6: 6.0, 7: 5.0, 8: 0.5, 9: 10.0, 10: 3.0, 11: 6.0, 12: 1.0, 13: 1.0, 14: 1.0, 15: 1.0}

    def __init__(self):
        super().__init__()
        self.anchor = torch.nn.Parameter(torch.zeros(1))  # so the oracle can ask for a device
        self.calls = []

    def forward(self, input_ids, attention_mask, position_ids):
        self.calls.append((input_ids[0].tolist(), position_ids[0].tolist(), attention_mask.clone()))
        logits = torch.zeros(1, input_ids.shape[1], self.VOCAB)
        for i, p in enumerate(position_ids[0].tolist()):
            logits[0, i, 10 + p] = self.SCORES.get(p, 0.0)

        class Out:
            pass

        out = Out()
        out.logits = logits
        return out


def test_sdar_oracle_masks_positions_and_commits_by_hand():
    assert transfer_counts(4, 4) == [1, 1, 1, 1] and transfer_counts(4, 3) == [2, 1, 1]
    assert sdar_block_mask(2, 2).tolist() == [
        [True, True, False, False],
        [True, True, False, False],
        [True, True, True, True],
        [True, True, True, True],
    ]
    lm, M = ScriptedLM(), ScriptedLM.MASK
    prompt = [1, 2, 3, 4, 5]  # P = 5, B = 4: block 0 is all prompt, block 1 = [prompt tail, 3 masks]
    out = sdar_generate(
        lm,
        prompt,
        mask_id=M,
        gen_length=10,
        block_length=4,
        denoising_steps=4,
        remasking_strategy="low_confidence_static",
        stop_ids=[19],
    )
    # Block 1 commits by confidence 6 (score 6), 7 (5), 5 (3); block 2: 9, 11, 10, 8. Token 19
    # (position 9) is a stop id, so block 3 (positions 12-15) is never decoded.
    assert out.tokens == [1, 2, 3, 4, 5, 15, 16, 17, 18, 19, 20, 21]
    assert (out.denoise_forwards, out.store_forwards, out.overwrites) == (7, 2, 0)
    inputs = [c[0] for c in lm.calls]
    assert len(lm.calls) == out.denoise_forwards  # SDAR's store forwards change nothing and are only counted
    assert inputs[:4] == [
        [1, 2, 3, 4, 5, M, M, M],
        [1, 2, 3, 4, 5, M, 16, M],
        [1, 2, 3, 4, 5, M, 16, 17],
        [1, 2, 3, 4, 5, 15, 16, 17, M, M, M, M],
    ]
    assert all(c[1] == list(range(len(c[0]))) for c in lm.calls)  # absolute positions from 0
    mask = lm.calls[0][2][0, 0]
    # Block 0 (all prompt) is bidirectional; block 1 (prompt tail + masks) sees block 0 and all of itself,
    # so the prompt token at position 4 attends to the masks after it.
    assert mask.shape == (8, 8) and bool(mask[:4, :4].all()) and not bool(mask[:4, 4:].any())
    assert bool(mask[4:, :].all())


def test_sdar_oracle_dynamic_threshold_and_the_topk_overwrite_by_hand():
    lm, M = ScriptedLM(), ScriptedLM.MASK
    out = sdar_generate(
        lm,
        [1, 2, 3, 4, 5],
        mask_id=M,
        gen_length=6,
        block_length=4,
        denoising_steps=4,
        remasking_strategy="low_confidence_dynamic",
        confidence_threshold=0.85,
    )
    # p = e^s / (e^s + 49): s=10 -> 0.998, s=6 -> 0.89 pass 0.85; s=5 -> 0.75, s=3 -> 0.29 do not.
    # Block 1: 6 alone passes, then top-1: 7, then 5. Block 2: 9 and 11 together, then 10, then 8.
    assert out.tokens == [1, 2, 3, 4, 5, 15, 16, 17, 18, 19, 20, 21]
    assert (out.denoise_forwards, out.store_forwards) == (6, 2)
    # With 2 commits per step the prompt-tail block has 3 masks: the second step's top-2 takes the
    # last mask and one non-masked position, which SDAR's loop overwrites with the current argmax.
    quirk = sdar_generate(
        ScriptedLM(),
        [1, 2, 3, 4, 5],
        mask_id=M,
        gen_length=3,
        block_length=4,
        denoising_steps=2,
        remasking_strategy="low_confidence_static",
    )
    assert quirk.overwrites == 1 and quirk.denoise_forwards == 2


def test_sdar_oracle_runs_greedy_on_the_sdar_fixture(sdar_ckpt):
    from orl.tokenizer import load_tokenizer

    tok = load_tokenizer(sdar_ckpt.dir)
    model = load_hf_qwen3(sdar_ckpt.hf_dir)
    prompt = tok.encode(PROMPT)
    fixed = sdar_generate(
        model,
        prompt,
        mask_id=tok.mask_id,
        gen_length=12,
        block_length=4,
        denoising_steps=4,
        remasking_strategy="low_confidence_static",
        stop_ids=list(tok.eos_ids),
    )
    dynamic = sdar_generate(
        model,
        prompt,
        mask_id=tok.mask_id,
        gen_length=12,
        block_length=4,
        denoising_steps=4,
        confidence_threshold=0.9,
        stop_ids=list(tok.eos_ids),
    )
    for out in (fixed, dynamic):
        assert out.tokens[: len(prompt)] == prompt and SDAR_MASK_ID not in out.completion
        assert len(out.tokens) % 4 == 0 and out.overwrites == 0
    # One token per step: a forward per position decoded. The threshold commits several at once somewhere.
    assert fixed.denoise_forwards == len(fixed.completion)
    assert dynamic.denoise_forwards < len(dynamic.completion)


def test_digest_covers_the_index_and_every_shard(qwen3_ckpt_dir, tmp_path):
    import shutil

    from orl.model.checkpoint import checkpoint_digest

    copy = tmp_path / "copy"
    shutil.copytree(qwen3_ckpt_dir, copy)
    digest = checkpoint_digest(copy)
    assert digest is not None and digest == checkpoint_digest(qwen3_ckpt_dir)
    shard = sorted(copy.glob("model-*.safetensors"))[-1]
    data = bytearray(shard.read_bytes())
    data[-1] ^= 1  # one bit of one weight
    shard.write_bytes(bytes(data))
    assert checkpoint_digest(copy) != digest


def test_save_checkpoint_sharded_then_single_leaves_one_layout(ar_ckpt_dir, tmp_path):
    from orl.model.checkpoint import save_checkpoint

    ckpt = load_checkpoint(ar_ckpt_dir)
    out = save_checkpoint(ckpt.model, ckpt.tokenizer, tmp_path / "ck", max_shard_bytes=50_000)
    assert (out / "model.safetensors.index.json").is_file() and not (out / "model.safetensors").exists()
    ids = torch.arange(3, 12)[None]
    with torch.no_grad():
        expected = ckpt.model(ids)
        assert torch.equal(load_checkpoint(out).model(ids), expected)
        save_checkpoint(ckpt.model, ckpt.tokenizer, out)
        assert sorted(p.name for p in out.glob("model*")) == ["model.safetensors"]
        assert torch.equal(load_checkpoint(out).model(ids), expected)
