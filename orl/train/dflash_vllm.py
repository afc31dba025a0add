"""Train a DFlash drafter (orl/model/dflash_vllm.py) for one of our AR targets and write it for vLLM.

Data: the target's own greedy generations for training prompts of the preset's task mix, with the target's
states of the drafter's layers (collected as for the EAGLE-3 head: orl/train/eagle3.py make_samples).
Objective (block diffusion on the mask slots): at `anchors` random bonus positions of each generated
sequence, a block [the target's token there, K mask slots] with a random number of live slots (1..K, so
every num_speculative_tokens up to K that vLLM may run is one the drafter saw) is denoised in one
forward from the context before it (model.dflash_vllm.block_logits); the loss is cross entropy of slot j
against the target's token j positions on, weighted decay^(j-1). The target, its embedding (whose mask
row is the mask slots' input) and its lm_head stay frozen: vLLM shares them with the drafter.
Output: config.json + model.safetensors in the layout vLLM's `dflash` method loads, the target's tokenizer
files, train_summary.json (losses, per-slot accuracy, our own acceptance-length estimate).
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import asdict
from pathlib import Path

import torch
import torch.nn.functional as F

from orl.errors import CheckpointError
from orl.io import atomic_write_json
from orl.model.checkpoint import CONFIG, Checkpoint, load_checkpoint
from orl.model.dflash_vllm import DFlashDrafter, block_logits, drafter_state, propose
from orl.model.dflash_vllm_layout import DFlashConfig, check_tensors
from orl.model.weights import write_weights
from orl.tasks import tinycode
from orl.tasks.tinycode import TaskMix
from orl.tokenizer import save_tokenizer_files
from orl.train.config import DFlashTrainConfig
from orl.train.eagle3 import Sample, collate, greedy_continuation, make_samples

SUMMARY = "train_summary.json"


def sample_blocks(samples: list[Sample], count: int, k: int, rng: random.Random):
    """anchors [b, count] (bonus positions among the generated tokens, one at least before the end) and
    live lengths [b, count] (1..k); a sample with fewer positions repeats them (each counted once: weight)."""
    anchors, lengths, weight = [], [], []
    for s in samples:
        valid = list(range(s.prompt_len, len(s.ids) - 1)) or [0]
        picked = rng.sample(valid, min(count, len(valid)))
        anchors.append(picked + [picked[0]] * (count - len(picked)))
        lengths.append([rng.randint(1, k) for _ in range(count)])
        weight.append([float(len(s.ids) > s.prompt_len + 1)] * len(picked) + [0.0] * (count - len(picked)))
    return torch.tensor(anchors), torch.tensor(lengths), torch.tensor(weight)


def block_loss(logits, ids, ends, anchors, lengths, weight, decay: float):
    """Weighted cross entropy of the live mask slots against the target's tokens (ends [b]: each sequence's
    length), and each slot's accuracy."""
    k = logits.shape[2] - 1
    j = torch.arange(1, k + 1)
    where = anchors[..., None] + j  # [b, A, k]
    valid = (where < ends[:, None, None]) & (j <= lengths[..., None]) & (weight[..., None] > 0)
    target = ids.gather(1, where.clamp(max=ids.shape[1] - 1).flatten(1)).view_as(where)
    ce = F.cross_entropy(logits[:, :, 1:].flatten(0, 2), target.flatten(), reduction="none").view_as(where)
    w = valid.float() * decay ** (j - 1).float()
    loss = (ce * w).sum() / w.sum().clamp(min=1e-9)
    right = (logits[:, :, 1:].argmax(-1) == target) & valid
    accuracy = (right.sum((0, 1)).float() / valid.sum((0, 1)).clamp(min=1)).tolist()
    return loss, accuracy


def acceptance_estimate(drafter, embed, lm_head, samples: list[Sample], k: int) -> float:
    """Mean acceptance length (accepted drafts + the target's own token per verification) of greedy
    speculative decoding with k mask slots over the target's generations, as vLLM counts it."""
    verifications = produced = 0
    for s in samples:
        seq, c = s.ids.tolist(), s.prompt_len
        while c + 1 < len(seq):
            drafts = propose(drafter, embed, lm_head, s.aux[None, :c], seq[c], k)
            accepted = 0
            while accepted < min(k, len(seq) - c - 1) and drafts[accepted] == seq[c + 1 + accepted]:
                accepted += 1
            verifications, produced, c = verifications + 1, produced + accepted + 1, c + accepted + 1
    return produced / max(verifications, 1)


def init_drafter(drafter: DFlashDrafter, seed: int) -> None:
    """Normal(0, 0.02) as the target's init, norms at 1."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in drafter.named_parameters():
            p.copy_(
                torch.ones_like(p)
                if name.endswith("norm.weight")
                else torch.randn(p.shape, generator=gen) * 0.02
            )


def generate_samples(
    ckpt: Checkpoint, cfg: DFlashTrainConfig, mix: TaskMix, aux_ids: list[int]
) -> list[Sample]:
    problems = tinycode.train_problems(cfg.seed, cfg.prompts + cfg.eval_prompts, mix)
    pairs = []
    for problem in problems:
        ids = ckpt.tokenizer.encode(problem["prompt"])
        pairs.append((ids, greedy_continuation(ckpt, ids, cfg.max_new_tokens)))
    return make_samples(ckpt, pairs, aux_ids)


def train_dflash(target_dir, out_dir, cfg: DFlashTrainConfig, mix: TaskMix, progress: bool = False) -> dict:
    """Generate the data, train the drafter, write it; returns the summary written to train_summary.json."""
    start = time.perf_counter()
    ckpt = load_checkpoint(target_dir, dtype=torch.float32)
    if ckpt.is_diffusion or ckpt.tokenizer.mask_id is None:
        raise CheckpointError(
            f"{ckpt.path / CONFIG}: a DFlash drafter drafts for an AR target whose tokenizer has a mask "
            f"token; got {ckpt.arch} (mask token: {ckpt.tokenizer.mask_id})"
        )
    ckpt.model.requires_grad_(False).eval()
    dcfg = DFlashConfig(
        ckpt.model.config, ckpt.tokenizer.mask_id, cfg.layers, cfg.block_size, list(cfg.target_layer_ids)
    )
    torch.manual_seed(cfg.seed)
    samples = generate_samples(ckpt, cfg, mix, dcfg.aux_ids)
    train, held = samples[: cfg.prompts], samples[cfg.prompts :]
    gen_s = time.perf_counter() - start
    drafter = DFlashDrafter(dcfg)
    init_drafter(drafter, cfg.seed)
    embed, lm_head = ckpt.model.model.embed_tokens, ckpt.model.lm_head
    losses, accuracy = optimise(drafter, embed, lm_head, train, cfg, ckpt.tokenizer.pad_id, progress)
    drafter.eval()
    estimate = acceptance_estimate(drafter, embed, lm_head, held, cfg.eval_k) if held else None
    summary = {
        "target": str(ckpt.path), "config": asdict(cfg), "task_mix": asdict(mix),
        "target_layer_ids": dcfg.target_layer_ids, "mask_token_id": dcfg.mask_token_id,
        "train_sequences": len(train),
        "train_generated_tokens": int(sum(len(s.ids) - s.prompt_len for s in train)),
        "generation_s": round(gen_s, 2), "wall_s": round(time.perf_counter() - start, 2),
        "initial_loss": losses[0], "final_loss": losses[-1], "losses": losses,
        "final_accuracy_per_slot": accuracy,
        "acceptance_length_estimate": None if estimate is None else round(estimate, 4),
        "acceptance_estimate_k": cfg.eval_k, "acceptance_estimate_prompts": len(held),
    }  # fmt: skip
    write_drafter(drafter, ckpt, out_dir, summary)
    return summary


def optimise(
    drafter, embed, lm_head, train: list[Sample], cfg: DFlashTrainConfig, pad_id: int, progress: bool
):
    """AdamW, cosine schedule, `cfg.steps` batches; the losses and the last batch's accuracy per slot."""
    opt = torch.optim.AdamW(drafter.parameters(), lr=cfg.lr, weight_decay=0.0)
    rng = random.Random(cfg.seed)
    losses, accuracy = [], []
    for step in range(cfg.steps):
        for group in opt.param_groups:
            group["lr"] = cfg.lr * 0.5 * (1 + math.cos(math.pi * step / cfg.steps))
        batch = rng.sample(train, min(cfg.batch_size, len(train)))
        ids, aux, _ = collate(batch, pad_id)
        anchors, lengths, weight = sample_blocks(batch, cfg.anchors, cfg.block_size - 1, rng)
        logits = block_logits(drafter, embed, lm_head, aux, ids, anchors, lengths)
        ends = torch.tensor([len(s.ids) for s in batch])
        loss, accuracy = block_loss(logits, ids, ends, anchors, lengths, weight, cfg.decay)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(drafter.parameters(), 1.0)
        opt.step()
        losses.append(round(loss.item(), 5))
        if progress and (step % 25 == 0 or step == cfg.steps - 1):
            print(
                f"step {step}: loss {losses[-1]:.4f}, accuracy per slot {[round(a, 3) for a in accuracy]}",
                flush=True,
            )
    return losses, [round(a, 4) for a in accuracy]


def write_drafter(drafter: DFlashDrafter, ckpt: Checkpoint, out_dir, summary: dict | None = None) -> Path:
    """config.json (last: a folder with a config is complete), weights, the target's tokenizer files."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    state = drafter_state(drafter)
    check_tensors(drafter.cfg, state, str(out))
    save_tokenizer_files(ckpt.tokenizer, out)
    write_weights(state, out)
    if summary is not None:
        atomic_write_json(out / SUMMARY, summary)
    atomic_write_json(out / CONFIG, drafter.cfg.to_hf())
    return out
