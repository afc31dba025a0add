"""Training is deterministic and resumes bitwise: a run killed after a checkpoint and resumed
ends with the same weights as an uninterrupted run."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def orl(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "orl.cli", *args, "--no-progress"], capture_output=True,
                          text=True, env=env, timeout=300)


@pytest.mark.slow
def test_killed_and_resumed_runs_end_bitwise_equal(tmp_path):
    straight_ar, straight_dlm = tmp_path / "ar", tmp_path / "dlm"
    assert orl("train-ar", "--preset", "smoke", "--out", str(straight_ar)).returncode == 0
    assert orl("convert", "--preset", "smoke", "--init", str(straight_ar), "--out", str(straight_dlm)).returncode == 0

    killed_ar = tmp_path / "ar_killed"
    first = orl("train-ar", "--preset", "smoke", "--out", str(killed_ar), "--halt-after-checkpoint", "10")
    assert first.returncode == 137 and not (killed_ar / "config.json").exists()
    assert (killed_ar / "train_state" / "state.json").exists()
    assert orl("train-ar", "--preset", "smoke", "--out", str(killed_ar)).returncode == 0
    assert (killed_ar / "model.safetensors").read_bytes() == (straight_ar / "model.safetensors").read_bytes()

    killed_dlm = tmp_path / "dlm_killed"
    first = orl("convert", "--preset", "smoke", "--init", str(straight_ar), "--out", str(killed_dlm),
                "--halt-after-checkpoint", "20")
    assert first.returncode == 137
    resumed = orl("convert", "--preset", "smoke", "--init", str(straight_ar), "--out", str(killed_dlm))
    assert resumed.returncode == 0, resumed.stderr
    assert (killed_dlm / "model.safetensors").read_bytes() == (straight_dlm / "model.safetensors").read_bytes()


def test_resume_refuses_a_different_configuration(tmp_path):
    killed = tmp_path / "ar"
    assert orl("train-ar", "--preset", "smoke", "--out", str(killed), "--halt-after-checkpoint", "10").returncode == 137
    override = tmp_path / "other.yaml"
    override.write_text("ar: {lr: 0.001}\n")
    second = orl("train-ar", "--preset", "smoke", "--config", str(override), "--out", str(killed))
    assert second.returncode == 2
    assert "state.json: config_digest" in second.stderr
