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
from orl.train.distributed import World
from orl.train.loop import Micro, Step, make_optimizer, train
from orl.train.state import STATE_DIR, load_train_state, save_train_state

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
    return subprocess.run(
        [*prefix, *args, "--no-progress"], capture_output=True, text=True, env=env, timeout=300
    )


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
    # The first points are the first checkpoint's: its folder renamed into place (1, 2), the manifest
    # renamed (3, 4), the leftovers deleted; later points reach the second and third checkpoints and
    # the train log's rewrite on resume.
    for kill_at in (1, 2, 3, 4, 5, 6, 7, 9, 14, 23):
        killed = run_orl(*args, kill_at=kill_at)
        assert killed.returncode == -signal.SIGKILL, (kill_at, killed.stderr[-2000:])
        assert not (out / "config.json").exists()
        manifest = out / STATE_DIR / "state.json"
        if manifest.exists():  # whatever the manifest names is there and complete
            info = json.loads(manifest.read_text())
            assert all((out / STATE_DIR / info["folder"] / name).is_file() for name in info["files"]), kill_at
    resumed = run_orl(*args)
    assert resumed.returncode == 0, resumed.stderr
    assert (out / "model.safetensors").read_bytes() == (straight / "model.safetensors").read_bytes()
    assert sorted(p.name for p in (out / STATE_DIR).iterdir()) == ["state.json", "step-00000030"]
    # The log of the killed-and-resumed run is the uninterrupted run's, line for line but the timing.
    assert _log(out) == _log(straight)


def _log(out):
    return [
        {k: v for k, v in json.loads(line).items()}
        for line in (out / "train_log.jsonl").read_text().splitlines()
    ]


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


def test_a_run_through_onednn_resumes_through_it_bitwise_and_refuses_another_path(straight_run, tmp_path):
    tokenizer, straight = straight_run
    args = ("train-ar", "--preset", "smoke", "--tokenizer", tokenizer)
    uninterrupted = run_orl(*args, "--out", str(tmp_path / "straight"), "--cpu-linear", "onednn")
    assert uninterrupted.returncode == 0, uninterrupted.stderr
    out = tmp_path / "ar"
    killed = run_orl(*args, "--out", str(out), "--cpu-linear", "onednn", kill_at=14)
    assert killed.returncode == -signal.SIGKILL
    assert json.loads((out / STATE_DIR / "state.json").read_text())["settings"] == {"cpu_linear": "onednn"}
    refused = run_orl(*args, "--out", str(out), "--cpu-linear", "aten")
    assert refused.returncode == 2 and "state.json: settings.cpu_linear" in refused.stderr
    resumed = run_orl(*args, "--out", str(out), "--cpu-linear", "auto")  # auto keeps the run's own path
    assert resumed.returncode == 0, resumed.stderr
    assert (out / "model.safetensors").read_bytes() == (
        tmp_path / "straight" / "model.safetensors"
    ).read_bytes()
    summary = json.loads((out / "train_summary.json").read_text())
    assert summary["cpu_linear"] == "onednn"
    # The same run as F.linear's up to rounding: the loss curve agrees to 1e-4.
    losses = [[line["loss"] for line in _log(folder)] for folder in (out, straight)]
    assert losses[0] == pytest.approx(losses[1], rel=1e-4)


# ------------------------------------------------------------------------------------------
# The resume state in-process: a tiny model, no subprocess
# ------------------------------------------------------------------------------------------


def _tiny(tokenizer):
    from orl.model.transformer import Transformer
    from tests.conftest import small_config

    torch.manual_seed(0)
    return Transformer(small_config(tokenizer, num_hidden_layers=1))


def _step_fn(model):
    def step(i: int) -> Step:
        generator = torch.Generator().manual_seed(i)
        ids = torch.randint(0, model.config.vocab_size, (2, 8), generator=generator)

        def run():
            logits = model(ids)
            total = torch.nn.functional.cross_entropy(
                logits.flatten(0, 1).float(), ids.flatten(), reduction="sum"
            )
            return [total], [float(ids.numel())]

        return Step(("ce",), (1.0,), [Micro(run=run, counts=[float(ids.numel())], tokens=ids.numel())])

    return step


def test_manifest_names_the_state_and_a_newer_unnamed_file_is_ignored(tokenizer, tmp_path):
    cfg = OptimConfig(steps=4, batch_size=2, warmup_steps=1, checkpoint_every=2)
    model = _tiny(tokenizer)
    train(model, _step_fn(model), cfg, tmp_path, tokenizer, digest="d", stage="t", progress=False)
    state = tmp_path / STATE_DIR
    info = json.loads((state / "state.json").read_text())
    assert info["step"] == 4 and info["folder"] == "step-00000004" and ".metadata" in info["files"]
    # A kill after a newer step's folder was renamed into place but before the manifest: the
    # manifest still names step 4, and step 4's weights are what is restored.
    (state / "step-00000006").mkdir()
    (state / "step-00000006" / ".metadata").write_bytes(b"not the state")
    fresh = _tiny(tokenizer)
    assert load_train_state(tmp_path, fresh, make_optimizer(fresh, cfg), "d", World())["step"] == 4
    for (name, a), b in zip(model.state_dict().items(), fresh.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_damaged_or_legacy_state_is_refused_with_the_file_named(tokenizer, tmp_path):
    cfg = OptimConfig(steps=2, batch_size=2, warmup_steps=1, checkpoint_every=2)
    model = _tiny(tokenizer)
    optimizer = make_optimizer(model, cfg)
    save_train_state(tmp_path, model, optimizer, {"step": 2, "config_digest": "d"}, World())
    state = tmp_path / STATE_DIR
    (shard,) = (state / "step-00000002").glob("*.distcp")
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte in the middle of the shard
    shard.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="step-00000002: its files differ from those state.json names"):
        load_train_state(tmp_path, model, optimizer, "d", World())
    (state / "state.json").write_text(json.dumps({"step": 2, "config_digest": "d"}))  # an older layout
    with pytest.raises(CheckpointError, match="folder: missing; the state was written by an older version"):
        load_train_state(tmp_path, model, optimizer, "d", World())
