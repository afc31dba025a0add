"""ORL post-training, version 2 (docs/method.md §3), and its Table 5 ablations: the loop.

One update, with the current weights θ ("fresh rollout → one update → fresh rollout"):

1. generate: N training prompts, K rollouts each, decoded by the engine's own loop
   (threshold(τ_train), residual on, token values sampled at T_roll), every step's state captured
   with the pre-adapter residual z it consumed and its confidences / entropies;
2. verify: each completion runs its unit tests in the sandbox; failing trajectories give no gradient;
3. select at most S states per block of each retained trajectory (uniformly among its steps) and
   replay them with the captured z, states of one block sharing their clean context (orl.train.replay);
4. loss (orl.train.losses): CE on uncertain positions, β·capped reverse KL to the frozen stage-initial
   model θ₀ on confident ones, λ·AEC; one optimizer step (the residual adapter in its own group);
5. discard the rollouts (updates_per_rollout = 1).

ORL adds a fresh (zero-output) residual adapter to the base dLLM, so its first rollouts decode
exactly as the base model does. Ablations (orl/train/orl_variants.py), each a switch of the same loop
(same N, K, S, prompts, number of updates): stale, no-aec, no-gate, no-residual, entropy-weighted,
dparallel. Rollouts: orl/train/orl_rollouts.py; the replay and loss of one update: orl/train/orl_steps.py.

The seed (orl.seed, `orl train-orl --seed`) picks the prompt slices, the rollout samples, the
selected states and seeds torch; it is part of the resume digest and of the train record. Every
update's rollouts are a pure function of (weights, seed, update), so a resumed run regenerates
exactly what an uninterrupted one had.
"""

from __future__ import annotations

import copy
import random
import sys
from pathlib import Path

import torch

from orl.decoding.rollout import CapturedStates, RecomputeRollout, Rollout
from orl.errors import CheckpointError, ConfigError, InputError
from orl.model.checkpoint import Checkpoint, checkpoint_digest, load_checkpoint
from orl.train.config import STAGE_SECTIONS, OptimConfig, TrainPreset
from orl.train.distributed import Replica, World
from orl.train.loop import LOG, ParamGroup, Step, train
from orl.train.orl_rollouts import OrlStats, collect_states, rollout_prompts, select_states
from orl.train.orl_steps import concat_pairs, dparallel_step, orl_step, zero_step
from orl.train.orl_variants import ABLATIONS, VARIANTS
from orl.train.pretrain import prepare

# What every line of train_log.jsonl carries (docs/method.md §3; 0 where a variant has no such term).
LOG_KEYS = (
    "retained_fraction",
    "gated_share",
    "aec_active_share",
    "aec_mean",
    "kl_anchor_mean",
    "adapter_norm",
    "rollouts_per_update",
    "updates_per_rollout",
)


def check_init(init_dir: str | Path, preset: TrainPreset, device: str = "cpu"):
    """Load --init and refuse what ORL cannot start from, before any compute."""
    ckpt = load_checkpoint(init_dir, device=device)
    config_path = Path(init_dir) / "config.json"
    if not ckpt.is_diffusion:
        raise CheckpointError(
            f"{config_path}: architectures: --init is autoregressive ({ckpt.config['architectures'][0]}); "
            "ORL post-trains a block-diffusion model: run `orl convert` first"
        )
    if ckpt.model.config.block_size != preset.diffusion.block_size:
        raise ConfigError(
            f"diffusion.block_size: the config says {preset.diffusion.block_size} but {config_path}: "
            f"block_size is {ckpt.model.config.block_size}"
        )
    layout = ckpt.model.config.block_layout
    if layout != preset.diffusion.block_layout:
        raise ConfigError(
            f"diffusion.block_layout: the config says {preset.diffusion.block_layout!r} but "
            f"{config_path} is a {layout!r} checkpoint (docs/method.md §5): pick the preset of its family"
        )
    return ckpt


def read_log(out_dir: Path) -> list[dict]:
    """The lines of OUT/train_log.jsonl."""
    import json

    path = out_dir / LOG
    return (
        [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []
    )


def warn_nothing_retained(update: int, rows: int) -> None:
    print(
        f"WARNING: orl update {update}: NOTHING RETAINED: none of the {rows} rollouts passed its tests, "
        "so this "
        "update has no self-generated targets and changes nothing (train the base model longer, lower "
        "orl.tau_train or orl.rollout_temperature)",
        file=sys.stderr,
        flush=True,
    )


def train_orl(
    preset: TrainPreset,
    init: str | Path | Checkpoint,
    out_dir: str | Path,
    *,
    ablation: str = "none",
    device: str = "cpu",
    progress: bool = True,
    world: World | None = None,
    rollout: Rollout = RecomputeRollout(),
    cpu_linear: str = "aten",
) -> dict:
    """Post-train `init` with ORL (or an ablation) and write the checkpoint to `out_dir`.

    `init` is the base dLLM's folder, or the checkpoint `check_init` already loaded from it on this rank's
    device (what `orl train-orl` passes, so the checkpoint is read once per rank).
    `rollout` decodes the rollouts: full recompute (the default, and the tiny records') or dlmrt
    (orl/engines/dlmrt/rollout.py, what `orl train-orl --rollout-engine dlmrt` passes).
    """
    world = world or World(device=torch.device(device))
    if ablation not in ABLATIONS:
        raise InputError(f"--ablation: unknown {ablation!r}; expected one of {', '.join(ABLATIONS)}")
    variant = VARIANTS[ablation]
    cfg = preset.orl
    for name in ("rollout_prompts", "rollouts_per_prompt", "iterations_steps"):
        if getattr(cfg, name) <= 0:
            raise ConfigError(f"orl.{name}: expected a positive number, got {getattr(cfg, name)}")
    if cfg.isolation not in ("bwrap", "fallback"):
        raise ConfigError(f"orl.isolation: expected 'bwrap' or 'fallback', got {cfg.isolation!r}")
    rollout_prompts(preset, 0)  # a bad or forbidden training file stops the run before any compute
    ckpt = init if isinstance(init, Checkpoint) else check_init(init, preset, world.device)
    init_dir = ckpt.path
    model, tokenizer = ckpt.model, ckpt.tokenizer
    if model.residual_adapter is not None and variant.residual != "adapter":
        raise CheckpointError(
            f"{Path(init_dir) / 'config.json'}: residual_adapter: --ablation {ablation} trains "
            "without the adapter; start from a base dLLM (no residual_adapter)"
        )
    if variant.residual == "adapter" and model.residual_adapter is None:
        model.add_residual_adapter()  # zero output: the first rollouts decode exactly as the base model
    alpha = cfg.residual_alpha if variant.residual != "off" else 0.0
    model.config.residual_alpha = alpha
    # θ₀, frozen: the KL anchor's reference, and the stale / dParallel rollouts' decoder.
    initial = copy.deepcopy(model).eval().requires_grad_(False) if variant.gate or variant.stale else None
    updates = cfg.iterations_steps
    optim = OptimConfig(
        steps=updates,
        batch_size=cfg.batch_size,
        lr=cfg.lr,
        min_lr_ratio=0.1,
        warmup_steps=cfg.warmup_steps,
        weight_decay=cfg.weight_decay,
        grad_clip=cfg.grad_clip,
        seed=cfg.seed,
        checkpoint_every=cfg.checkpoint_every,
        micro_batch_size=cfg.micro_batch_size,
        activation_checkpointing=cfg.activation_checkpointing,
    )
    model, linear = prepare(model, optim, world, out_dir, cpu_linear)
    replica = Replica(model, world)  # what rolls out: the current weights, whole on every rank
    groups = (
        (ParamGroup("adapter", "residual_adapter.", cfg.adapter_lr, cfg.adapter_grad_clip),)
        if variant.residual == "adapter"
        else ()
    )
    stats = OrlStats()
    pool: dict[str, object] = {}
    log: list[dict] = []
    rows_per_batch = cfg.rollout_prompts * cfg.rollouts_per_prompt

    def stale_pool() -> tuple[CapturedStates | None, float]:
        """θ₀'s rollouts of every update's prompts, generated once (trajectory ids kept apart)."""
        if "states" not in pool:
            parts, fractions = [], []
            with torch.no_grad():
                for u in range(updates):
                    states, fraction = collect_states(
                        initial,
                        tokenizer,
                        rollout_prompts(preset, u),
                        preset,
                        alpha,
                        stats,
                        progress,
                        world,
                        rollout,
                        update=u,
                        request_offset=u * rows_per_batch,
                    )
                    fractions.append(fraction)
                    if states is not None:
                        parts.append(
                            select_states(states, cfg.states_per_block, random.Random(cfg.seed * 7919 + u))
                        )
            model.train()
            pool["states"] = concat_pairs(parts) if parts else None
            pool["fraction"] = sum(fractions) / len(fractions)
            pool["generated"] = True
        return pool["states"], pool["fraction"]

    def draw(states: CapturedStates, count: int, rng: random.Random) -> CapturedStates:
        if count <= 0 or count >= len(states):
            return states
        keep = sorted(rng.sample(range(len(states)), count))
        return states.take(keep)

    def step_fn(step: int) -> Step:
        rng = random.Random(cfg.seed * 1_000_003 + step)
        if variant.stale:
            first = "generated" not in pool
            states, fraction = stale_pool()
            generated = updates * rows_per_batch if first else 0
            if states is not None:
                if variant.dparallel:
                    states = states.select(states.step == 0)  # one clean block per trajectory block
                # The same number of states an update replays on average from one rollout batch.
                per_update = cfg.batch_size or max(1, len(states) // updates)
                states = draw(states, per_update, rng)
                states = states.take(
                    sorted(
                        range(len(states)),
                        key=lambda i: (int(states.request[i]), int(states.block[i]), int(states.step[i])),
                    )
                )
            metrics = {
                "retained_fraction": fraction,
                "rollouts_per_update": generated,
                "updates_per_rollout": updates,
            }
        else:
            with torch.no_grad():
                states, fraction = collect_states(
                    replica.current(),
                    tokenizer,
                    rollout_prompts(preset, step),
                    preset,
                    alpha,
                    stats,
                    progress,
                    world,
                    rollout,
                    update=step,
                )
            model.train()
            if states is not None:
                states = draw(select_states(states, cfg.states_per_block, rng), cfg.batch_size, rng)
            metrics = {
                "retained_fraction": fraction,
                "rollouts_per_update": rows_per_batch,
                "updates_per_rollout": 1,
            }
        metrics.update(
            rollout_tpf=stats.rollout_tpf[-1], replayed_states=len(states) if states is not None else 0
        )
        log.append(metrics)  # filled in by the step's forwards
        if states is None or not len(states):
            if world.main:
                warn_nothing_retained(step, rows_per_batch)
            metrics.update(
                gated_share=0.0, aec_active_share=0.0, aec_mean=0.0, kl_anchor_mean=0.0, adapter_norm=0.0
            )
            names = ("ce",) if variant.dparallel is False else ("ce", "ce_rev", "entropy", "entropy_rev")
            return zero_step(metrics, names, (1.0,) * len(names))
        stats.states += len(states)
        stats.state_bytes = max(stats.state_bytes, states.nbytes())
        if variant.dparallel:
            generator = torch.Generator().manual_seed(cfg.seed * 1_000_003 + step)
            return dparallel_step(model, states, preset, world, metrics, generator)
        return orl_step(model, initial, states, preset, variant, world, metrics)

    # The resume check covers the ORL settings, the exact starting weights and a rollout engine other
    # than the default (its logits round differently, so its rollouts are not the same run's).
    digest = (
        f"{preset.digest(*STAGE_SECTIONS['orl'])}-orl2-{ablation}"
        f"-init{checkpoint_digest(init_dir)[:12]}"
        + ("" if rollout.name == "recompute" else f"-{rollout.name}")
    )
    summary = train(
        model,
        step_fn,
        optim,
        out_dir,
        tokenizer,
        digest=digest,
        stage=f"orl[{ablation}]",
        world=world,
        progress=progress,
        model_name=f"{preset.name}-orl" + ("" if ablation == "none" else f"-{ablation}"),
        settings={"cpu_linear": linear.backend},
        param_groups=groups,
    )
    lines = read_log(Path(out_dir)) if world.main else log  # the whole run's, a resumed one included
    per_update = {key: [m.get(key, 0.0) for m in lines] for key in LOG_KEYS}

    def avg(key: str) -> float:
        return sum(per_update[key]) / max(1, len(per_update[key]))

    summary.update(
        ablation=ablation,
        method_version=2,
        refreshes=stats.rollout_batches,
        rollouts=stats.rollouts,
        self_generated_tokens=stats.self_generated_tokens,
        rollout_tpf=stats.rollout_tpf,
        rollout_pass_rate=stats.pass_rate,
        replay_states=stats.states,
        replay_state_bytes=stats.state_bytes,
        rollout_s=stats.rollout_s,
        reference_targets=stats.reference_targets,
        residual_alpha=alpha,
        residual=variant.residual,
        isolation=cfg.isolation,
        seed=cfg.seed,
        gate_tau=cfg.gate_tau,
        rollout_engine=rollout.name,
        gate_applied=variant.gate,
        aec_applied=variant.aec,
        rollouts_per_prompt=cfg.rollouts_per_prompt,
        rollout_prompts=cfg.rollout_prompts,
        states_per_block=cfg.states_per_block,
        per_update=per_update,
        **{f"{key}_mean": avg(key) for key in LOG_KEYS},
        updates_without_retained=sum(1 for m in lines if not m.get("replayed_states")),
    )
    if world.main:
        from orl.io import atomic_write_json

        atomic_write_json(Path(out_dir) / "train_summary.json", summary)
    return summary
