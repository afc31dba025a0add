"""ORL post-training, version 2 (docs/method.md §3), and its Table 5 ablations.

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
exactly as the base model does. Ablations, each a switch of the same loop (same N, K, S, prompts,
number of updates):
  none              ORL as above
  stale             one rollout set, generated once by θ₀ over every update's prompts, replayed for
                    every update (each update draws from the whole set): only staleness differs
  no-aec            λ = 0
  no-gate           CE on every masked position, no KL anchor
  no-residual       no adapter; residual off in rollouts and replay (α = 0 in the checkpoint)
  entropy-weighted  no adapter; the version-1 residual E[MASK] + α(1 − H/log V)·z (RCD-style)
  dparallel         dParallel's certainty-forcing recipe (its public training script): offline
                    trajectories of θ₀ (the stale set's, verified), no residual, each block masked at
                    rate 0.5 and its complementary mask, CE on both plus entropy (at T = 0.5, weight
                    2) on masked positions the model already predicts correctly

The seed (orl.seed, `orl train-orl --seed`) picks the prompt slices, the rollout samples, the
selected states and seeds torch; it is part of the resume digest and of the train record. Every
update's rollouts are a pure function of (weights, seed, update), so a resumed run regenerates
exactly what an uninterrupted one had.
"""

from __future__ import annotations

import copy
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from orl.decoding import Policy, decode_rule
from orl.decoding.rollout import (
    CapturedStates,
    RecomputeRollout,
    Rollout,
    attach_targets,
    concat_states,
    prompt_prefixes,
)
from orl.errors import CheckpointError, ConfigError, InputError
from orl.model.checkpoint import Checkpoint, checkpoint_digest, load_checkpoint
from orl.tasks import tinycode
from orl.tasks.files import training_problems
from orl.train.config import OptimConfig, TrainPreset
from orl.train.distributed import Replica, World, all_sum, gather_objects, micro_batches, rank_rows
from orl.train.loop import LOG, Micro, ParamGroup, Step, train
from orl.train.losses import aec_parts, dparallel_entropy_terms, gate_split, kl_anchor_terms, masked_ce_terms
from orl.train.pretrain import STAGE_SECTIONS, prepare
from orl.train.replay import replay_logits

ABLATIONS = ("none", "stale", "no-aec", "no-gate", "no-residual", "entropy-weighted", "dparallel")

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


@dataclass(frozen=True)
class Variant:
    """What an ablation switches in the one loop."""

    residual: str = "adapter"  # "adapter", "entropy-weighted" or "off"
    stale: bool = False  # rollouts from θ₀, generated once, replayed by every update
    gate: bool = True  # CE on U, KL anchor on C (False: CE on every masked position)
    aec: bool = True
    dparallel: bool = False


VARIANTS = {
    "none": Variant(),
    "stale": Variant(stale=True),
    "no-aec": Variant(aec=False),
    "no-gate": Variant(gate=False),
    "no-residual": Variant(residual="off"),
    "entropy-weighted": Variant(residual="entropy-weighted"),
    "dparallel": Variant(residual="off", stale=True, gate=False, aec=False, dparallel=True),
}


@dataclass
class OrlStats:
    """What the run produced, for the progress bar and the train record."""

    rollout_batches: int = 0
    rollouts: int = 0  # trajectories decoded
    self_generated_tokens: int = 0  # completion tokens of retained rollouts used as targets
    rollout_tpf: list[float] = field(default_factory=list)
    pass_rate: list[float] = field(default_factory=list)  # retained fraction per rollout batch
    states: int = 0  # replayed states, all updates
    state_bytes: int = 0  # the largest replay set held at once
    rollout_s: float = 0.0
    reference_targets: int = 0


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


def rollout_prompts(preset: TrainPreset, update: int) -> list[dict]:
    """Training problems (with tests) for one update's rollouts; a different seeded slice each time."""
    cfg = preset.orl
    if cfg.train_file:
        problems = training_problems(cfg.train_file)
        return random.Random(cfg.seed * 1000 + update).sample(
            problems, min(cfg.rollout_prompts, len(problems))
        )
    return tinycode.train_problems(cfg.seed * 1000 + update, cfg.rollout_prompts, preset.task_mix())


def rollout_groups(problems: list[dict], preset: TrainPreset) -> list[tuple[list[int], int]]:
    """Short, long and TinyMath problems decode in separate batches, each with its own token budget (the
    indices of its problems, the budget): the rollout recomputes every row of a batch until its
    last row is done, so one long row would hold up a batch of short ones."""
    budgets = {
        "short": preset.diffusion.max_new_tokens,
        "long": preset.diffusion.long_max_new_tokens,
        "math": preset.diffusion.math_max_new_tokens,
    }
    groups = [
        ([i for i, p in enumerate(problems) if budget_kind(p) == kind], budget)
        for kind, budget in budgets.items()
    ]
    return [(group, budget) for group, budget in groups if group]


def budget_kind(problem: dict) -> str:
    """Which token budget a training problem's rollouts get: "math" (TinyMath), "long" or "short"."""
    return "math" if problem.get("math") else "long" if problem.get("long") else "short"


def sample_seed(seed: int, update: int, row: int) -> int:
    """The sampling seed of one rollout (prompt × K row) of one update: independent of the world size."""
    return (seed * 1_000_003 + update) * 100_003 + row


def select_states(states: CapturedStates, per_block: int, rng: random.Random) -> CapturedStates:
    """At most `per_block` states of each (trajectory, block), uniformly among its steps (docs/method.md §3),
    ordered by (trajectory, block, step) so that states sharing a clean context sit together."""
    steps: dict[tuple[int, int], list[int]] = {}
    for i, key in enumerate(zip(states.request.tolist(), states.block.tolist(), strict=True)):
        steps.setdefault(key, []).append(i)
    keep = []
    for key in sorted(steps):
        idx = steps[key]
        keep += sorted(rng.sample(idx, min(per_block, len(idx))) if per_block > 0 else idx)
    order = sorted(keep, key=lambda i: (int(states.request[i]), int(states.block[i]), int(states.step[i])))
    return states.take(order)


def collect_states(
    model,
    tokenizer,
    problems: list[dict],
    preset: TrainPreset,
    alpha: float,
    stats: OrlStats,
    progress: bool,
    world: World,
    rollout: Rollout = RecomputeRollout(),
    *,
    update: int = 0,
    request_offset: int = 0,
) -> tuple[CapturedStates | None, float]:
    """K rollouts of each prompt, sandboxed check, the states of retained (verified) rollouts with
    their own completion as target. Returns (states, retained fraction).

    Each rank decodes and checks its share of the N·K rollouts; the retained states of every rank are
    gathered in rollout order, so every rank holds the same set. Request ids are global rollout
    indices (+ `request_offset`), one per trajectory.
    """
    from orl.sandbox import check_many

    cfg = preset.orl
    t0 = time.perf_counter()
    rows = [p for p in problems for _ in range(cfg.rollouts_per_prompt)]
    share = rank_rows(len(rows), world)
    mine = rows[share]
    rule = decode_rule(
        model.config, tokenizer.eos_ids, Policy("threshold", cfg.tau_train), residual=alpha > 0
    )
    kept, passed_count, self_generated, reference_targets, tokens, nfe = [], 0, 0, 0, 0, 0
    for indices, budget in rollout_groups(mine, preset):
        group = [mine[i] for i in indices]
        prompts = [tokenizer.encode(p["prompt"]) for p in group]
        seeds = [sample_seed(cfg.seed, update, request_offset + share.start + i) for i in indices]
        result = rollout(
            model,
            prompts,
            rule,
            max_new_tokens=budget,
            pad_id=tokenizer.pad_id,
            temperature=cfg.rollout_temperature,
            seeds=seeds,
        )
        texts = [tokenizer.decode_completion(ids) for ids in result.completion_ids]
        verdicts = check_many(group, texts, progress=False, timeout_s=3.0, isolation=cfg.isolation)
        passed = torch.tensor([v.passed for v in verdicts], dtype=torch.bool)
        passed_count += int(passed.sum())
        self_generated += sum(
            len(c) for c, v in zip(result.completion_ids, verdicts, strict=True) if v.passed
        )
        tokens, nfe = tokens + sum(len(c) for c in result.completion_ids), nfe + sum(result.nfe)
        completions = list(result.completion_ids)
        if cfg.use_reference_for_failed:
            # Off by default (the smoke preset's models solve nothing): failed rollouts' targets become
            # the reference solution, counted in reference_targets and the retained fraction.
            for i, v in enumerate(verdicts):
                if not v.passed:
                    completions[i] = tokenizer.encode(group[i]["canonical_solution"]) + [tokenizer.eos_id]
                    reference_targets += 1
            passed = torch.ones_like(passed)
        states = result.states
        attach_targets(
            states, completions, model.config.block_size, tokenizer.eos_id, prompt_prefixes(prompts, rule)
        )
        states = states.select(passed[states.request])
        states.request = torch.tensor(indices, dtype=states.request.dtype)[
            states.request
        ]  # this rank's row index
        kept.append(states)
    states = concat_states(kept, [0] * len(kept))
    gathered = gather_objects(
        (share.start, states, passed_count, self_generated, reference_targets, tokens, nfe), world
    )
    states = concat_states([g[1] for g in gathered], [request_offset + g[0] for g in gathered])
    retained = sum(g[2] for g in gathered) + sum(g[4] for g in gathered)
    fraction = retained / max(1, len(rows))
    stats.rollout_batches += 1
    stats.rollouts += len(rows)
    stats.self_generated_tokens += sum(g[3] for g in gathered)
    stats.reference_targets += sum(g[4] for g in gathered)
    stats.rollout_tpf.append(sum(g[5] for g in gathered) / max(1, sum(g[6] for g in gathered)))
    stats.pass_rate.append(fraction)
    stats.rollout_s += time.perf_counter() - t0
    if progress and world.main:
        print(
            f"rollouts {stats.rollout_batches}: retained {fraction:.2f} of {len(rows)}, TPF "
            f"{stats.rollout_tpf[-1]:.2f}, {len(states)} states",
            flush=True,
        )
    return (states if len(states) else None), fraction


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


def _zero_step(metrics: dict, names: tuple[str, ...], weights: tuple[float, ...]) -> Step:
    """An update with nothing to replay: zero loss, no gradient."""
    zero = torch.zeros((), requires_grad=True)
    micro = Micro(
        run=lambda: ([zero * 1.0 for _ in names], [0.0] * len(names)), counts=[0.0] * len(names), tokens=0
    )
    return Step(names, weights, [micro], metrics)


def orl_step(
    model,
    ref_model,
    batch: CapturedStates,
    preset: TrainPreset,
    variant: Variant,
    world: World,
    metrics: dict,
) -> Step:
    """One update's replay (docs/method.md §3) on this rank's share of `batch`: CE on U, β·KL on C, λ·AEC."""
    cfg = preset.orl
    residual = variant.residual != "off"
    sums: list = [
        0.0
    ] * 8  # masked, confident, AEC pairs, AEC active, AEC hinge, KL sum, adapter norm, its count

    def run(part: CapturedStates):
        part = part.to(world.device)  # the states are kept on the CPU; the losses meet the logits here
        logits = replay_logits(
            model, part, pack_tokens=cfg.pack_tokens, residual=residual, share_context=cfg.share_context
        )
        norm_sum, norm_count = getattr(model, "residual_norm_stats", (0.0, 0.0))
        uncertain, confident = gate_split(part.masked, part.confidence, cfg.gate_tau)
        aec = aec_parts(logits, part.masked, part.step, part.source_entropy, cfg.aec_rho)
        pairs, (active, hinge) = aec.terms()[1], aec.stats()
        out = [masked_ce_terms(logits, part.targets, uncertain if variant.gate else part.masked)]
        kl_sum = torch.zeros(())
        if variant.gate:
            with torch.no_grad():
                ref = replay_logits(
                    ref_model,
                    part,
                    pack_tokens=cfg.pack_tokens,
                    residual=residual,
                    share_context=cfg.share_context,
                )
            kl = kl_anchor_terms(logits, ref, confident, cfg.kl_cap)
            out.append(kl)
            kl_sum = kl[0].detach()
        if variant.aec:
            out.append(aec.terms())
        for i, value in enumerate(
            (part.masked.sum(), confident.sum(), pairs, active, hinge, kl_sum, norm_sum, norm_count)
        ):
            sums[i] = sums[i] + torch.as_tensor(value).detach().float().cpu()
        return [total for total, _ in out], [float(count) for _, count in out]

    names = ("ce",) + (("kl",) if variant.gate else ()) + (("aec",) if variant.aec else ())
    weights = (1.0,) + ((cfg.kl_beta,) if variant.gate else ()) + ((cfg.aec_lambda,) if variant.aec else ())
    micros = []
    for rows in micro_batches(len(batch), world, cfg.micro_batch_size):
        part = batch.take(list(range(rows.start, rows.stop)))
        uncertain, confident = gate_split(part.masked, part.confidence, cfg.gate_tau)
        counts = [float((uncertain if variant.gate else part.masked).sum())]
        counts += [float(confident.sum())] if variant.gate else []
        counts += [float(((part.step > 0) & part.masked.any(-1)).sum())] if variant.aec else []
        micros.append(
            Micro(
                run=lambda part=part: run(part),
                counts=counts,
                tokens=sum(len(c) for c in part.context) + len(part) * model.config.block_size,
            )
        )

    def finish() -> None:
        total = all_sum(torch.stack([torch.as_tensor(v).float() for v in sums]), world).float()
        masked, confident, pairs, active, hinge, kl, norm, norm_count = total.tolist()
        metrics.update(
            gated_share=confident / max(masked, 1.0),
            aec_active_share=active / max(pairs, 1.0),
            aec_mean=hinge / max(pairs, 1.0),
            kl_anchor_mean=kl / max(confident, 1.0) if variant.gate else 0.0,
            adapter_norm=norm / max(norm_count, 1.0),
        )

    return Step(names, weights, micros, metrics, finish)


def complementary_pairs(states: CapturedStates, mask_id: int, generator: torch.Generator) -> CapturedStates:
    """dParallel's masks on each state's clean block (its verified targets): every completion position
    masked with probability 0.5, then the same block with the complementary mask (rows n..2n−1).
    No residual (z = 0, weight 0)."""
    maskable = states.masked  # states at step 0: every completion position of the block is masked
    draw = torch.rand(maskable.shape, generator=generator) < 0.5
    halves = []
    for m in (maskable & draw, maskable & ~draw):
        part = states.take(list(range(len(states))))
        part.tokens = torch.where(m, torch.full_like(part.targets, mask_id), part.targets)
        part.masked = m
        part.residual = torch.zeros_like(part.residual)
        part.weight = torch.zeros_like(part.weight)
        halves.append(part)
    return concat_pairs(halves)


def concat_pairs(parts: list[CapturedStates]) -> CapturedStates:
    """Concatenate states in the given order (no re-sorting)."""
    from dataclasses import fields

    out = {}
    for f in fields(CapturedStates):
        values = [getattr(p, f.name) for p in parts]
        out[f.name] = (
            [c for v in values for c in v]
            if f.name == "context"
            else (None if all(v is None for v in values) else torch.cat(values))
        )
    return CapturedStates(**out)


def dparallel_step(
    model, batch: CapturedStates, preset: TrainPreset, world: World, metrics: dict, generator: torch.Generator
) -> Step:
    """dParallel's loss on complementary masks of `batch`: CE + CE_rev + w·(entropy + entropy_rev) at T."""
    cfg = preset.orl
    n = len(batch)
    pairs = complementary_pairs(batch, model.config.mask_token_id, generator)

    def run(part: CapturedStates):
        part = part.to(world.device)
        logits = replay_logits(
            model, part, pack_tokens=cfg.pack_tokens, residual=False, share_context=cfg.share_context
        )
        first = torch.arange(len(part), device=logits.device) < len(part) // 2
        out = []
        for half in (first, ~first):
            masked = part.masked & half[:, None]
            out.append(masked_ce_terms(logits, part.targets, masked))
        for half in (first, ~first):
            masked = part.masked & half[:, None]
            out.append(dparallel_entropy_terms(logits, part.targets, masked, cfg.dparallel_temperature))
        return [total for total, _ in out], [float(count) for _, count in out]

    mine = rank_rows(n, world)  # a rank takes the same blocks under both masks
    part = pairs.take(list(range(mine.start, mine.stop)) + list(range(n + mine.start, n + mine.stop)))
    metrics.update(gated_share=0.0, aec_active_share=0.0, aec_mean=0.0, kl_anchor_mean=0.0, adapter_norm=0.0)
    w = cfg.dparallel_entropy_weight
    micro = Micro(
        run=lambda: run(part),
        counts=None,
        tokens=sum(len(c) for c in part.context) + len(part) * model.config.block_size,
    )
    return Step(("ce", "ce_rev", "entropy", "entropy_rev"), (1.0, 1.0, w, w), [micro], metrics)


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
    (engines/dlmrt/rollout.py, what `orl train-orl --rollout-engine dlmrt` passes).
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
            return _zero_step(metrics, names, (1.0,) * len(names))
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
