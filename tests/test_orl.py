"""ORL: residual capture and replay, and the bad-input checks of train-orl (version 2:
tests/test_orl_v2.py)."""

from __future__ import annotations

import pytest
import torch

from orl.errors import CheckpointError, ConfigError


@pytest.fixture(scope="module")
def dlm(smoke_models):
    from orl.model.checkpoint import load_checkpoint

    ckpt = load_checkpoint(smoke_models[1])
    ckpt.model.config.residual_alpha = 1.0  # exercise the residual path
    return ckpt


@pytest.mark.parametrize("pack_tokens", [0, 200])
def test_replaying_a_captured_state_reproduces_its_logits(dlm, pack_tokens):
    from orl.decoding import Policy, decode_blocks, decode_rule
    from orl.decoding.rollout import StateCapture
    from orl.tasks import tinycode
    from orl.train.replay import replay_logits

    prompts = [dlm.tokenizer.encode(p["prompt"]) for p in tinycode.train_problems(5, 6, "easy")]
    rule = decode_rule(dlm.model.config, dlm.tokenizer.eos_ids, Policy("threshold", 0.5))
    capture, logits = StateCapture([len(p) for p in prompts]), []

    def observe(view):  # the rollout's capture, plus the logits each captured state produced
        capture(view)
        logits.extend(view.logits[i].float().clone() for i in view.active.nonzero().flatten().tolist())

    decode_blocks(dlm.model, prompts, rule, max_new_tokens=32, pad_id=dlm.tokenizer.pad_id, observer=observe)
    states = capture.states()
    assert rule.alpha == 1.0 and len(states) >= len(prompts) and (states.step > 0).any(), (
        "want residual states"
    )
    with torch.no_grad():
        replayed = replay_logits(dlm.model, states, pack_tokens=pack_tokens)
    assert (replayed - torch.stack(logits)).abs().max().item() <= 1e-5


def test_rollout_matches_the_reference_decoder(dlm):
    """The batched rollout (left-padded rows) decodes each prompt exactly as one request alone does."""
    from orl.decoding import Policy, decode_rule
    from orl.decoding.rollout import rollout
    from orl.engines.reference import ReferenceDiffusion
    from orl.tasks import tinycode

    problems = tinycode.train_problems(7, 5, "easy")
    policy = Policy("threshold", 0.6)
    rule = decode_rule(dlm.model.config, dlm.tokenizer.eos_ids, policy)
    result = rollout(
        dlm.model,
        [dlm.tokenizer.encode(p["prompt"]) for p in problems],
        rule,
        max_new_tokens=32,
        pad_id=dlm.tokenizer.pad_id,
    )
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


def test_seed_changes_the_prompts_the_resume_check_and_the_record(smoke_models, tmp_path):
    import json

    from orl.cli import main
    from orl.train.config import load_preset
    from orl.train.orl import train_orl
    from orl.train.orl_rollouts import rollout_prompts

    base, other = load_preset("smoke"), load_preset("smoke", overrides={"orl": {"seed": 1}})
    assert rollout_prompts(base, 0) != rollout_prompts(other, 0)
    out, record = tmp_path / "orl", tmp_path / "train.jsonl"
    args = [
        "train-orl",
        "--preset",
        "smoke",
        "--init",
        str(smoke_models[1]),
        "--out",
        str(out),
        "--no-progress",
        "--config",
        str(tmp_path / "short.yaml"),
    ]
    (tmp_path / "short.yaml").write_text("orl: {iterations_steps: 2, checkpoint_every: 1}\n")
    assert main([*args, "--seed", "3", "--record", str(record)]) == 0
    written = json.loads(record.read_text().splitlines()[0])
    assert written["extra"]["seed"] == 3
    assert len(written["extra"]["gated_share"]) == len(written["extra"]["retained_fraction"]) == 2
    assert 0 <= written["metrics"]["gated_share"] <= 1
    # Resuming the same folder with another seed is refused by the digest.
    # As if unfinished: no exported checkpoint, no summary (a finished run whose checkpoint alone was
    # removed gives way to the new configuration instead; tests/test_train_resume.py).
    (out / "config.json").unlink()
    (out / "train_summary.json").unlink()
    with pytest.raises(CheckpointError, match="config_digest"):
        train_orl(
            load_preset("smoke", tmp_path / "short.yaml", {"orl": {"seed": 4}}),
            smoke_models[1],
            out,
            progress=False,
        )


def test_captured_states_move_to_the_training_device_whole():
    """Rollout states are kept on the CPU; orl_step and bench-replay move each micro-batch to the device
    its logits are on before the losses read its targets, masks and entropies."""
    from orl.decoding.rollout import CapturedStates

    n, b = 2, 4
    states = CapturedStates(
        context=[torch.arange(3), torch.arange(5)],
        mask_origin=torch.zeros(n, dtype=torch.long),
        request=torch.arange(n),
        block=torch.zeros(n, dtype=torch.long),
        step=torch.ones(n, dtype=torch.long),
        tokens=torch.zeros(n, b, dtype=torch.long),
        masked=torch.ones(n, b, dtype=torch.bool),
        residual=torch.zeros(n, b, 8),
        weight=torch.zeros(n, b),
        prev_entropy=torch.ones(n, b),
        prev_confidence=torch.zeros(n, b),
        confidence=torch.zeros(n, b),
        source_entropy=torch.zeros(n),
        targets=torch.zeros(n, b, dtype=torch.long),
    )
    moved = states.to("meta")
    tensors = [
        *moved.context,
        *(
            getattr(moved, name)
            for name in (
                "mask_origin",
                "request",
                "block",
                "step",
                "tokens",
                "masked",
                "residual",
                "weight",
                "prev_entropy",
                "prev_confidence",
                "confidence",
                "source_entropy",
                "targets",
            )
        ),
    ]
    assert all(t.device.type == "meta" for t in tensors) and len(moved) == n
    assert states.masked.device.type == "cpu"  # the buffer itself stays where it is
