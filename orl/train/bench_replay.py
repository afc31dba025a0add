"""Replay train-step throughput with and without compute-balanced packing (Table 5's step-speed column).

The same captured states are replayed (forward + backward of CE + λ·AEC) once padded one state per
row and once packed into fixed-token rows; real (non-padding) tokens per second are compared in the
same process.
"""

from __future__ import annotations

import time

import torch

from orl.decoding import Policy, decode_rule
from orl.model.checkpoint import load_checkpoint
from orl.train.config import TrainPreset
from orl.train.losses import aec_loss, masked_ce
from orl.train.orl import rollout_groups, rollout_prompts
from orl.train.replay import packed_layout, padded_layout, replay_logits
from orl.train.rollout import attach_targets, prompt_prefixes, rollout


def bench_replay(preset: TrainPreset, init_dir, *, steps: int = 10, pack_tokens: int = 512, device: str = "cpu") -> list[dict]:
    ckpt = load_checkpoint(init_dir, device=device)
    model, tok = ckpt.model, ckpt.tokenizer
    cfg = preset.orl
    problems = rollout_prompts(preset, 0)
    model.config.residual_alpha = cfg.residual_alpha  # replay ORL's residual states, as training would
    prompts = [tok.encode(p["prompt"]) for p in problems]
    rule = decode_rule(model.config, tok.eos_ids, Policy("threshold", cfg.tau_train), residual=True)
    budget = max(budget for _, budget in rollout_groups(problems, preset))  # one batch: the states are what counts
    result = rollout(model, prompts, rule, max_new_tokens=budget, pad_id=tok.pad_id)
    states = result.states
    attach_targets(states, result.completion_ids, model.config.block_size, tok.eos_id, prompt_prefixes(prompts, rule))
    batch_size = min(cfg.batch_size, len(states))
    batches = []
    generator = torch.Generator().manual_seed(0)
    for _ in range(steps + 1):  # the first step of each layout is a warm-up
        pick = torch.zeros(len(states), dtype=torch.bool)
        pick[torch.randperm(len(states), generator=generator)[:batch_size]] = True
        batches.append(states.select(pick))
    pack_tokens = max(pack_tokens, max(len(c) for c in states.context) + model.config.block_size)
    model.train()
    out = []
    for packing in (False, True):
        elapsed, real_tokens, slots, rows = 0.0, 0, 0, 0
        for i, batch in enumerate(batches):
            lengths = [len(c) + model.config.block_size for c in batch.context]
            layout = packed_layout(lengths, pack_tokens) if packing else padded_layout(lengths)
            t0 = time.perf_counter()
            batch = batch.to(model.embedding.device)  # states are kept on the CPU
            logits = replay_logits(model, batch, pack_tokens=pack_tokens if packing else 0)
            loss = masked_ce(logits, batch.targets, batch.masked) + cfg.aec_lambda * aec_loss(
                logits, batch.masked, batch.step > 0, batch.prev_entropy, rho=cfg.aec_rho, gate=cfg.aec_gate)
            loss.backward()
            model.zero_grad(set_to_none=True)
            if i:  # skip the warm-up step
                elapsed += time.perf_counter() - t0
                real_tokens += sum(lengths)
                slots += layout.rows * layout.width
                rows += layout.rows
        out.append({"packing": packing, "step_tokens_per_s": real_tokens / elapsed, "step_time_s": elapsed / steps,
                    "padding_fraction": 1 - real_tokens / slots, "rows": rows / steps, "states": batch_size})
    return out
