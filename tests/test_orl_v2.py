"""ORL version 2 (docs/method.md §2-3): each loss term against hand-computed values, the residual adapter's
zero start in every decoder, replay = rollout, the shared-clean-context packing, the refresh cadence,
and that no ablation's first update is ORL's."""

from __future__ import annotations

import json
import math

import pytest
import torch

from orl.train.losses import (
    aec_hinge,
    aec_parts,
    capped_reverse_kl,
    dparallel_entropy_terms,
    gate_split,
    kl_anchor_terms,
    masked_ce_terms,
)

# ---------------------------------------------------------------------------------------
# The loss terms, by hand
# ---------------------------------------------------------------------------------------


def test_aec_is_the_pages_worked_example():
    """ρ = 25 %, source 0.40, next 0.36: (0.36 − 0.75·0.40)² = 0.06² = 0.0036; zero once contracted."""
    assert aec_hinge(torch.tensor(0.36), torch.tensor(0.40), 0.25).item() == pytest.approx(0.0036, abs=1e-9)
    assert aec_hinge(torch.tensor(0.29), torch.tensor(0.40), 0.25).item() == 0.0


def test_aec_averages_normalised_entropy_over_the_states_own_masked_positions():
    vocab = 8
    logits = torch.zeros(2, 3, vocab)  # uniform everywhere: normalised entropy 1
    logits[0, 2, 0] = 50.0  # a certain position (entropy 0), masked only in state 0
    masked = torch.tensor([[True, True, True], [True, False, False]])
    source = torch.tensor([0.9, 0.5]) * math.log(vocab)  # H̄_source in nats
    parts = aec_parts(logits, masked, torch.tensor([1, 1]), source, rho=0.25)
    # State 0: H̄_next = (1 + 1 + 0) / 3 = 0.667 < 0.75·0.9 = 0.675, contracted enough: no loss.
    assert parts.loss[0].item() == 0.0
    assert parts.loss[1].item() == pytest.approx((1 - 0.75 * 0.5) ** 2, abs=1e-6)
    total, pairs = parts.terms()
    active, hinge = parts.stats()
    assert pairs.item() == 2 and active.item() == 1  # state 0 contracted enough (0.667 < 0.675)
    assert total.item() == pytest.approx(0.625**2, abs=1e-6) and hinge.item() == pytest.approx(total.item())
    # Step 0 has no source state: no pair.
    assert aec_parts(logits, masked, torch.tensor([0, 0]), source, 0.25).terms()[1].item() == 0


def test_aec_gradient_flows_through_the_replayed_entropy_only():
    logits = torch.randn(2, 4, 8, requires_grad=True)
    source = torch.full((2,), 0.2, requires_grad=True)
    parts = aec_parts(logits, torch.ones(2, 4, dtype=torch.bool), torch.tensor([1, 2]), source, rho=0.25)
    parts.terms()[0].backward()
    assert logits.grad.abs().sum() > 0 and source.grad is None


def test_gate_splits_masked_positions_by_the_rollouts_confidence():
    masked = torch.tensor([[True, True, True, False]])
    confidence = torch.tensor([[0.95, 0.5, 0.9, 0.99]])
    uncertain, confident = gate_split(masked, confidence, 0.9)
    assert uncertain.tolist() == [[False, True, False, False]]
    assert confident.tolist() == [[True, False, True, False]]  # c >= τ_gate; never an unmasked position
    logits = torch.zeros(1, 4, 8)
    targets = torch.zeros(1, 4, dtype=torch.long)
    total, count = masked_ce_terms(logits, targets, uncertain)
    assert count.item() == 1 and total.item() == pytest.approx(math.log(8))


def test_capped_reverse_kl_by_hand():
    p = torch.tensor([0.5, 0.5])
    q = torch.tensor([0.9, 0.1])
    kl = float((p * (p / q).log()).sum())  # 0.5·ln(0.5/0.9) + 0.5·ln(0.5/0.1) = 0.5108...
    logits, ref = p.log()[None, None], q.log()[None, None]
    assert capped_reverse_kl(logits, ref, 10.0).item() == pytest.approx(kl, rel=1e-5)
    assert capped_reverse_kl(logits, ref, 0.3).item() == pytest.approx(0.3)  # min(KL, κ)
    assert capped_reverse_kl(ref, ref, 1.0).item() == pytest.approx(0.0, abs=1e-7)
    confident = torch.tensor([[True]])
    total, count = kl_anchor_terms(logits, ref, confident, 0.3)
    assert (total.item(), count.item()) == (pytest.approx(0.3), 1)
    # The reference gets no gradient; the capped term none either (flat past κ).
    logits = logits.clone().requires_grad_(True)
    ref = ref.clone().requires_grad_(True)
    capped_reverse_kl(logits, ref, 10.0).sum().backward()
    assert logits.grad.abs().sum() > 0 and ref.grad is None


def test_dparallel_entropy_counts_correct_predictions_at_its_temperature():
    logits = torch.tensor([[[2.0, 0.0, 0.0], [0.0, 2.0, 0.0]]])
    targets = torch.tensor([[0, 0]])  # the first is predicted correctly, the second not
    total, count = dparallel_entropy_terms(
        logits, targets, torch.ones(1, 2, dtype=torch.bool), temperature=0.5
    )
    p = torch.softmax(logits[0, 0] / 0.5, -1)
    assert count.item() == 1 and total.item() == pytest.approx(float(-(p * p.log()).sum()), rel=1e-5)


# ---------------------------------------------------------------------------------------
# The residual adapter in the decoders
# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def base(smoke_models):
    from orl.model.checkpoint import load_checkpoint

    return load_checkpoint(smoke_models[1])


def _with_adapter(smoke_models, scale: float = 0.0):
    """The smoke dLLM plus a residual adapter (fresh: zero output; scale > 0: W₂ random, a trained one)."""
    from orl.model.checkpoint import load_checkpoint

    ckpt = load_checkpoint(smoke_models[1])
    adapter = ckpt.model.add_residual_adapter()
    ckpt.model.config.residual_alpha = 1.0
    if scale:
        with torch.no_grad():
            adapter.w2.weight.normal_(0.0, scale, generator=torch.Generator().manual_seed(0))
    return ckpt


def _decode_logits(ckpt, prompts, policy):
    from orl.decoding import decode_blocks, decode_rule

    rule = decode_rule(ckpt.model.config, ckpt.tokenizer.eos_ids, policy)
    seen = []
    out = decode_blocks(
        ckpt.model,
        prompts,
        rule,
        max_new_tokens=24,
        pad_id=ckpt.tokenizer.pad_id,
        observer=lambda view: seen.append(view.logits.clone()),
    )
    return out.completions, seen, rule


def test_a_fresh_adapter_decodes_bit_identically_to_no_residual(smoke_models, base):
    """Reference decoder (full recompute) and dlmrt: same tokens, same NFE, bit-identical logits."""
    from orl.decoding import Policy
    from orl.engines.dlmrt.engine import DlmrtEngine
    from orl.tasks import tinycode

    fresh = _with_adapter(smoke_models)
    assert fresh.model.config.residual_adapter == {"form": "W2·SiLU(W1·RMSNorm(z))", "shape": [64, 64]}
    policy = Policy("threshold", 0.5)
    problems = tinycode.train_problems(3, 3, "easy")
    prompts = [base.tokenizer.encode(p["prompt"]) for p in problems]
    with_adapter, logits_a, rule = _decode_logits(fresh, prompts, policy)
    without, logits_b, rule_b = _decode_logits(base, prompts, policy)
    assert rule.alpha == 1.0 and rule.residual_form == "adapter" and rule_b.alpha == 0.0
    assert with_adapter == without and len(logits_a) == len(logits_b) > len(prompts)
    assert all(torch.equal(a, b) for a, b in zip(logits_a, logits_b, strict=True))
    engines = [DlmrtEngine(c, policy, compiled=False) for c in (fresh, base)]
    for p in problems:
        a, b = (e.generate(p["prompt"], 24) for e in engines)
        assert a.token_ids == b.token_ids and a.nfe == b.nfe
    # A trained (non-zero) adapter changes what the model decodes from.
    trained, logits_c, _ = _decode_logits(_with_adapter(smoke_models, 0.5), prompts, policy)
    assert any(not torch.equal(a, c) for a, c in zip(logits_a, logits_c, strict=False))


def test_dlmrt_runs_the_same_adapter_as_the_reference_decoder(smoke_models):
    from orl.decoding import Policy
    from orl.engines.dlmrt.engine import DlmrtEngine
    from orl.engines.reference import ReferenceDiffusion
    from orl.tasks import tinycode

    ckpt = _with_adapter(smoke_models, 0.5)
    policy = Policy("threshold", 0.5)
    reference, engine = ReferenceDiffusion(ckpt, policy), DlmrtEngine(ckpt, policy, compiled=False)
    for p in tinycode.train_problems(4, 3, "easy"):
        a, b = reference.generate(p["prompt"], 24), engine.generate(p["prompt"], 24)
        assert a.token_ids == b.token_ids and a.nfe == b.nfe


@pytest.mark.parametrize("share_context", [False, True])
def test_replay_with_the_captured_z_reproduces_the_rollouts_logits(smoke_models, share_context):
    """Rollout = replay through a trained adapter: each captured state's logits come back (to 1e-5),
    replayed alone or packed with the other states of its block on one clean context."""
    from orl.decoding import Policy, decode_blocks, decode_rule
    from orl.decoding.rollout import StateCapture
    from orl.tasks import tinycode
    from orl.train.replay import context_groups, replay_logits

    ckpt = _with_adapter(smoke_models, 0.5)
    prompts = [ckpt.tokenizer.encode(p["prompt"]) for p in tinycode.train_problems(5, 4, "easy")]
    rule = decode_rule(ckpt.model.config, ckpt.tokenizer.eos_ids, Policy("threshold", 0.5))
    capture, logits = StateCapture([len(p) for p in prompts]), []

    def observe(view):
        capture(view)
        logits.extend(view.logits[i].float().clone() for i in view.active.nonzero().flatten().tolist())

    decode_blocks(
        ckpt.model, prompts, rule, max_new_tokens=24, pad_id=ckpt.tokenizer.pad_id, observer=observe
    )
    states = capture.states()
    assert (states.step > 0).any() and (states.weight[states.step > 0] == 1.0).all()
    groups = context_groups(states, share_context)
    assert (len(groups) < len(states)) == share_context  # shared: fewer copies of the clean context
    with torch.no_grad():
        replayed = replay_logits(ckpt.model, states, share_context=share_context)
        packed = replay_logits(ckpt.model, states, pack_tokens=400, share_context=share_context)
    expected = torch.stack(logits)
    assert (replayed - expected).abs().max().item() <= 1e-5
    assert (packed - expected).abs().max().item() <= 1e-5


def test_a_packed_state_sees_its_context_and_itself_only(smoke_models, base):
    """Staircase visibility: changing one noisy state of a shared segment changes no other state's logits."""
    from orl.decoding import Policy, decode_rule
    from orl.decoding.rollout import rollout
    from orl.tasks import tinycode
    from orl.train.replay import context_groups, replay_logits

    prompts = [base.tokenizer.encode(p["prompt"]) for p in tinycode.train_problems(6, 2, "easy")]
    rule = decode_rule(base.model.config, base.tokenizer.eos_ids, Policy("threshold", 0.99))
    states = rollout(base.model, prompts, rule, max_new_tokens=16, pad_id=base.tokenizer.pad_id).states
    group = max(context_groups(states), key=len)
    assert len(group) >= 3
    with torch.no_grad():
        before = replay_logits(base.model, states)
        states.tokens[group[0]] = base.tokenizer.eos_id  # another noisy state of the same segment
        states.masked[group[0]] = False
        after = replay_logits(base.model, states)
    others = [i for i in range(len(states)) if i != group[0]]
    assert torch.equal(before[others], after[others])
    assert not torch.equal(before[group[0]], after[group[0]])


# ---------------------------------------------------------------------------------------
# The loop on the smoke preset
# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smoke_orl(smoke_models, tmp_path_factory):
    from orl.train.config import load_preset
    from orl.train.orl import train_orl

    out = tmp_path_factory.mktemp("orl2") / "orl"
    summary = train_orl(
        load_preset("smoke", overrides={"orl": {"isolation": "fallback"}}),
        smoke_models[1],
        out,
        progress=False,
    )
    return out, summary


def test_the_smoke_run_exercises_every_term_and_logs_them(smoke_orl):
    from orl.train.orl import LOG_KEYS

    out, summary = smoke_orl
    lines = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert len(lines) == 4 and all(set(LOG_KEYS) <= set(line) for line in lines)
    assert any(0 < line["gated_share"] < 1 for line in lines), "the gate splits the positions"
    assert any(line["aec_active_share"] > 0 and line["aec_mean"] > 0 for line in lines), "an active AEC hinge"
    assert any(line["retained_fraction"] > 0 for line in lines), "a retained trajectory"
    assert all(line["loss_kl"] >= 0 and "loss_ce" in line and "loss_aec" in line for line in lines)
    assert any(line["kl_anchor_mean"] > 0 for line in lines[1:])  # θ has moved from θ₀
    assert lines[0]["adapter_norm"] == 0.0 and lines[-1]["adapter_norm"] > 0  # zero start, then learned
    assert all(line["grad_norm_adapter"] >= 0 for line in lines)  # the adapter's own group, logged
    config = json.loads((out / "config.json").read_text())
    assert config["residual_adapter"]["shape"] == [64, 64] and config["residual_alpha"] == 1.0
    assert summary["per_update"]["gated_share"] == [line["gated_share"] for line in lines]


def test_fresh_rollouts_after_every_update(smoke_orl):
    """The refresh cadence: one rollout batch of N·K per update, each used by one update."""
    from orl.train.config import load_preset

    cfg = load_preset("smoke").orl
    out, summary = smoke_orl
    lines = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert summary["refreshes"] == len(lines) == cfg.iterations_steps
    assert summary["rollouts"] == cfg.iterations_steps * cfg.rollout_prompts * cfg.rollouts_per_prompt
    assert all(line["rollouts_per_update"] == cfg.rollout_prompts * cfg.rollouts_per_prompt for line in lines)
    assert all(line["updates_per_rollout"] == 1 for line in lines)


def test_an_orl_checkpoint_reloads_and_exports_without_its_adapter(smoke_orl, tmp_path):
    from orl.model.checkpoint import load_checkpoint
    from orl.model.export import export_checkpoint

    out, _ = smoke_orl
    ckpt = load_checkpoint(out)
    assert ckpt.model.residual_adapter is not None and ckpt.model.residual_adapter.w2.weight.abs().sum() > 0
    result = export_checkpoint(out, tmp_path / "sdar", "sdar")
    assert any("DROPPED" in note for note in result.notes)
    exported = json.loads((tmp_path / "sdar" / "config.json").read_text())
    assert "residual_adapter" not in exported and exported["residual_alpha"] == 0.0


def test_nvfp4_keeps_the_adapter_in_high_precision(smoke_models):
    from orl.kernels.quantize import quantize_model

    ckpt = _with_adapter(smoke_models)
    report = quantize_model(ckpt.model)
    assert {"residual_adapter.w1", "residual_adapter.w2"} <= set(report["ignore"])


def _first_update_gradients(monkeypatch, preset, init, out, ablation: str) -> dict[str, torch.Tensor]:
    """The gradients of an ablation's first update, from the real loop: `train` is replaced by one that
    builds update 0 with the run's own step function and back-propagates it."""
    import orl.train.orl as orl_module
    from orl.train.distributed import World
    from orl.train.loop import _backward

    grads = {}

    def first_step(model, step_fn, cfg, out_dir, tokenizer, **kwargs):
        step = step_fn(0)
        _backward(step, World(device=torch.device("cpu")))
        grads.update({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
        raise StopIteration

    monkeypatch.setattr(orl_module, "train", first_step)
    with pytest.raises(StopIteration):
        orl_module.train_orl(preset, init, out, ablation=ablation, progress=False)
    return grads


@pytest.mark.slow
def test_no_ablations_first_update_is_orls(smoke_models, tmp_path, monkeypatch):
    from orl.train.config import load_preset
    from orl.train.orl_variants import ABLATIONS

    preset = load_preset("smoke", overrides={"orl": {"isolation": "fallback", "iterations_steps": 2}})
    grads = {
        a: _first_update_gradients(monkeypatch, preset, smoke_models[1], tmp_path / a, a) for a in ABLATIONS
    }
    orl = grads["none"]
    assert "residual_adapter.w2.weight" in orl and orl["residual_adapter.w2.weight"].abs().sum() > 0
    for ablation in ABLATIONS[1:]:
        other = grads[ablation]
        # A parameter a variant lacks (the adapter of no-residual) has no update there: a zero gradient.
        names = set(orl) | set(other)
        zero = torch.zeros(())
        assert any(not torch.allclose(orl.get(n, zero), other.get(n, zero)) for n in names), (
            f"{ablation}'s first update is ORL's"
        )


def test_rollouts_sample_at_t_roll_each_row_from_its_own_seed(base):
    """K rollouts of one prompt differ at T_roll > 0; a row's samples depend on its seed, not its batch."""
    from orl.decoding import Policy, decode_rule
    from orl.decoding.rollout import rollout
    from orl.tasks import tinycode

    ids = base.tokenizer.encode(tinycode.train_problems(0, 1, "easy")[0]["prompt"])
    other = base.tokenizer.encode(tinycode.train_problems(1, 1, "easy")[0]["prompt"])
    rule = decode_rule(base.model.config, base.tokenizer.eos_ids, Policy("threshold", 0.9))
    kwargs = {"max_new_tokens": 24, "pad_id": base.tokenizer.pad_id}
    greedy = rollout(base.model, [ids] * 3, rule, **kwargs).completion_ids
    sampled = rollout(base.model, [ids] * 3, rule, temperature=0.7, seeds=[1, 2, 3], **kwargs).completion_ids
    assert greedy[0] == greedy[1] == greedy[2] and len({tuple(c) for c in sampled}) > 1
    mixed = rollout(base.model, [other, ids], rule, temperature=0.7, seeds=[9, 2], **kwargs).completion_ids
    assert mixed[1] == sampled[1]
