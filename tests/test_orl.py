"""ORL: the AEC loss, residual capture and replay, and the bad-input checks of train-orl."""

from __future__ import annotations

import pytest
import torch

from orl.errors import CheckpointError, ConfigError
from orl.train.losses import aec_loss, entropy


def _logits_with_entropy(target_entropy: torch.Tensor, vocab: int = 8) -> torch.Tensor:
    """Logits whose softmax has (about) the wanted entropy: a peaked distribution, tuned by bisection."""
    scale_lo, scale_hi = torch.zeros_like(target_entropy), torch.full_like(target_entropy, 50.0)
    base = torch.zeros(vocab)
    base[0] = 1.0
    for _ in range(60):
        mid = (scale_lo + scale_hi) / 2
        h = entropy(mid[..., None] * base)
        too_flat = h > target_entropy
        scale_lo = torch.where(too_flat, mid, scale_lo)
        scale_hi = torch.where(too_flat, scale_hi, mid)
    return scale_hi[..., None] * base


def test_aec_is_zero_when_every_entropy_contracts_by_rho():
    prev = torch.tensor([[1.5, 1.0, 0.8, 2.0]])
    logits = _logits_with_entropy(prev * 0.8 * 0.99)  # contracted a bit more than rho = 0.8
    masked = torch.ones(1, 4, dtype=torch.bool)
    loss = aec_loss(logits, masked, torch.tensor([True]), prev, torch.zeros(1, 4), rho=0.8, gate=0.9)
    assert loss.item() == 0.0
    # ...and positive when one position fails to contract.
    logits[0, 1] = 0.0  # uniform: entropy log 8 > 0.8 * 1.0
    assert aec_loss(logits, masked, torch.tensor([True]), prev, torch.zeros(1, 4), rho=0.8, gate=0.9).item() > 0


def test_gate_removes_confident_positions():
    prev_h = torch.tensor([[1.0, 1.0]])
    logits = torch.zeros(1, 2, 8)  # uniform: entropy log 8 > rho * 1.0 at both positions
    masked = torch.ones(1, 2, dtype=torch.bool)
    confident = torch.tensor([[0.95, 0.1]])  # first position already confident at k-1
    gated = aec_loss(logits, masked, torch.tensor([True]), prev_h, confident, rho=0.8, gate=0.9)
    ungated = aec_loss(logits, masked, torch.tensor([True]), prev_h, confident, rho=0.8, gate=None)
    excess = torch.log(torch.tensor(8.0)) - 0.8
    assert gated.item() == pytest.approx(excess.item() / 2)  # one of two positions counts
    assert ungated.item() == pytest.approx(excess.item())
    # No previous step (k = 0): nothing to contract against.
    assert aec_loss(logits, masked, torch.tensor([False]), prev_h, confident, rho=0.8, gate=None).item() == 0.0


def test_gradient_flows_only_through_the_current_step():
    logits = torch.randn(2, 4, 8, requires_grad=True)
    prev_h = torch.full((2, 4), 0.5, requires_grad=True)
    loss = aec_loss(logits, torch.ones(2, 4, dtype=torch.bool), torch.tensor([True, True]), prev_h,
                    torch.zeros(2, 4), rho=0.8, gate=0.9)
    loss.backward()
    assert logits.grad is not None and logits.grad.abs().sum() > 0
    assert prev_h.grad is None  # the captured H^{(k-1)} is detached


@pytest.fixture(scope="module")
def dlm(smoke_models):
    from orl.model.checkpoint import load_checkpoint

    ckpt = load_checkpoint(smoke_models[1])
    ckpt.model.config.residual_alpha = 1.0  # exercise the residual path
    return ckpt


@pytest.mark.parametrize("pack_tokens", [0, 200])
def test_replaying_a_captured_state_reproduces_its_logits(dlm, pack_tokens):
    from orl.decoding import Policy, decode_blocks, decode_rule
    from orl.tasks import tinycode
    from orl.train.replay import replay_logits
    from orl.train.rollout import StateCapture

    prompts = [dlm.tokenizer.encode(p["prompt"]) for p in tinycode.train_problems(5, 6, "easy")]
    rule = decode_rule(dlm.model.config, dlm.tokenizer.eos_ids, Policy("threshold", 0.5))
    capture, logits = StateCapture([len(p) for p in prompts]), []

    def observe(view):  # the rollout's capture, plus the logits each captured state produced
        capture(view)
        logits.extend(view.logits[i].float().clone() for i in view.active.nonzero().flatten().tolist())

    decode_blocks(dlm.model, prompts, rule, max_new_tokens=32, pad_id=dlm.tokenizer.pad_id, observer=observe)
    states = capture.states()
    assert rule.alpha == 1.0 and len(states) >= len(prompts) and (states.step > 0).any(), "want residual states"
    with torch.no_grad():
        replayed = replay_logits(dlm.model, states, pack_tokens=pack_tokens)
    assert (replayed - torch.stack(logits)).abs().max().item() <= 1e-5


def test_rollout_matches_the_reference_decoder(dlm):
    """The batched rollout (left-padded rows) decodes each prompt exactly as one request alone does."""
    from orl.decoding import Policy, decode_rule
    from orl.engines.reference import ReferenceDiffusion
    from orl.tasks import tinycode
    from orl.train.rollout import rollout

    problems = tinycode.train_problems(7, 5, "easy")
    policy = Policy("threshold", 0.6)
    rule = decode_rule(dlm.model.config, dlm.tokenizer.eos_ids, policy)
    result = rollout(dlm.model, [dlm.tokenizer.encode(p["prompt"]) for p in problems], rule, max_new_tokens=32,
                     pad_id=dlm.tokenizer.pad_id)
    reference = ReferenceDiffusion(dlm, policy)
    for i, p in enumerate(problems):
        gen = reference.generate(p["prompt"], 32)
        assert result.completion_ids[i] == gen.token_ids
        assert result.nfe[i] == gen.nfe


def test_packed_layout_balances_cost_and_respects_budget():
    from orl.train.replay import packed_layout

    lengths = [90, 80, 70, 40, 30, 30, 20, 20, 10]
    layout = packed_layout(lengths, 160)
    used = [0] * layout.rows
    for i, n in enumerate(lengths):
        assert layout.start[i] == used[layout.row[i]], "segments are contiguous"
        used[layout.row[i]] += n
    assert max(used) <= 160 and layout.rows == -(-sum(lengths) // 160)


def test_init_that_is_autoregressive_is_refused(smoke_models, tmp_path):
    from orl.train.config import load_preset
    from orl.train.orl import train_orl

    with pytest.raises(CheckpointError, match="autoregressive"):
        train_orl(load_preset("smoke"), smoke_models[0], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_block_size_mismatch_is_refused(smoke_models, tmp_path):
    from orl.train.config import load_preset
    from orl.train.orl import train_orl

    preset = load_preset("smoke", overrides={"diffusion": {"block_size": 4}})
    with pytest.raises(ConfigError, match="block_size"):
        train_orl(preset, smoke_models[1], tmp_path / "out")


def test_empty_prompt_set_is_refused(smoke_models, tmp_path):
    from orl.train.config import load_preset
    from orl.train.orl import train_orl

    preset = load_preset("smoke", overrides={"orl": {"rollout_prompts": 0}})
    with pytest.raises(ConfigError, match="rollout_prompts"):
        train_orl(preset, smoke_models[1], tmp_path / "out")
