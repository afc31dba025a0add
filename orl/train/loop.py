"""The training loop shared by every stage: AdamW, warm-up + cosine, global-batch means, resume.

One loop for one process or many (orl/train/distributed.py). An optimizer step is a global
batch split into micro-batches over the ranks; its loss is a weighted sum of terms, each the
mean over the *global* batch: Σ over ranks and micro-batches of a term's sum, divided by the
same sum of its count (masked positions, target tokens, ...). So the loss, and the gradient,
do not depend on how the batch is split: one process, N ranks, or gradient accumulation.
FSDP averages gradients over ranks, so each rank back-propagates world_size × its part.

Every step appends a line to OUT/train_log.jsonl (step, global-batch loss and its terms, lr,
tokens, gradient norm) from rank 0. A resumed run first drops the lines past its checkpoint,
so the log of a killed-and-resumed run equals the uninterrupted run's line by line.

Resume state is one atomic unit under OUT/train_state/ (orl/train/state.py): a distributed
checkpoint per step, committed by its manifest. Batches and noise are pure functions of
(seed, step), so a resumed run ends with weights bitwise equal to an uninterrupted one. The
finished model is written as an HF-layout checkpoint in OUT/ (config.json last: its presence
means "done").
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from orl.io import atomic_write_json, atomic_write_text
from orl.model.checkpoint import CONFIG
from orl.model.transformer import Transformer
from orl.tokenizer import Tokenizer
from orl.train.config import OptimConfig
from orl.train.distributed import World, all_sum, barrier, gather_objects, peak_memory_bytes
from orl.train.state import export_model, load_train_state, save_train_state

LOG = "train_log.jsonl"


@dataclass
class Micro:
    """One micro-batch of an optimizer step on this rank.

    `run()` does its forward and returns the sums (with gradient) and counts of the step's loss
    terms; the loss is Σ_k weights[k] · Σsum_k / Σcount_k over every micro-batch of every rank.
    Counts known before the forward go in `counts`, so that micro-batches can be run and
    back-propagated one at a time; a term whose count needs the forward (None) allows one
    micro-batch per rank only.
    """

    run: Callable[[], tuple[Sequence[torch.Tensor], Sequence[float]]]
    counts: Sequence[float] | None
    tokens: int


@dataclass
class Step:
    """What one optimizer step trains on: its loss terms (names, weights) and its micro-batches."""

    names: tuple[str, ...]  # the first is the step's loss in the log; every term is logged by name
    weights: tuple[float, ...]
    micros: list[Micro]
    metrics: dict = field(
        default_factory=dict
    )  # extra scalars (or 0-d tensors) for the log and the progress bar
    # Runs on every rank once the forwards are done, before `metrics` is read: where a metric is a
    # ratio of sums over the global batch, this is where the ranks' sums are added.
    finish: Callable[[], None] | None = None


def lr_at(step: int, cfg: OptimConfig) -> float:
    """Linear warm-up, then cosine decay from lr to min_lr_ratio·lr at the last step."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    floor = cfg.lr * cfg.min_lr_ratio
    return floor + (cfg.lr - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


@dataclass(frozen=True)
class ParamGroup:
    """Parameters (those whose name starts with `prefix`) trained in their own optimizer group, with
    their own peak learning rate (same schedule) and gradient-norm cap; logged as grad_norm_<name>."""

    name: str
    prefix: str
    lr: float
    grad_clip: float


def group_params(model: torch.nn.Module, groups: Sequence[ParamGroup]) -> dict[str, list[torch.nn.Parameter]]:
    """The trainable parameters of each group ("" = the rest), each parameter once."""
    out: dict[str, list] = {"": [], **{g.name: [] for g in groups}}
    seen: set[int] = set()
    for name, p in model.named_parameters():
        if not p.requires_grad or id(p) in seen:
            continue
        seen.add(id(p))
        owner = next((g.name for g in groups if name.startswith(g.prefix)), "")
        out[owner].append(p)
    return out


def make_optimizer(
    model: torch.nn.Module, cfg: OptimConfig, extra: Sequence[ParamGroup] = ()
) -> torch.optim.AdamW:
    # No weight decay on norms (1-D weights), as usual for transformers. Fused AdamW on CUDA.
    owned = group_params(model, extra)
    params = owned[""]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    for g in extra:
        if owned[g.name]:
            groups.append(
                {"params": owned[g.name], "weight_decay": 0.0, "group": g.name, "lr_scale": g.lr / cfg.lr}
            )
    params = [p for ps in owned.values() for p in ps]
    fused = bool(params) and params[0].device.type == "cuda"
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.95), eps=1e-8, fused=fused or None)


def _backward(step: Step, world: World) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward and backward every micro-batch; returns (global sums, global counts) per term."""
    known = all(m.counts is not None for m in step.micros)
    if not known and len(step.micros) > 1:
        from orl.errors import ConfigError

        raise ConfigError(
            "micro_batch_size: this objective's normalisation needs the forward "
            "(a count known only then): train it without gradient accumulation"
        )
    sums = torch.zeros(len(step.names), dtype=torch.float64)
    counts = torch.zeros(len(step.names), dtype=torch.float64)
    totals = all_sum(torch.tensor([list(m.counts) for m in step.micros]).sum(0), world) if known else None
    for micro in step.micros:
        parts, local_counts = micro.run()
        if totals is None:  # the one micro-batch of a forward-normalised objective
            totals = all_sum(torch.tensor(list(local_counts), dtype=torch.float64), world)
        loss = sum(
            w * s / max(float(t), 1.0) for w, s, t in zip(step.weights, parts, totals.tolist(), strict=True)
        )
        (loss * world.size).backward()
        sums += torch.stack([s.detach().double().cpu() for s in parts])
        counts += torch.tensor(list(local_counts), dtype=torch.float64)
    return all_sum(sums, world), totals


def _trim_log(path: Path, steps: int) -> None:
    """Keep the log lines of steps <= `steps` (a resumed run recomputes the rest)."""
    if not path.is_file():
        return
    kept = [
        line for line in path.read_text().splitlines() if line.strip() and json.loads(line)["step"] <= steps
    ]
    atomic_write_text(path, "".join(line + "\n" for line in kept))


def train(
    model: Transformer,
    step_fn: Callable[[int], Step],
    cfg: OptimConfig,
    out_dir: str | Path,
    tokenizer: Tokenizer,
    *,
    digest: str,
    stage: str,
    world: World | None = None,
    progress: bool = True,
    model_name: str | None = None,
    max_shard_bytes: int | None = None,
    settings: dict | None = None,
    param_groups: Sequence[ParamGroup] = (),
) -> dict:
    """Run `cfg.steps` optimizer steps of `step_fn(step)`, resuming if OUT/train_state exists.

    `model` is this rank's (FSDP-sharded when the world is larger than one). `settings`: how the
    run computes (not what it trains, so not in the digest), kept in the resume state
    (state.resumed_settings) and the summary. Returns a summary dict (also written to
    OUT/train_summary.json by rank 0).
    """
    from tqdm import tqdm

    settings = settings or {}

    world = world or World(device=next(model.parameters()).device)
    out_dir = Path(out_dir)
    torch.manual_seed(cfg.seed)
    optimizer = make_optimizer(model, cfg, param_groups)
    owned = group_params(model, param_groups)
    info = load_train_state(out_dir, model, optimizer, digest, world) or {}
    start = int(info.get("step", 0))
    tokens_seen = int(info.get("tokens", 0))
    elapsed = float(info.get("elapsed_s", 0.0))
    log_path = out_dir / LOG
    if world.main:
        out_dir.mkdir(parents=True, exist_ok=True)
        _trim_log(log_path, start)
    model.train()
    bar = tqdm(
        range(start, cfg.steps),
        initial=start,
        total=cfg.steps,
        desc=stage,
        disable=not progress or not world.main,
        dynamic_ncols=True,
    )
    t0 = time.perf_counter()
    loss_value = float(info.get("loss", float("nan")))
    log = log_path.open("a") if world.main else None
    try:
        for step in bar:
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step, cfg) * group.get("lr_scale", 1.0)
            plan = step_fn(step)
            optimizer.zero_grad(set_to_none=True)
            sums, counts = _backward(plan, world)
            if plan.finish is not None:
                plan.finish()
            # Metrics the forwards filled in may be device tensors (no sync inside the step); read them
            # once, here, and keep the floats in the step's dict for whoever else holds it.
            plan.metrics.update({k: float(v) for k, v in plan.metrics.items()})
            norm = torch.nn.utils.clip_grad_norm_(owned[""], cfg.grad_clip)
            grad_norm = float(
                norm.full_tensor() if hasattr(norm, "full_tensor") else norm
            )  # a DTensor under FSDP
            for g in param_groups:  # each own group clipped to its own cap
                if owned[g.name]:
                    n = torch.nn.utils.clip_grad_norm_(owned[g.name], g.grad_clip)
                    plan.metrics[f"grad_norm_{g.name}"] = float(
                        n.full_tensor() if hasattr(n, "full_tensor") else n
                    )
            optimizer.step()
            terms = {
                name: float(s / max(float(c), 1.0))
                for name, s, c in zip(plan.names, sums, counts, strict=True)
            }
            loss_value = sum(w * terms[n] for w, n in zip(plan.weights, plan.names, strict=True))
            tokens = int(all_sum(torch.tensor([float(sum(m.tokens for m in plan.micros))]), world)[0])
            tokens_seen += tokens
            if log is not None:
                line = {
                    "step": step + 1,
                    "loss": loss_value,
                    **{f"loss_{k}": v for k, v in terms.items()},
                    "lr": lr_at(step, cfg),
                    "tokens": tokens,
                    "grad_norm": grad_norm,
                    **plan.metrics,
                }
                log.write(json.dumps(line, sort_keys=True) + "\n")
                log.flush()
            bar.set_postfix({"loss": f"{loss_value:.3f}", **{k: f"{v:.3g}" for k, v in plan.metrics.items()}})
            done = step + 1
            if done % cfg.checkpoint_every == 0 or done == cfg.steps:
                if log is not None:
                    log.flush()
                save_train_state(
                    out_dir,
                    model,
                    optimizer,
                    {
                        "step": done,
                        "tokens": tokens_seen,
                        "config_digest": digest,
                        "stage": stage,
                        "elapsed_s": elapsed + (time.perf_counter() - t0),
                        "loss": loss_value,
                        "settings": settings,
                    },
                    world,
                )
    finally:
        if log is not None:
            log.close()
    model.eval()
    wall = elapsed + (time.perf_counter() - t0)
    peaks = gather_objects(peak_memory_bytes(world), world)
    summary = {
        "stage": stage,
        "steps": cfg.steps,
        "tokens": tokens_seen,
        "final_loss": loss_value,
        "wall_s": wall,
        "config_digest": digest,
        "world_size": world.size,
        "device": world.device.type,
        "device_hours": wall / 3600 * world.size,
        "tokens_per_s_per_device": tokens_seen / wall / world.size if wall else None,
        "peak_memory_bytes_per_rank": peaks,
        **settings,
    }
    export_model(
        model,
        tokenizer,
        out_dir,
        world,
        extra_config={"orl_model_name": model_name} if model_name else None,
        max_shard_bytes=max_shard_bytes,
    )
    if world.main:
        atomic_write_json(out_dir / "train_summary.json", summary)
    barrier(world)
    return summary


def is_finished(out_dir: str | Path) -> bool:
    return (Path(out_dir) / CONFIG).is_file() and (Path(out_dir) / "train_summary.json").is_file()
