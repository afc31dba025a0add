"""ORL: the AEC loss, residual capture and replay, and the bad-input checks of train-orl."""

from __future__ import annotations

import pytest
import torch

from orl.errors import CheckpointError, ConfigError
from orl.train.distributed import World
from orl.train.losses import aec_loss, entropy, gate_stats


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
    assert aec_loss(logits, masked, torch.tensor([True]), prev, rho=0.8, gate=None).item() == 0.0
    # ...and positive when one position fails to contract.
    logits[0, 1] = 0.0  # uniform: entropy log 8 > 0.8 * 1.0
    assert aec_loss(logits, masked, torch.tensor([True]), prev, rho=0.8, gate=None).item() > 0


def test_gate_reads_the_replayed_steps_own_confidence():
    """g_i = 1[sg(c^{(k)}) < τ_gate]: a position the current logits are confident about is skipped."""
    prev_h = torch.tensor([[0.1, 0.1]])  # any current entropy above 0.08 is excess
    logits = torch.zeros(1, 2, 8)
    logits[0, 0, 3] = 6.0  # confident now (c about 0.98), entropy still above rho * 0.1
    masked = torch.ones(1, 2, dtype=torch.bool)
    has_prev = torch.tensor([True])
    gated = aec_loss(logits, masked, has_prev, prev_h, rho=0.8, gate=0.9)
    ungated = aec_loss(logits, masked, has_prev, prev_h, rho=0.8, gate=None)
    excess = entropy(logits)[0] - 0.08
    assert gated.item() == pytest.approx(excess[1].item() / 2)  # one of two positions counts
    assert ungated.item() == pytest.approx(excess.sum().item() / 2)
    closed, removed = gate_stats(logits, masked, has_prev, prev_h, rho=0.8, gate=0.9)
    assert closed == 0.5 and removed == pytest.approx(excess[0].item() / 2)
    # No previous step (k = 0): nothing to contract against.
    assert aec_loss(logits, masked, torch.tensor([False]), prev_h, rho=0.8, gate=None).item() == 0.0


def test_gradient_flows_only_through_the_current_entropy():
    logits = torch.randn(2, 4, 8, requires_grad=True)
    prev_h = torch.full((2, 4), 0.5, requires_grad=True)
    loss = aec_loss(logits, torch.ones(2, 4, dtype=torch.bool), torch.tensor([True, True]), prev_h, rho=0.8,
                    gate=0.9)
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


# ---------------------------------------------------------------------------------------
# The gate, the offline ablation and the seed on real rollouts
# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sharp_dlm(smoke_models):
    """The smoke dLLM with its final norm scaled x3: the same predictions, with the sharper confidences
    of a trained model (the smoke model's stay below 0.35, where no gate at 0.9 ever closes)."""
    from orl.model.checkpoint import load_checkpoint

    ckpt = load_checkpoint(smoke_models[1])
    ckpt.model.config.residual_alpha = 1.0
    with torch.no_grad():
        ckpt.model.model.norm.weight.mul_(3.0)
    return ckpt


@pytest.fixture(scope="module")
def replay_states(sharp_dlm):
    """States a real rollout produced (threshold(τ_train = 0.7), residual on), with the rollout's own
    completions as targets."""
    from orl.decoding import Policy, decode_rule
    from orl.tasks import tinycode
    from orl.train.rollout import attach_targets, prompt_prefixes, rollout

    dlm = sharp_dlm
    prompts = [dlm.tokenizer.encode(p["prompt"]) for p in tinycode.train_problems(11, 8, "easy")]
    rule = decode_rule(dlm.model.config, dlm.tokenizer.eos_ids, Policy("threshold", 0.7))
    result = rollout(dlm.model, prompts, rule, max_new_tokens=32, pad_id=dlm.tokenizer.pad_id)
    states = result.states
    attach_targets(states, result.completion_ids, rule.block, dlm.tokenizer.eos_id, prompt_prefixes(prompts, rule))
    return states


def test_aec_without_gate_differs_from_orl_on_real_replay_states(sharp_dlm, replay_states):
    """The gate closes on real replay states, and where a closed position has entropy excess the two
    objectives differ in loss and gradients.

    At ρ = 0.8 the positions it closes on here (c^(k) >= 0.9) have H^(k) <= 0.3·H^(k-1), so relu already
    zeroes them and the gate changes nothing; ρ = 0.1 gives some of them excess.
    """
    from orl.train.config import load_preset
    from orl.train.losses import masked_ce
    from orl.train.replay import replay_logits

    preset = load_preset("smoke", overrides={"orl": {"aec_rho": 0.1}})
    cfg = preset.orl
    tau = cfg.aec_gate
    states, model = replay_states, sharp_dlm.model
    # The old reading could never close: every position still masked at k had c^(k-1) < τ_train < τ_gate.
    later = states.masked & (states.step > 0)[:, None]
    assert float(states.prev_confidence[later].max()) < 0.7 < tau

    def loss_and_grads(gate):
        """L = CE + λ·L_AEC on the replayed states, as orl_step sums it over its micro-batches."""
        model.zero_grad()
        logits = replay_logits(model, states)
        aec = aec_loss(logits, states.masked, states.step > 0, states.prev_entropy, rho=cfg.aec_rho, gate=gate)
        loss = masked_ce(logits, states.targets, states.masked) + cfg.aec_lambda * aec
        loss.backward()
        gated = gate_stats(logits, states.masked, states.step > 0, states.prev_entropy, cfg.aec_rho, tau)
        return loss.detach(), aec.detach(), gated, [p.grad.clone() for p in model.parameters()]

    orl, orl_aec, orl_gated, orl_grads = loss_and_grads(tau)
    nogate, nogate_aec, nogate_gated, nogate_grads = loss_and_grads(None)
    assert 0.0 < orl_gated[0] == nogate_gated[0] < 1.0, "the gate closes on some real replay positions"
    assert orl_gated[1] == nogate_gated[1] > 0  # ...and at ρ = 0.1 removes some AEC
    assert nogate_aec - orl_aec == pytest.approx(orl_gated[1], rel=1e-4) and nogate > orl
    assert any(not torch.equal(a, b) for a, b in zip(orl_grads, nogate_grads, strict=True))
    # At the default ρ the same closed positions carry no excess: the objectives agree there.
    with torch.no_grad():
        logits = replay_logits(model, states)
    closed = later & (torch.softmax(logits, -1).amax(-1) >= tau)
    assert float((entropy(logits) - 0.8 * states.prev_entropy)[closed].max()) <= 0


def test_offline_replays_every_orl_slice_decoded_by_the_initial_model(smoke_models, tmp_path):
    """Same refreshes and prompt slices as ORL, each decoded by the frozen initial weights."""
    from orl.model.checkpoint import load_checkpoint
    from orl.train.config import load_preset
    from orl.train.orl import OrlStats, collect_states, rollout_prompts, train_orl

    preset = load_preset("smoke", overrides={"orl": {"iterations_steps": 6, "refresh_every": 2}})
    offline = train_orl(preset, smoke_models[1], tmp_path / "offline", ablation="offline", progress=False)
    orl = train_orl(preset, smoke_models[1], tmp_path / "orl", progress=False)
    assert offline["refreshes"] == orl["refreshes"] == 3
    initial = load_checkpoint(smoke_models[1])
    initial.model.config.residual_alpha = preset.orl.residual_alpha  # as train_orl sets it
    stats = OrlStats()
    for refresh in range(3):
        collect_states(initial.model, initial.tokenizer, rollout_prompts(preset, refresh), preset,
                       preset.orl.residual_alpha, stats, progress=False, world=World(device=torch.device("cpu")))
    assert offline["rollout_tpf"] == stats.rollout_tpf
    assert offline["rollout_pass_rate"] == stats.pass_rate
    assert orl["rollout_tpf"][0] == stats.rollout_tpf[0]  # ORL's first slice also comes from the initial model
    assert rollout_prompts(preset, 0) != rollout_prompts(preset, 1)


def test_seed_changes_the_prompts_the_resume_check_and_the_record(smoke_models, tmp_path):
    import json

    from orl.cli import main
    from orl.train.config import load_preset
    from orl.train.orl import rollout_prompts, train_orl

    base, other = load_preset("smoke"), load_preset("smoke", overrides={"orl": {"seed": 1}})
    assert rollout_prompts(base, 0) != rollout_prompts(other, 0)
    out, record = tmp_path / "orl", tmp_path / "train.jsonl"
    args = ["train-orl", "--preset", "smoke", "--init", str(smoke_models[1]), "--out", str(out), "--no-progress",
            "--config", str(tmp_path / "short.yaml")]
    (tmp_path / "short.yaml").write_text("orl: {iterations_steps: 4, refresh_every: 2}\n")
    assert main([*args, "--seed", "3", "--record", str(record)]) == 0
    written = json.loads(record.read_text().splitlines()[0])
    assert written["extra"]["seed"] == 3
    assert len(written["extra"]["gated_fraction"]) == len(written["extra"]["gate_removed_aec"]) == 4
    assert 0 <= written["metrics"]["gated_fraction"] <= 1
    # Resuming the same folder with another seed is refused by the digest.
    (out / "config.json").unlink()  # as if unfinished
    with pytest.raises(CheckpointError, match="config_digest"):
        train_orl(load_preset("smoke", tmp_path / "short.yaml", {"orl": {"seed": 4}}), smoke_models[1], out,
                  progress=False)


def test_captured_states_move_to_the_training_device_whole():
    """Rollout states are kept on the CPU; orl_step and bench-replay move each micro-batch to the device
    its logits are on before the losses read its targets, masks and entropies."""
    from orl.train.rollout import CapturedStates

    n, b = 2, 4
    states = CapturedStates(
        context=[torch.arange(3), torch.arange(5)], mask_origin=torch.zeros(n, dtype=torch.long),
        request=torch.arange(n), block=torch.zeros(n, dtype=torch.long), step=torch.ones(n, dtype=torch.long),
        tokens=torch.zeros(n, b, dtype=torch.long), masked=torch.ones(n, b, dtype=torch.bool),
        residual=torch.zeros(n, b, 8), weight=torch.zeros(n, b), prev_entropy=torch.ones(n, b),
        prev_confidence=torch.zeros(n, b), targets=torch.zeros(n, b, dtype=torch.long))
    moved = states.to("meta")
    tensors = [*moved.context, *(getattr(moved, name) for name in ("mask_origin", "request", "block", "step", "tokens",
                                                                    "masked", "residual", "weight", "prev_entropy",
                                                                    "prev_confidence", "targets"))]
    assert all(t.device.type == "meta" for t in tensors) and len(moved) == n
    assert states.masked.device.type == "cpu"  # the buffer itself stays where it is
