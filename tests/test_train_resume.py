"""Training resumes bitwise: a run killed with SIGKILL at any moment and resumed ends with the
same weights as an uninterrupted run, because the resume state is one atomic unit."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from orl.errors import CheckpointError
from orl.train.config import OptimConfig
from orl.train.loop import STATE_DIR, StepResult, load_train_state, make_optimizer, save_train_state, train

# Run `orl` in a subprocess that SIGKILLs itself at its N-th filesystem commit point: before or
# after the N-th os.replace / os.unlink (the renames and deletions of the atomic writes). That is
# a real kill -9 at an exact place, e.g. between the renames of the weights and of the manifest.
KILL_AT = """
import os, signal, sys
kill_at, count = int(sys.argv[1]), [0]
def point():
    count[0] += 1
    if count[0] == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
def counted(call):
    def wrapped(*args, **kwargs):
        point()
        result = call(*args, **kwargs)
        point()
        return result
    return wrapped
os.replace, os.unlink = counted(os.replace), counted(os.unlink)
from orl.cli import main
sys.exit(main(sys.argv[2:]))
"""


def run_orl(*args: str, kill_at: int | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    prefix = [sys.executable, "-c", KILL_AT, str(kill_at)] if kill_at else [sys.executable, "-m", "orl.cli"]
    return subprocess.run([*prefix, *args, "--no-progress"], capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture(scope="module")
def straight_run(tmp_path_factory):
    """An uninterrupted smoke AR run (its tokenizer is reused by every run, to skip BPE training)."""
    root = tmp_path_factory.mktemp("straight")
    first = run_orl("train-ar", "--preset", "smoke", "--out", str(root / "tok"))
    assert first.returncode == 0, first.stderr
    tokenizer = str(root / "tok" / "tokenizer.json")
    straight = run_orl("train-ar", "--preset", "smoke", "--tokenizer", tokenizer, "--out", str(root / "ar"))
    assert straight.returncode == 0, straight.stderr
    return tokenizer, root / "ar"


@pytest.mark.slow
def test_sigkill_at_every_commit_point_of_a_checkpoint_resumes_bitwise(straight_run, tmp_path):
    tokenizer, straight = straight_run
    out = tmp_path / "ar"
    args = ("train-ar", "--preset", "smoke", "--tokenizer", tokenizer, "--out", str(out))
    # Points 1..10 are the first checkpoint's: weights renamed (1, 2), moments renamed (3, 4), manifest
    # renamed (5, 6), the previous files deleted; later points reach the second and third checkpoints.
    for kill_at in (1, 2, 3, 4, 5, 6, 7, 9, 14, 23):
        killed = run_orl(*args, kill_at=kill_at)
        assert killed.returncode == -signal.SIGKILL, (kill_at, killed.stderr[-2000:])
        assert not (out / "config.json").exists()
        manifest = out / STATE_DIR / "state.json"
        if manifest.exists():  # whatever the manifest names is there and complete
            names = [entry["name"] for entry in json.loads(manifest.read_text())["files"].values()]
            assert all((out / STATE_DIR / name).is_file() for name in names), kill_at
    resumed = run_orl(*args)
    assert resumed.returncode == 0, resumed.stderr
    assert (out / "model.safetensors").read_bytes() == (straight / "model.safetensors").read_bytes()
    assert sorted(p.name for p in (out / STATE_DIR).iterdir()) == [
        "model-00000030.safetensors", "optimizer-00000030.safetensors", "state.json"]  # fmt: skip


@pytest.mark.slow
def test_external_kill_9_at_random_moments_resumes_bitwise(straight_run, tmp_path):
    tokenizer, straight = straight_run
    out = tmp_path / "ar"
    args = [sys.executable, "-m", "orl.cli", "train-ar", "--preset", "smoke", "--tokenizer", tokenizer,
            "--out", str(out), "--no-progress"]  # fmt: skip
    for delay in (0.02, 0.05, 0.11):  # seconds after the first resume state appears
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip
        deadline = time.monotonic() + 120
        while not (out / STATE_DIR).exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.002)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    resumed = run_orl("train-ar", "--preset", "smoke", "--tokenizer", tokenizer, "--out", str(out))
    assert resumed.returncode == 0, resumed.stderr
    assert (out / "model.safetensors").read_bytes() == (straight / "model.safetensors").read_bytes()


def test_resume_refuses_a_different_configuration(straight_run, tmp_path):
    tokenizer, _ = straight_run
    out = tmp_path / "ar"
    killed = run_orl("train-ar", "--preset", "smoke", "--tokenizer", tokenizer, "--out", str(out), kill_at=14)
    assert killed.returncode == -signal.SIGKILL and (out / STATE_DIR / "state.json").exists()
    override = tmp_path / "other.yaml"
    override.write_text("ar: {lr: 0.001}\n")
    second = run_orl("train-ar", "--preset", "smoke", "--config", str(override), "--out", str(out))
    assert second.returncode == 2
    assert "state.json: config_digest" in second.stderr


# ------------------------------------------------------------------------------------------
# The resume state in-process: a tiny model, no subprocess
# ------------------------------------------------------------------------------------------


def _tiny(tokenizer):
    from orl.model.transformer import Transformer
    from tests.conftest import small_config

    torch.manual_seed(0)
    return Transformer(small_config(tokenizer, num_hidden_layers=1))


def _step_fn(model):
    def step(i: int) -> StepResult:
        generator = torch.Generator().manual_seed(i)
        ids = torch.randint(0, model.config.vocab_size, (2, 8), generator=generator)
        logits = model(ids)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), ids.flatten())
        return StepResult(loss, ids.numel())

    return step


def test_manifest_names_the_state_and_a_newer_unnamed_file_is_ignored(tokenizer, tmp_path):
    cfg = OptimConfig(steps=4, batch_size=2, warmup_steps=1, checkpoint_every=2)
    model = _tiny(tokenizer)
    train(model, _step_fn(model), cfg, tmp_path, tokenizer, digest="d", stage="t", progress=False)
    state = tmp_path / STATE_DIR
    info = json.loads((state / "state.json").read_text())
    assert info["step"] == 4 and set(info["files"]) == {"model", "optimizer"}
    # A kill after a newer weights file was renamed into place but before the manifest: the
    # manifest still names step 4, and step 4's weights are what is restored.
    (state / "model-00000006.safetensors").write_bytes(b"not the state")
    fresh = _tiny(tokenizer)
    assert load_train_state(tmp_path, fresh, make_optimizer(fresh, cfg), "d")["step"] == 4
    for (name, a), b in zip(model.state_dict().items(), fresh.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_damaged_or_legacy_state_is_refused_with_the_file_named(tokenizer, tmp_path):
    cfg = OptimConfig(steps=2, batch_size=2, warmup_steps=1, checkpoint_every=2)
    model = _tiny(tokenizer)
    optimizer = make_optimizer(model, cfg)
    save_train_state(tmp_path, model, optimizer, {"step": 2, "config_digest": "d"})
    state = tmp_path / STATE_DIR
    weights = state / "model-00000002.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b"\0")
    with pytest.raises(CheckpointError, match="model-00000002.safetensors: sha256 differs"):
        load_train_state(tmp_path, model, optimizer, "d")
    (state / "state.json").write_text(json.dumps({"step": 2, "config_digest": "d"}))  # the old three-file layout
    with pytest.raises(CheckpointError, match="files.model: missing; the state was written by an older version"):
        load_train_state(tmp_path, model, optimizer, "d")
