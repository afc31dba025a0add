"""ORL rollouts decoded by dlmrt (orl/engines/dlmrt/rollout.py) against the recompute rollout they replace."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from orl.decoding import Policy, decode_rule
from orl.decoding.rollout import RecomputeRollout
from orl.engines.dlmrt.rollout import DlmrtRollout
from orl.errors import CheckpointError, InputError
from orl.model.checkpoint import load_checkpoint
from orl.tasks import tinycode
from orl.train.replay import replay_logits

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

MAX_NEW = 32  # 4 blocks of the smoke preset's block size 8
EXACT = ("context", "mask_origin", "request", "block", "step", "tokens", "masked")
ROUNDED = ("residual", "weight", "prev_entropy", "prev_confidence")  # cache against recompute: float rounding


def sharp_dlm(path, layout: str, device: str = "cpu"):
    """The smoke dLLM with the residual on (α = 1), sharpened so that threshold(0.7) commits several
    positions per step (its own confidences stay below 0.35), in the given block layout."""
    ckpt = load_checkpoint(path, device=device)
    ckpt.model.config.residual_alpha = 1.0
    ckpt.model.config.block_layout = layout
    with torch.no_grad():
        ckpt.model.model.norm.weight.mul_(3.0)
    return ckpt


@pytest.fixture(scope="module", params=["after-prompt", "absolute"])
def dlm(request, smoke_models):
    """sharp_dlm in our layout and in SDAR's."""
    return sharp_dlm(smoke_models[1], request.param)


def train_prompts(tokenizer) -> list[list[int]]:
    return [tokenizer.encode(p["prompt"]) for p in tinycode.train_problems(11, 8, "easy")]


@pytest.fixture(scope="module")
def prompts(dlm):
    return train_prompts(dlm.tokenizer)


def _rollouts(dlm, prompts, *, mode="eager", backend="inductor"):
    rule = decode_rule(dlm.model.config, dlm.tokenizer.eos_ids, Policy("threshold", 0.7), residual=True)
    args = dict(max_new_tokens=MAX_NEW, pad_id=dlm.tokenizer.pad_id)
    reference = RecomputeRollout()(dlm.model, prompts, rule, **args)
    dlmrt = DlmrtRollout(dlm.tokenizer, mode=mode, compile_backend=backend)(dlm.model, prompts, rule, **args)
    return rule, reference, dlmrt


def _assert_same_states(a, b):
    assert len(a) == len(b)
    for name in EXACT:
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, list):
            assert all(torch.equal(u, v) for u, v in zip(x, y, strict=True)), name
        else:
            assert torch.equal(x, y), name
    for name in ROUNDED:
        torch.testing.assert_close(getattr(a, name), getattr(b, name), atol=1e-4, rtol=1e-4, msg=name)


def test_dlmrt_rollout_captures_the_recompute_rollouts_states(dlm, prompts):
    rule, reference, dlmrt = _rollouts(dlm, prompts)
    assert rule.alpha == 1.0 and (reference.states.step > 1).any(), "want residual states past step 1"
    assert (reference.states.block > 0).any(), "want states of later blocks"
    assert dlmrt.completion_ids == reference.completion_ids
    assert dlmrt.nfe == reference.nfe
    _assert_same_states(dlmrt.states, reference.states)
    for a, b in zip(dlmrt.entropy_per_step, reference.entropy_per_step, strict=True):
        assert a == pytest.approx(b, abs=1e-4)


def test_compiled_dlmrt_rollout_captures_the_same_states_and_follows_weight_updates(smoke_models):
    """The watcher reads between chunk launches, so a compiled chunk (aot_eager: fullgraph, without
    inductor's code generation) captures the same states; after the weights change in place, as an
    optimizer step changes them, the same compiled engine decodes with the new weights. (Our layout:
    the layouts share the chunk code, and the eager test covers both.)"""
    dlm = sharp_dlm(smoke_models[1], "after-prompt")
    prompts = train_prompts(dlm.tokenizer)
    rule = decode_rule(dlm.model.config, dlm.tokenizer.eos_ids, Policy("threshold", 0.7), residual=True)
    args = dict(max_new_tokens=MAX_NEW, pad_id=dlm.tokenizer.pad_id)
    compiled = DlmrtRollout(dlm.tokenizer, mode="compile", compile_backend="aot_eager")
    confidences = []
    for scale in (1.0, 0.7):
        with torch.no_grad():
            dlm.model.model.norm.weight.mul_(scale)
        reference = RecomputeRollout()(dlm.model, prompts, rule, **args)
        dlmrt = compiled(dlm.model, prompts, rule, **args)
        assert dlmrt.completion_ids == reference.completion_ids
        _assert_same_states(dlmrt.states, reference.states)
        confidences.append(reference.states.prev_confidence)
    assert len(compiled._engines) == 1
    assert confidences[0].shape != confidences[1].shape or not torch.allclose(*confidences), "weights changed"


def test_replaying_dlmrt_states_reproduces_the_next_steps_inputs(dlm, prompts):
    """Replay (full recompute) of the state of step k-1 gives the distributions dlmrt carried into
    step k: its confidences are step k's captured c^(k-1), to the rounding of a cache."""
    _, _, dlmrt = _rollouts(dlm, prompts)
    states = dlmrt.states
    with torch.no_grad():
        confidence = torch.softmax(replay_logits(dlm.model, states).float(), -1).amax(-1)
    index = {
        key: i
        for i, key in enumerate(
            zip(states.request.tolist(), states.block.tolist(), states.step.tolist(), strict=True)
        )
    }
    pairs = [(index[r, j, k - 1], i) for (r, j, k), i in index.items() if k > 0]
    assert pairs
    for before, after in pairs:
        masked = states.masked[before]
        torch.testing.assert_close(
            confidence[before][masked], states.prev_confidence[after][masked], atol=1e-4, rtol=1e-4
        )


def test_a_watcher_needs_one_step_per_chunk(dlm):
    from orl.engines.dlmrt import DlmrtConfig, DlmrtEngine

    engine = DlmrtEngine(dlm, Policy("threshold", 0.7), config=DlmrtConfig(sync_every=2, mode="eager"))
    with pytest.raises(InputError, match="sync_every 1"):
        engine.generate_ids(dlm.tokenizer.encode("def f():"), MAX_NEW, watcher=object())


def test_train_orl_with_dlmrt_rollouts_records_the_engine_and_keeps_it_in_the_resume_check(
    smoke_models, tmp_path
):
    """`orl train-orl --rollout-engine dlmrt-eager`: the first refresh (the initial weights) decodes
    what the recompute rollout decodes; the record names the engine; resuming with the other engine
    is refused."""
    from orl.cli import main
    from orl.train.config import load_preset
    from orl.train.orl import train_orl

    # dlmrt rollouts decode greedily (rollout_temperature 0); the recompute run below does the same.
    (tmp_path / "short.yaml").write_text(
        "orl: {iterations_steps: 2, checkpoint_every: 1, rollout_temperature: 0.0}\n"
    )
    out, record = tmp_path / "orl", tmp_path / "train.jsonl"
    assert (
        main(
            [
                "train-orl",
                "--preset",
                "smoke",
                "--config",
                str(tmp_path / "short.yaml"),
                "--init",
                str(smoke_models[1]),
                "--out",
                str(out),
                "--no-progress",
                "--rollout-engine",
                "dlmrt-eager",
                "--record",
                str(record),
            ]
        )
        == 0
    )
    written = json.loads(record.read_text().splitlines()[0])
    assert written["extra"]["rollout_engine"] == "dlmrt-eager"
    preset = load_preset("smoke", tmp_path / "short.yaml")
    recompute = train_orl(preset, smoke_models[1], tmp_path / "recompute", progress=False)
    assert recompute["rollout_engine"] == "recompute"
    assert written["extra"]["rollout_tpf"][0] == pytest.approx(recompute["rollout_tpf"][0])
    assert written["extra"]["rollout_pass_rate"][0] == recompute["rollout_pass_rate"][0]
    # As if unfinished: no exported checkpoint, no summary (a finished run whose checkpoint alone was
    # removed gives way to the new configuration instead; tests/test_train_resume.py).
    (out / "config.json").unlink()
    (out / "train_summary.json").unlink()
    with pytest.raises(CheckpointError, match="config_digest"):
        train_orl(preset, smoke_models[1], out, progress=False)


def test_one_engine_per_model_and_rule_is_built_and_reused(dlm, prompts):
    rule = decode_rule(dlm.model.config, dlm.tokenizer.eos_ids, Policy("threshold", 0.7), residual=True)
    rollout = DlmrtRollout(dlm.tokenizer, mode="eager")
    first = rollout.engine(dlm.model, rule)
    assert rollout.engine(dlm.model, rule) is first
    assert rollout.engine(copy.deepcopy(dlm.model), rule) is not first
    assert rollout.name == "dlmrt-eager" and DlmrtRollout(dlm.tokenizer).name == "dlmrt"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: the rollout in a captured CUDA graph")
@pytest.mark.parametrize("mode", ["cudagraph", "compile-graph"])
def test_cuda_graph_rollout_captures_the_recompute_rollouts_states(smoke_models, mode):
    """On a GPU: the watcher between graph replays sees what the recompute rollout's observer sees."""
    ckpt = sharp_dlm(smoke_models[1], "after-prompt", device="cuda")
    prompts = train_prompts(ckpt.tokenizer)
    rule = decode_rule(ckpt.model.config, ckpt.tokenizer.eos_ids, Policy("threshold", 0.7), residual=True)
    args = dict(max_new_tokens=MAX_NEW, pad_id=ckpt.tokenizer.pad_id)
    reference = RecomputeRollout()(ckpt.model, prompts, rule, **args)
    dlmrt = DlmrtRollout(ckpt.tokenizer, mode=mode)(ckpt.model, prompts, rule, **args)
    assert dlmrt.completion_ids == reference.completion_ids
    _assert_same_states(dlmrt.states, reference.states)
