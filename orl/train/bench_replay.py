"""Replay train-step speed with and without the shared-clean-context packing (Table 5's step-speed column).

One rollout batch as ORL makes it (N prompts, K sampled rollouts each, threshold(τ_train), residual
on, at most S states per block) is replayed by an ORL update (forward + backward of gated CE and
λ·AEC, docs/method.md §3) twice, in the same process:

- unpacked: one state per row with its own copy of the clean context, right-padded;
- packed: the states of one block share one copy of their clean context ("staircase"), segments
  packed into fixed-token rows balanced by attended-token cost (orl.train.replay).

The gain grows with K·S (more noisy states per clean prefix; the page reports 5.2× at K = 16).
Real tokens per second count every state with its own context, the work the unpacked layout does,
so the two layouts are compared on the same states.
"""

from __future__ import annotations

import random

import torch

from orl.decoding import Policy, decode_rule
from orl.decoding.rollout import RecomputeRollout, attach_targets, concat_states, prompt_prefixes
from orl.model.checkpoint import load_checkpoint
from orl.timing import synchronizer, timed
from orl.train.config import TrainPreset
from orl.train.losses import aec_parts, gate_split, masked_ce_terms, mean
from orl.train.orl_rollouts import decode_rollout_groups, rollout_prompts, select_states
from orl.train.replay import context_groups, packed_layout, padded_layout, replay_logits


def capture_batch(model, tok, preset: TrainPreset, rollouts_per_prompt: int):
    """One update's selected states (targets: each rollout's own completion; verification left out:
    the layout's speed does not depend on which rollouts pass)."""
    cfg = preset.orl
    problems = rollout_prompts(preset, 0)
    rows = [p for p in problems for _ in range(rollouts_per_prompt)]
    rule = decode_rule(model.config, tok.eos_ids, Policy("threshold", cfg.tau_train), residual=True)
    parts, offsets = [], []
    groups = decode_rollout_groups(
        RecomputeRollout(),
        model,
        tok,
        rows,
        preset,
        rule,
        seed=cfg.seed,
        update=0,
        temperature=cfg.rollout_temperature,
    )
    for indices, prompts, result in groups:
        states = result.states
        attach_targets(
            states, result.completion_ids, model.config.block_size, tok.eos_id, prompt_prefixes(prompts, rule)
        )
        states.request = torch.tensor(indices, dtype=states.request.dtype)[states.request]
        parts.append(states)
        offsets.append(0)
    states = concat_states(parts, offsets)
    return select_states(states, cfg.states_per_block, random.Random(cfg.seed))


def bench_replay(
    preset: TrainPreset,
    init_dir,
    *,
    steps: int = 10,
    pack_tokens: int = 512,
    device: str = "cpu",
    rollouts_per_prompt: int | None = None,
) -> list[dict]:
    """Time `steps` replay updates (after one warm-up) of one rollout batch, unpacked then packed."""
    ckpt = load_checkpoint(init_dir, device=device)
    model, tok = ckpt.model, ckpt.tokenizer
    cfg = preset.orl
    if model.residual_adapter is None:
        model.add_residual_adapter()  # ORL's replay runs through the adapter, as training would
    model.config.residual_alpha = cfg.residual_alpha
    k = rollouts_per_prompt or cfg.rollouts_per_prompt
    states = capture_batch(model, tok, preset, k)
    B = model.config.block_size
    model.train()
    sync = synchronizer(model.embedding.device)
    out = []
    for packing in (False, True):
        groups = context_groups(states, share_context=packing)
        lengths = [len(states.context[g[0]]) + len(g) * B for g in groups]
        budget = max(pack_tokens, max(lengths))  # pack_tokens 0: rows as wide as the longest segment
        layout = packed_layout(lengths, budget) if packing else padded_layout(lengths)

        def update(packing: bool = packing, budget: int = budget) -> None:
            batch = states.to(model.embedding.device)  # states are kept on the CPU
            logits = replay_logits(model, batch, pack_tokens=budget if packing else 0, share_context=packing)
            uncertain, _ = gate_split(batch.masked, batch.confidence, cfg.gate_tau)
            aec = aec_parts(logits, batch.masked, batch.step, batch.source_entropy, cfg.aec_rho)
            loss = mean(masked_ce_terms(logits, batch.targets, uncertain)) + cfg.aec_lambda * mean(
                aec.terms()
            )
            loss.backward()
            model.zero_grad(set_to_none=True)

        update()  # the first step of each layout is a warm-up
        elapsed = sum(timed(update, sync)[1] for _ in range(steps))
        # Real tokens: every state with its own context (what either layout stands for).
        real_tokens = sum(len(c) + B for c in states.context)
        out.append(
            {
                "packing": packing,
                "rollouts_per_prompt": k,
                "step_tokens_per_s": real_tokens * steps / elapsed,
                "step_time_s": elapsed / steps,
                "input_tokens": sum(lengths),
                "padding_fraction": 1 - sum(lengths) / (layout.rows * layout.width),
                "rows": layout.rows,
                "states": len(states),
                "segments": len(groups),
            }
        )
    return out
