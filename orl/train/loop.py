"""The training loop shared by every stage: AdamW, warm-up + cosine, checkpoints, resume.

Resume state lives in OUT/train_state/ and is one atomic unit: every `checkpoint_every`
steps the weights and the optimizer moments go to new files named by the step
(model-00000100.safetensors, optimizer-00000100.safetensors), then state.json, the
manifest, is replaced in one rename; it names the two files with their sha256, and
only then are the previous step's files removed. A run killed at any moment (kill -9
included) thus resumes from the last manifest, whose files are complete and still
there; a file that does not match its digest is refused. Batches and noise are pure
functions of (seed, step), so a resumed run ends with weights bitwise equal to an
uninterrupted one. The finished model is written as an HF-layout checkpoint in OUT/
(config.json last: its presence means "done").
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from orl.errors import CheckpointError
from orl.io import atomic_write_bytes, atomic_write_json
from orl.model.checkpoint import CONFIG, save_checkpoint
from orl.model.transformer import Transformer
from orl.tokenizer import Tokenizer
from orl.train.config import OptimConfig

STATE_DIR = "train_state"


@dataclass
class StepResult:
    loss: torch.Tensor
    tokens: int
    metrics: dict | None = None  # extra scalars for the progress bar


def lr_at(step: int, cfg: OptimConfig) -> float:
    """Linear warm-up, then cosine decay from lr to min_lr_ratio·lr at the last step."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    floor = cfg.lr * cfg.min_lr_ratio
    return floor + (cfg.lr - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def make_optimizer(model: Transformer, cfg: OptimConfig) -> torch.optim.AdamW:
    # No weight decay on norms (1-D weights), as usual for transformers.
    params = list({id(p): p for p in model.parameters() if p.requires_grad}.values())
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.95), eps=1e-8)


def _sync_folder(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_train_state(out_dir: Path, model: Transformer, optimizer: torch.optim.Optimizer, info: dict) -> None:
    """Write one checkpoint of the run (see the module docstring); state.json is the commit point."""
    from safetensors.torch import save

    state_dir = out_dir / STATE_DIR
    state_dir.mkdir(parents=True, exist_ok=True)
    weights = {k: v.detach().cpu().contiguous().clone() for k, v in model.state_dict().items()}
    opt = optimizer.state_dict()
    moments = {f"{idx}.{key}": value.detach().cpu().contiguous() for idx, s in opt["state"].items()
               for key, value in s.items() if torch.is_tensor(value)}
    files = {}
    for part, tensors in (("model", weights), ("optimizer", moments)):
        data = save(tensors)
        name = f"{part}-{info['step']:08d}.safetensors"
        atomic_write_bytes(state_dir / name, data)
        files[part] = {"name": name, "sha256": hashlib.sha256(data).hexdigest()}
    _sync_folder(state_dir)  # the new files are in place before the manifest that names them
    atomic_write_json(state_dir / "state.json", {**info, "files": files})
    _sync_folder(state_dir)
    keep = {"state.json", *(entry["name"] for entry in files.values())}
    for path in state_dir.iterdir():
        if path.name not in keep:  # the previous checkpoint, and temporary files of a killed write
            path.unlink(missing_ok=True)


def _read_state_file(state_dir: Path, info: dict, part: str) -> bytes:
    """The bytes of one file the manifest names, checked against its digest."""
    entry = (info.get("files") or {}).get(part)
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or "/" in entry["name"]:
        raise CheckpointError(f"{state_dir / 'state.json'}: files.{part}: missing; the state was written by an older "
                              f"version (not one atomic unit, so not safely resumable); delete {state_dir} to start over")
    path = state_dir / entry["name"]
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read resume state ({exc.strerror}); delete {state_dir} to start over") from None
    if hashlib.sha256(data).hexdigest() != entry.get("sha256"):
        raise CheckpointError(f"{path}: sha256 differs from the one state.json names; delete {state_dir} to start over")
    return data


def load_train_state(out_dir: Path, model: Transformer, optimizer: torch.optim.Optimizer, digest: str) -> dict | None:
    """Restore the last checkpoint of this run; None when there is none."""
    from safetensors.torch import load

    state_dir = out_dir / STATE_DIR
    info_path = state_dir / "state.json"
    if not info_path.is_file():
        return None
    try:
        info = json.loads(info_path.read_text())
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{info_path}: not valid JSON ({exc.msg}); delete {state_dir} to start over") from None
    if info.get("config_digest") != digest:
        raise CheckpointError(
            f"{info_path}: config_digest: this run's configuration ({digest}) differs from the one being "
            f"resumed ({info.get('config_digest')}); use another --out or delete {state_dir}"
        )
    weights, moments = (_read_state_file(state_dir, info, part) for part in ("model", "optimizer"))
    device = model.embedding.device
    try:
        model.load_state_dict({k: v.to(device) for k, v in load(weights).items()})
        moments = {k: v.to(device) for k, v in load(moments).items()}
    except Exception as exc:
        raise CheckpointError(f"{state_dir}: cannot read resume state ({exc})") from None
    opt = optimizer.state_dict()
    for name, value in moments.items():
        idx, key = name.split(".", 1)
        opt["state"].setdefault(int(idx), {})[key] = value
    optimizer.load_state_dict(opt)
    return info


def train(
    model: Transformer,
    step_fn: Callable[[int], StepResult],
    cfg: OptimConfig,
    out_dir: str | Path,
    tokenizer: Tokenizer,
    *,
    digest: str,
    stage: str,
    progress: bool = True,
    model_name: str | None = None,
) -> dict:
    """Run `cfg.steps` optimizer steps of `step_fn(step)`, resuming if OUT/train_state exists.

    Returns a summary dict (also written to OUT/train_summary.json).
    """
    from tqdm import tqdm

    out_dir = Path(out_dir)
    torch.manual_seed(cfg.seed)
    optimizer = make_optimizer(model, cfg)
    info = load_train_state(out_dir, model, optimizer, digest) or {}
    start = int(info.get("step", 0))
    tokens_seen = int(info.get("tokens", 0))
    elapsed = float(info.get("elapsed_s", 0.0))
    model.train()
    bar = tqdm(range(start, cfg.steps), initial=start, total=cfg.steps, desc=stage, disable=not progress,
               dynamic_ncols=True)
    t0 = time.perf_counter()
    window_tokens, window_t0 = 0, time.perf_counter()
    loss_value = float(info.get("loss", float("nan")))
    for step in bar:
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, cfg)
        result = step_fn(step)
        optimizer.zero_grad(set_to_none=True)
        result.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        loss_value = result.loss.item()
        tokens_seen += result.tokens
        window_tokens += result.tokens
        now = time.perf_counter()
        postfix = {"loss": f"{loss_value:.3f}", "tok/s": f"{window_tokens / max(now - window_t0, 1e-9):.0f}"}
        postfix.update({k: f"{v:.3g}" for k, v in (result.metrics or {}).items()})
        bar.set_postfix(postfix)
        done = step + 1
        if done % cfg.checkpoint_every == 0 or done == cfg.steps:
            save_train_state(out_dir, model, optimizer, {
                "step": done, "tokens": tokens_seen, "config_digest": digest, "stage": stage,
                "elapsed_s": elapsed + (time.perf_counter() - t0), "loss": loss_value,
            })
            window_tokens, window_t0 = 0, time.perf_counter()
    model.eval()
    summary = {"stage": stage, "steps": cfg.steps, "tokens": tokens_seen, "final_loss": loss_value,
               "wall_s": elapsed + (time.perf_counter() - t0), "config_digest": digest}
    atomic_write_json(out_dir / "train_summary.json", summary)
    save_checkpoint(model, tokenizer, out_dir, extra_config={"orl_model_name": model_name} if model_name else None)
    return summary


def is_finished(out_dir: str | Path) -> bool:
    return (Path(out_dir) / CONFIG).is_file() and (Path(out_dir) / "train_summary.json").is_file()
