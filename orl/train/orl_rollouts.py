"""ORL's rollouts (docs/method.md §3 steps 1–3): which prompts an update decodes, in which token-budget
groups and with which sampling seeds; decoding them, checking each completion in the sandbox, and selecting
at most S states per block of the retained trajectories for replay.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from orl.decoding import Policy, decode_rule
from orl.decoding.rollout import (
    CapturedStates,
    RecomputeRollout,
    Rollout,
    RolloutResult,
    attach_targets,
    concat_states,
    prompt_prefixes,
)
from orl.tasks import tinycode
from orl.tasks.files import training_problems
from orl.train.config import TrainPreset
from orl.train.distributed import World, gather_objects, rank_rows


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


def decode_rollout_groups(
    rollout: Rollout,
    model,
    tokenizer,
    rows: list[dict],
    preset: TrainPreset,
    rule,
    *,
    seed: int,
    update: int,
    temperature: float,
    first_request: int = 0,
) -> Iterator[tuple[list[int], list[list[int]], RolloutResult]]:
    """Decode `rows` (training problems, one per rollout) in their token-budget groups (rollout_groups),
    row i sampled with the seed sample_seed(seed, update, first_request + i): per group, the indices of
    its rows, their prompt ids and the rollout's result."""
    for indices, budget in rollout_groups(rows, preset):
        prompts = [tokenizer.encode(rows[i]["prompt"]) for i in indices]
        result = rollout(
            model,
            prompts,
            rule,
            max_new_tokens=budget,
            pad_id=tokenizer.pad_id,
            temperature=temperature,
            seeds=[sample_seed(seed, update, first_request + i) for i in indices],
        )
        yield indices, prompts, result


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
    groups = decode_rollout_groups(
        rollout,
        model,
        tokenizer,
        mine,
        preset,
        rule,
        seed=cfg.seed,
        update=update,
        temperature=cfg.rollout_temperature,
        first_request=request_offset + share.start,
    )
    for indices, prompts, result in groups:
        group = [mine[i] for i in indices]
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
