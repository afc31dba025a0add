"""ORL post-training (METHOD.md §3) and its ablations.

One optimizer step replays a batch of captured states with the current weights:

    L = CE(y at masked positions) + λ · L_AEC

Every R steps the buffer is refreshed: the current model decodes fresh training
prompts (threshold(τ_train), residual on), the completions are checked by their
unit tests in the sandbox, and the states of passing rollouts become the new
buffer (targets = the model's own completion). Checkpoints are written at refresh
boundaries, so a resumed run regenerates exactly the buffer an uninterrupted run
had (rollouts are deterministic functions of the weights and the prompt seed).

Ablations (config switches, each its own checkpoint):
  none          ORL as above
  no-residual   residual off in rollout and replay; α = 0 in the checkpoint
  offline       the same prompt slices and buffer sizes, refresh by refresh, but every slice
                decoded by the frozen initial model: only staleness differs from ORL
  no-aec        λ = 0
  aec-nogate    AEC with g_i = 1
  dparallel     no residual; CE + λ · mean entropy of correctly predicted masked positions

The seed (orl.seed, `orl train-orl --seed`) picks the rollout prompt slices and the replay
batches and seeds torch; it is part of the resume digest and of the train record.
"""

from __future__ import annotations

import copy
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from orl.decoding import Policy, decode_rule
from orl.errors import CheckpointError, ConfigError, InputError
from orl.model.checkpoint import checkpoint_digest, load_checkpoint
from orl.tasks import tinycode
from orl.tasks.files import training_problems
from orl.train.config import OptimConfig, TrainPreset
from orl.train.distributed import Replica, World, all_sum, gather_objects, micro_batches, rank_rows
from orl.train.loop import Micro, Step, train
from orl.train.losses import aec_parts, dparallel_entropy_terms, masked_ce_terms
from orl.train.pretrain import STAGE_SECTIONS, prepare
from orl.train.replay import replay_logits
from orl.train.rollout import (
    CapturedStates,
    RecomputeRollout,
    Rollout,
    attach_targets,
    concat_states,
    prompt_prefixes,
)

ABLATIONS = ("none", "no-residual", "offline", "no-aec", "aec-nogate", "dparallel")


@dataclass
class OrlStats:
    """What the run produced, for the progress bar and the train record."""

    refreshes: int = 0
    self_generated_tokens: int = 0  # completion tokens of passing rollouts used as targets
    rollout_tpf: list[float] = field(default_factory=list)
    pass_rate: list[float] = field(default_factory=list)
    states: int = 0
    state_bytes: int = 0
    rollout_s: float = 0.0
    reference_targets: int = 0


def check_init(init_dir: str | Path, preset: TrainPreset, device: str = "cpu"):
    """Load --init and refuse what ORL cannot start from, before any compute."""
    ckpt = load_checkpoint(init_dir, device=device)
    config_path = Path(init_dir) / "config.json"
    if not ckpt.is_diffusion:
        raise CheckpointError(f"{config_path}: architectures: --init is autoregressive ({ckpt.config['architectures'][0]}); "
                              "ORL post-trains a block-diffusion model: run `orl convert` first")
    if ckpt.model.config.block_size != preset.diffusion.block_size:
        raise ConfigError(f"diffusion.block_size: the config says {preset.diffusion.block_size} but {config_path}: "
                          f"block_size is {ckpt.model.config.block_size}")
    layout = ckpt.model.config.block_layout
    if layout != preset.diffusion.block_layout:
        raise ConfigError(f"diffusion.block_layout: the config says {preset.diffusion.block_layout!r} but "
                          f"{config_path} is a {layout!r} checkpoint (METHOD.md §5): pick the preset of its family")
    return ckpt


def rollout_prompts(preset: TrainPreset, refresh: int) -> list[dict]:
    """Training problems (with tests) for one refresh; a different seeded slice each time."""
    cfg = preset.orl
    if cfg.train_file:
        problems = training_problems(cfg.train_file)
        return random.Random(cfg.seed * 1000 + refresh).sample(problems, min(cfg.rollout_prompts, len(problems)))
    return tinycode.train_problems(cfg.seed * 1000 + refresh, cfg.rollout_prompts, preset.task_mix())


def rollout_groups(problems: list[dict], preset: TrainPreset) -> list[tuple[list[int], int]]:
    """Short and long problems decode in separate batches, each with its own token budget (the
    indices of its problems, the budget): the rollout recomputes every row of a batch until its
    last row is done, so one long row would hold up a batch of short ones."""
    budgets = {False: preset.diffusion.max_new_tokens, True: preset.diffusion.long_max_new_tokens}
    groups = [([i for i, p in enumerate(problems) if bool(p.get("long")) == is_long], budget)
              for is_long, budget in budgets.items()]
    return [(group, budget) for group, budget in groups if group]


def collect_states(model, tokenizer, problems: list[dict], preset: TrainPreset, alpha: float, stats: OrlStats,
                   progress: bool, world: World, rollout: Rollout = RecomputeRollout()) -> CapturedStates | None:
    """Rollout, sandboxed check, keep the states of passing rollouts with their own completion as target.

    Each rank decodes (with `rollout`: full recompute, or dlmrt) and checks its share of the prompts;
    the passing states of every rank are gathered, in prompt order, so that every rank holds the same
    replay buffer.
    """
    from orl.sandbox import check_many

    cfg = preset.orl
    t0 = time.perf_counter()
    share = rank_rows(len(problems), world)
    mine = problems[share]
    rule = decode_rule(model.config, tokenizer.eos_ids, Policy("threshold", cfg.tau_train), residual=alpha > 0)
    kept, passed_count, self_generated, reference_targets, tokens, nfe = [], 0, 0, 0, 0, 0
    for indices, budget in rollout_groups(mine, preset):
        group = [mine[i] for i in indices]
        prompts = [tokenizer.encode(p["prompt"]) for p in group]
        result = rollout(model, prompts, rule, max_new_tokens=budget, pad_id=tokenizer.pad_id)
        texts = [tokenizer.decode_completion(ids) for ids in result.completion_ids]
        verdicts = check_many(group, texts, progress=False, timeout_s=3.0, isolation=cfg.isolation)
        passed = torch.tensor([v.passed for v in verdicts], dtype=torch.bool)
        passed_count += int(passed.sum())
        self_generated += sum(len(c) for c, v in zip(result.completion_ids, verdicts, strict=True) if v.passed)
        tokens, nfe = tokens + sum(len(c) for c in result.completion_ids), nfe + sum(result.nfe)
        completions = list(result.completion_ids)
        if cfg.use_reference_for_failed:
            # Off by default: replaces failed rollouts' targets by the reference solution (reported).
            for i, v in enumerate(verdicts):
                if not v.passed:
                    completions[i] = tokenizer.encode(group[i]["canonical_solution"]) + [tokenizer.eos_id]
                    reference_targets += 1
            passed = torch.ones_like(passed)
        states = result.states
        attach_targets(states, completions, model.config.block_size, tokenizer.eos_id, prompt_prefixes(prompts, rule))
        states = states.select(passed[states.request])
        states.request = torch.tensor(indices, dtype=states.request.dtype)[states.request]  # this rank's prompt index
        kept.append(states)
    states = concat_states(kept, [0] * len(kept))
    gathered = gather_objects((share.start, states, passed_count, self_generated, reference_targets, tokens, nfe),
                              world)
    states = concat_states([g[1] for g in gathered], [g[0] for g in gathered])
    stats.refreshes += 1
    stats.self_generated_tokens += sum(g[3] for g in gathered)
    stats.reference_targets += sum(g[4] for g in gathered)
    stats.rollout_tpf.append(sum(g[5] for g in gathered) / max(1, sum(g[6] for g in gathered)))
    stats.pass_rate.append(sum(g[2] for g in gathered) / max(1, len(problems)))
    stats.states, stats.state_bytes = len(states), states.nbytes()
    stats.rollout_s += time.perf_counter() - t0
    if progress and world.main:
        print(f"rollout {stats.refreshes}: pass {stats.pass_rate[-1]:.2f}, TPF {stats.rollout_tpf[-1]:.2f}, "
              f"{len(states)} states ({states.nbytes() / 1e6:.1f} MB)", flush=True)
    return states if len(states) else None


def orl_step(model, batch: CapturedStates, preset: TrainPreset, ablation: str, residual: bool, world: World,
             metrics: dict) -> Step:
    """One replay step (METHOD.md §3): L = CE + λ·L_AEC (or an ablation's), this rank's share of `batch`.

    `metrics` gains what the gate does on the global batch: `gated` (share of AEC positions it
    closes on) and `gate_removed_aec` (AEC loss it removes), from sums over every rank's share once
    the step's forwards are done; the no-gate ablations log what the gate would have done.
    """
    cfg = preset.orl
    gate_sums: list = [0, 0, 0]  # closed positions, removed AEC, AEC positions (tensors once added to)

    def terms(part: CapturedStates):
        part = part.to(world.device)  # the states are kept on the CPU; the losses meet the logits here
        logits = replay_logits(model, part, pack_tokens=cfg.pack_tokens, residual=residual)
        aec = aec_parts(logits, part.masked, part.step > 0, part.prev_entropy, cfg.aec_rho, cfg.aec_gate)
        for i, value in enumerate(aec.gate_sums()):
            gate_sums[i] = gate_sums[i] + value
        ce = masked_ce_terms(logits, part.targets, part.masked)
        if ablation == "no-aec":
            return [ce]
        if ablation == "dparallel":
            return [ce, dparallel_entropy_terms(logits, part.targets, part.masked)]
        return [ce, aec.terms(gated=ablation != "aec-nogate")]

    def run(part: CapturedStates):
        pairs = terms(part)
        return [total for total, _ in pairs], [float(count) for _, count in pairs]

    names, weights = {"no-aec": (("ce",), (1.0,)), "dparallel": (("ce", "entropy"), (1.0, cfg.aec_lambda))}.get(
        ablation, (("ce", "aec"), (1.0, cfg.aec_lambda)))
    micros = []
    for rows in micro_batches(len(batch), world, cfg.micro_batch_size):
        part = batch.take(list(range(rows.start, rows.stop)))
        # Counts known from the states alone: masked positions, and those masked at both steps;
        # dParallel's count (correct predictions) needs the forward.
        counts = None if ablation == "dparallel" else [float(part.masked.sum()),
                                                       float((part.masked & (part.step > 0)[:, None]).sum())]
        micros.append(Micro(run=lambda part=part: run(part), counts=counts[: len(names)] if counts else None,
                            tokens=sum(len(c) for c in part.context) + len(part) * model.config.block_size))

    def finish() -> None:
        # float32, as a single process has always divided them (a world of one logs the same digits)
        closed, removed, positions = all_sum(torch.stack([torch.as_tensor(v).float().cpu() for v in gate_sums]),
                                             world).float()
        metrics.update(gated=closed / positions.clamp_min(1), gate_removed_aec=removed / positions.clamp_min(1))

    return Step(names, weights, micros, metrics, finish)


def train_orl(preset: TrainPreset, init_dir: str | Path, out_dir: str | Path, *, ablation: str = "none",
              device: str = "cpu", progress: bool = True, world: World | None = None,
              rollout: Rollout = RecomputeRollout(), cpu_linear: str = "aten") -> dict:
    """Post-train `init_dir` with ORL (or an ablation) and write the checkpoint to `out_dir`.

    `rollout` decodes the refreshes: full recompute (the default, and the tiny records') or dlmrt
    (engines/dlmrt/rollout.py, what `orl train-orl --rollout-engine dlmrt` passes).
    """
    world = world or World(device=torch.device(device))
    if ablation not in ABLATIONS:
        raise InputError(f"--ablation: unknown {ablation!r}; expected one of {', '.join(ABLATIONS)}")
    cfg = preset.orl
    if cfg.rollout_prompts <= 0:
        raise ConfigError(f"orl.rollout_prompts: expected a positive number of prompts, got {cfg.rollout_prompts}")
    if cfg.isolation not in ("bwrap", "fallback"):
        raise ConfigError(f"orl.isolation: expected 'bwrap' or 'fallback', got {cfg.isolation!r}")
    rollout_prompts(preset, 0)  # a bad or forbidden training file stops the run before any compute
    ckpt = check_init(init_dir, preset, world.device)
    model, tokenizer = ckpt.model, ckpt.tokenizer
    residual = ablation not in ("no-residual", "dparallel")
    alpha = cfg.residual_alpha if residual else 0.0
    model.config.residual_alpha = alpha
    offline = ablation == "offline"
    initial = copy.deepcopy(model).eval().requires_grad_(False) if offline else None  # decodes every offline slice
    optim = OptimConfig(steps=cfg.iterations_steps, batch_size=cfg.batch_size, lr=cfg.lr, min_lr_ratio=0.1,
                        warmup_steps=cfg.warmup_steps, weight_decay=cfg.weight_decay, grad_clip=cfg.grad_clip,
                        seed=cfg.seed, checkpoint_every=cfg.refresh_every, micro_batch_size=cfg.micro_batch_size,
                        activation_checkpointing=cfg.activation_checkpointing)
    model, linear = prepare(model, optim, world, out_dir, cpu_linear)
    replica = Replica(model, world)  # what rolls out: the current weights, whole on every rank
    stats = OrlStats()
    buffer: dict[str, CapturedStates | None] = {"states": None}
    gate_log: list[dict] = []

    def refresh(step: int) -> None:
        source = initial if offline else replica.current()
        with torch.no_grad():
            problems = rollout_prompts(preset, step // cfg.refresh_every)
            buffer["states"] = collect_states(source, tokenizer, problems, preset, alpha, stats, progress, world,
                                              rollout)
        model.train()

    def step_fn(step: int) -> Step:
        if buffer["states"] is None or step % cfg.refresh_every == 0:
            refresh(step)
        states = buffer["states"]
        if states is None:
            raise InputError("orl: no rollout passed its tests, so there are no self-generated targets; "
                             "train the base model longer or lower orl.tau_train")
        rng = random.Random(cfg.seed * 1_000_003 + step)
        pick = torch.zeros(len(states), dtype=torch.bool)
        pick[rng.sample(range(len(states)), min(cfg.batch_size, len(states)))] = True
        batch = states.select(pick)  # the global batch, the same on every rank
        metrics = {"rollout_tpf": stats.rollout_tpf[-1], "rollout_pass": stats.pass_rate[-1]}
        gate_log.append(metrics)  # filled in by the step's forwards
        return orl_step(model, batch, preset, ablation, residual, world, metrics)

    # The resume check covers the ORL settings, the exact starting weights and a rollout engine other
    # than the default (its logits round differently, so its rollouts are not the same run's).
    digest = (f"{preset.digest(*STAGE_SECTIONS['orl'])}-orl-{ablation}"
              f"-init{checkpoint_digest(init_dir)[:12]}" + ("" if rollout.name == "recompute" else f"-{rollout.name}"))
    summary = train(model, step_fn, optim, out_dir, tokenizer, digest=digest, stage=f"orl[{ablation}]", world=world,
                    progress=progress, model_name=f"{preset.name}-orl" + ("" if ablation == "none" else f"-{ablation}"),
                    settings={"cpu_linear": linear.backend})
    summary.update(ablation=ablation, refreshes=stats.refreshes, self_generated_tokens=stats.self_generated_tokens,
                   rollout_tpf=stats.rollout_tpf, rollout_pass_rate=stats.pass_rate, replay_states=stats.states,
                   replay_state_bytes=stats.state_bytes, rollout_s=stats.rollout_s,
                   reference_targets=stats.reference_targets, residual_alpha=alpha, isolation=cfg.isolation,
                   seed=cfg.seed, aec_gate=cfg.aec_gate, rollout_engine=rollout.name,
                   gate_applied=ablation not in ("aec-nogate", "no-aec", "dparallel"),
                   gated_fraction=[m["gated"] for m in gate_log if "gated" in m],
                   gate_removed_aec=[m["gate_removed_aec"] for m in gate_log if "gated" in m])
    summary["gated_fraction_mean"] = sum(summary["gated_fraction"]) / max(1, len(summary["gated_fraction"]))
    if world.main:
        from orl.io import atomic_write_json

        atomic_write_json(Path(out_dir) / "train_summary.json", summary)
    return summary
