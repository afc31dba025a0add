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
from orl.train.config import OptimConfig, TrainPreset
from orl.train.loop import StepResult, train
from orl.train.losses import aec_loss, dparallel_entropy, gate_stats, masked_ce
from orl.train.replay import replay_logits
from orl.train.rollout import CapturedStates, attach_targets, prompt_prefixes, rollout

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
    gated_fraction: list[float] = field(default_factory=list)  # per replay batch: AEC positions the gate closes on
    gate_removed_aec: list[float] = field(default_factory=list)  # per replay batch: AEC loss those positions carry


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
    return ckpt


def rollout_prompts(preset: TrainPreset, refresh: int) -> list[dict]:
    """Training problems (with tests) for one refresh; a different seeded slice each time."""
    cfg = preset.orl
    return tinycode.train_problems(cfg.seed * 1000 + refresh, cfg.rollout_prompts, preset.task_mix())


def rollout_groups(problems: list[dict], preset: TrainPreset) -> list[tuple[list[dict], int]]:
    """Short and long problems decode in separate batches, each with its own token budget: the
    rollout recomputes every row of a batch until its last row is done, so one long row would
    hold up a batch of short ones."""
    budgets = {False: preset.diffusion.max_new_tokens, True: preset.diffusion.long_max_new_tokens}
    groups = [([p for p in problems if bool(p.get("long")) == is_long], budget) for is_long, budget in budgets.items()]
    return [(group, budget) for group, budget in groups if group]


def collect_states(model, tokenizer, problems: list[dict], preset: TrainPreset, alpha: float, stats: OrlStats,
                   progress: bool) -> CapturedStates | None:
    """Rollout, sandboxed check, keep the states of passing rollouts with their own completion as target."""
    from orl.sandbox import check_many

    cfg = preset.orl
    t0 = time.perf_counter()
    rule = decode_rule(model.config, tokenizer.eos_ids, Policy("threshold", cfg.tau_train), residual=alpha > 0)
    kept, tokens, nfe, passed_count = [], 0, 0, 0
    for group, budget in rollout_groups(problems, preset):
        prompts = [tokenizer.encode(p["prompt"]) for p in group]
        result = rollout(model, prompts, rule, max_new_tokens=budget, pad_id=tokenizer.pad_id)
        texts = [tokenizer.decode_completion(ids) for ids in result.completion_ids]
        verdicts = check_many(group, texts, progress=False, timeout_s=3.0)
        passed = torch.tensor([v.passed for v in verdicts])
        passed_count += int(passed.sum())
        tokens, nfe = tokens + sum(len(c) for c in result.completion_ids), nfe + sum(result.nfe)
        stats.self_generated_tokens += sum(len(c) for c, v in zip(result.completion_ids, verdicts, strict=True)
                                           if v.passed)
        completions = list(result.completion_ids)
        if cfg.use_reference_for_failed:
            # Off by default: replaces failed rollouts' targets by the reference solution (reported).
            for i, v in enumerate(verdicts):
                if not v.passed:
                    completions[i] = tokenizer.encode(group[i]["canonical_solution"]) + [tokenizer.eos_id]
                    stats.reference_targets += 1
            passed = torch.ones_like(passed)
        states = result.states
        attach_targets(states, completions, model.config.block_size, tokenizer.eos_id, prompt_prefixes(prompts, rule))
        kept.append(states.select(passed[states.request]))
    states = CapturedStates.concat(kept)
    tpf = tokens / max(1, nfe)
    stats.refreshes += 1
    stats.rollout_tpf.append(tpf)
    stats.pass_rate.append(passed_count / max(1, len(problems)))
    stats.states, stats.state_bytes = len(states), states.nbytes()
    stats.rollout_s += time.perf_counter() - t0
    if progress:
        print(f"rollout {stats.refreshes}: pass {stats.pass_rate[-1]:.2f}, TPF {tpf:.2f}, "
              f"{len(states)} states ({states.nbytes() / 1e6:.1f} MB)", flush=True)
    return states if len(states) else None


def orl_loss(model, batch: CapturedStates, preset: TrainPreset, ablation: str, residual: bool, pack_tokens: int):
    """(loss, CE, the auxiliary term, gate_stats of the batch: closed share, AEC removed)."""
    cfg = preset.orl
    logits = replay_logits(model, batch, pack_tokens=pack_tokens, residual=residual)
    ce = masked_ce(logits, batch.targets, batch.masked)
    gated = gate_stats(logits, batch.masked, batch.step > 0, batch.prev_entropy, cfg.aec_rho, cfg.aec_gate)
    if ablation == "dparallel":
        extra = dparallel_entropy(logits, batch.targets, batch.masked)
        return ce + cfg.aec_lambda * extra, ce, extra, gated
    if ablation == "no-aec":
        return ce, ce, torch.zeros(()), gated
    aec = aec_loss(logits, batch.masked, batch.step > 0, batch.prev_entropy, rho=cfg.aec_rho,
                   gate=None if ablation == "aec-nogate" else cfg.aec_gate)
    return ce + cfg.aec_lambda * aec, ce, aec, gated


def train_orl(preset: TrainPreset, init_dir: str | Path, out_dir: str | Path, *, ablation: str = "none",
              device: str = "cpu", progress: bool = True, halt_after_checkpoint: int | None = None) -> dict:
    """Post-train `init_dir` with ORL (or an ablation) and write the checkpoint to `out_dir`."""
    if ablation not in ABLATIONS:
        raise InputError(f"--ablation: unknown {ablation!r}; expected one of {', '.join(ABLATIONS)}")
    cfg = preset.orl
    if cfg.rollout_prompts <= 0:
        raise ConfigError(f"orl.rollout_prompts: expected a positive number of prompts, got {cfg.rollout_prompts}")
    ckpt = check_init(init_dir, preset, device)
    model, tokenizer = ckpt.model, ckpt.tokenizer
    residual = ablation not in ("no-residual", "dparallel")
    alpha = cfg.residual_alpha if residual else 0.0
    model.config.residual_alpha = alpha
    offline = ablation == "offline"
    initial = copy.deepcopy(model).eval() if offline else None  # frozen: decodes every offline slice
    optim = OptimConfig(steps=cfg.iterations_steps, batch_size=cfg.batch_size, lr=cfg.lr, min_lr_ratio=0.1,
                        warmup_steps=cfg.warmup_steps, weight_decay=cfg.weight_decay, grad_clip=cfg.grad_clip,
                        seed=cfg.seed, checkpoint_every=cfg.refresh_every)
    stats = OrlStats()
    buffer: dict[str, CapturedStates | None] = {"states": None}

    def refresh(step: int) -> None:
        source = initial if offline else model
        source.eval()
        with torch.no_grad():
            problems = rollout_prompts(preset, step // cfg.refresh_every)
            buffer["states"] = collect_states(source, tokenizer, problems, preset, alpha, stats, progress)
        model.train()

    def step_fn(step: int) -> StepResult:
        if buffer["states"] is None or step % cfg.refresh_every == 0:
            refresh(step)
        states = buffer["states"]
        if states is None:
            raise InputError("orl: no rollout passed its tests, so there are no self-generated targets; "
                             "train the base model longer or lower orl.tau_train")
        rng = random.Random(cfg.seed * 1_000_003 + step)
        pick = torch.zeros(len(states), dtype=torch.bool)
        pick[rng.sample(range(len(states)), min(cfg.batch_size, len(states)))] = True
        batch = states.select(pick)
        loss, ce, aux, gated = orl_loss(model, batch, preset, ablation, residual, cfg.pack_tokens)
        stats.gated_fraction.append(gated[0])
        stats.gate_removed_aec.append(gated[1])
        tokens = sum(len(c) for c in batch.context) + len(batch) * model.config.block_size
        return StepResult(loss, tokens, {"ce": ce.item(), "aux": aux.item(), "gated": gated[0],
                                         "tpf": stats.rollout_tpf[-1], "pass": stats.pass_rate[-1]})

    # The resume check covers the ORL settings and the exact starting weights.
    digest = (f"{preset.digest('difficulty', 'long_fraction', 'diffusion', 'orl')}-orl-{ablation}"
              f"-init{checkpoint_digest(init_dir)[:12]}")
    summary = train(model, step_fn, optim, out_dir, tokenizer, digest=digest, stage=f"orl[{ablation}]",
                    progress=progress, halt_after_checkpoint=halt_after_checkpoint,
                    model_name=f"{preset.name}-orl" + ("" if ablation == "none" else f"-{ablation}"))
    summary.update(ablation=ablation, refreshes=stats.refreshes, self_generated_tokens=stats.self_generated_tokens,
                   rollout_tpf=stats.rollout_tpf, rollout_pass_rate=stats.pass_rate, replay_states=stats.states,
                   replay_state_bytes=stats.state_bytes, rollout_s=stats.rollout_s,
                   reference_targets=stats.reference_targets, residual_alpha=alpha, seed=cfg.seed,
                   aec_gate=cfg.aec_gate, gate_applied=ablation not in ("aec-nogate", "no-aec", "dparallel"),
                   gated_fraction=stats.gated_fraction,
                   gated_fraction_mean=sum(stats.gated_fraction) / max(1, len(stats.gated_fraction)),
                   gate_removed_aec=stats.gate_removed_aec)
    from orl.io import atomic_write_json

    atomic_write_json(Path(out_dir) / "train_summary.json", summary)
    return summary
