"""The rollout's decoder (decode_blocks with reuse_context: only the rows still decoding, a block's
context keys and values kept from its first step, and that first step over the previous block and its
own) against the full recompute it replaces: the same logits at every step, bit for bit, so that ORL's
training is unchanged by it (the committed checkpoints' digests depend on it)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from orl.decoding import Policy, decode_rule
from orl.decoding.recompute import StepView, decode_blocks
from orl.decoding.rollout import RecomputeRollout, StateCapture, mask_origins
from orl.kernels.onednn import use_onednn_linears
from orl.model.checkpoint import load_checkpoint
from orl.model.sharing import copy_sharing_weights
from orl.tasks import tinycode

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

# The committed tiny base dLLM: the shapes ORL's rollouts run at (head_dim 64, 4 query heads over 2
# key/value heads, blocks of 16), where a block's queries alone are tiled differently by SDPA's CPU kernel.
BASE_DLM = Path(__file__).resolve().parents[1] / "results" / "tiny" / "base" / "dlm"


@pytest.fixture(scope="module", params=["after-prompt", "absolute"])
def dlm(request):
    """The base with a residual adapter that feeds something (as after ORL's first updates), in our block
    layout and in SDAR's."""
    ckpt = load_checkpoint(BASE_DLM)
    ckpt.model.config.block_layout = request.param
    ckpt.model.config.residual_alpha = 1.0
    adapter = ckpt.model.add_residual_adapter()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in adapter.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.05)
    return ckpt


def prompts(tokenizer) -> list[list[int]]:
    """Prompts of several lengths, the longest 17 tokens: in our layout every step's key length is then 1
    past a multiple of 16, where a block's queries alone are tiled differently by SDPA's CPU kernel."""
    ids = [tokenizer.encode(p["prompt"]) for p in tinycode.train_problems(5, 16, "easy")]
    ids = [p for p in ids if len(p) >= 17][:8]
    assert len(ids) == 8, "want 8 prompts of at least 17 tokens"
    return [p[: 17 - 3 * (i % 4)] for i, p in enumerate(ids)]


def steps(model, prompts, rule, reuse: bool, tokenizer) -> tuple[list, object, list[int]]:
    """Every step's (block, step, active rows, their logits), the decode's result, and how many columns
    each forward took."""
    seen, widths = [], []

    def observe(view: StepView) -> None:
        seen.append((view.block, view.step, view.active.clone(), view.logits[view.active].clone()))

    def count(module, args, kwargs) -> None:
        widths.append(kwargs["inputs_embeds"].shape[1])

    hook = model.register_forward_pre_hook(count, with_kwargs=True)
    try:
        result = decode_blocks(
            model,
            prompts,
            rule,
            max_new_tokens=48,
            pad_id=tokenizer.pad_id,
            observer=observe,
            temperature=1.0,
            seeds=list(range(len(prompts))),
            reuse_context=reuse,
        )
    finally:
        hook.remove()
    return seen, result, widths


@pytest.mark.parametrize("linear", ["aten", "onednn"])
def test_reused_context_gives_the_full_recomputes_logits_bit_for_bit(dlm, linear):
    model = dlm.model if linear == "aten" else use_onednn_linears(copy_sharing_weights(dlm.model))
    rule = decode_rule(model.config, dlm.tokenizer.eos_ids, Policy("threshold", 0.9), residual=True)
    batch = prompts(dlm.tokenizer)
    full, full_result, _ = steps(model, batch, rule, False, dlm.tokenizer)
    reused, reused_result, widths = steps(model, batch, rule, True, dlm.tokenizer)
    assert reused_result.completions == full_result.completions
    assert reused_result.nfe == full_result.nfe
    assert len(reused) == len(full)
    for (j, k, active, logits), (j2, k2, active2, logits2) in zip(full, reused, strict=True):
        assert (j, k) == (j2, k2) and torch.equal(active, active2)
        assert torch.equal(logits, logits2), f"block {j} step {k}: logits differ"
    # The paths this must cover: later steps of a block, and steps where some rows are done.
    assert any(k > 0 for _, k, _, _ in full)
    assert any(0 < int(a.sum()) < len(batch) for _, k, a, _ in full if k > 0)
    # ... and the first step of a later block, over the previous block's columns and its own only.
    block = rule.block
    expected = [block if k else 2 * block for j, k, _, _ in reused if j or k]
    assert any(j and not k for j, k, _, _ in reused)
    assert widths[1:] == expected


def test_the_rollout_captures_the_states_a_full_recompute_would(dlm):
    """RecomputeRollout (reuse on) against the states captured from a full recompute of the batch."""
    rule = decode_rule(dlm.model.config, dlm.tokenizer.eos_ids, Policy("threshold", 0.9), residual=True)
    batch = prompts(dlm.tokenizer)
    args = dict(
        max_new_tokens=48, pad_id=dlm.tokenizer.pad_id, temperature=1.0, seeds=list(range(len(batch)))
    )
    rollout = RecomputeRollout()(dlm.model, batch, rule, **args)
    capture = StateCapture(mask_origins(batch, rule))
    full = decode_blocks(dlm.model, batch, rule, observer=capture, reuse_context=False, **args)
    assert rollout.completion_ids == full.completions
    assert rollout.states.differing(capture.states()) == []
    other = capture.states()  # the comparison sees a one-ulp change in any field
    other.residual = torch.nextafter(other.residual, torch.full_like(other.residual, float("inf")))
    other.context = other.context[:-1]
    assert rollout.states.differing(other) == ["context", "residual"]
