"""Train an EAGLE-3 head (orl/model/eagle3.py) for one of our AR targets and write it for vLLM.

Data: the target's own greedy generations for training prompts of the preset's task mix
(tinycode.train_problems, which never yields a test prompt of either suite, nor a dev prompt with
hold_out_dev), so the head learns to predict what the target will emit. Settings: the preset's `eagle3`
section (orl/train/config.py Eagle3TrainConfig).
Objective: training-time test (EAGLE-3) - the head is unrolled `ttt_steps` draft steps from every
position at once, each step fed its own previous output as the hidden state (model.eagle3.unroll), and the
loss is the sum over steps of decay^k x cross entropy against the target's tokens, on generated tokens only.
The target and its embedding stay frozen (vLLM shares the target's embedding with the head).
Output: config.json + model.safetensors in the layout vLLM's `eagle3` method loads, the target's
tokenizer files, and train_summary.json (losses, per-step accuracy, our own acceptance-length estimate).
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from orl.errors import CheckpointError, InputError
from orl.io import atomic_write_json
from orl.model.checkpoint import CONFIG, Checkpoint, load_checkpoint
from orl.model.eagle3 import (
    Eagle3Config,
    Eagle3Head,
    aux_hidden_states,
    check_head_tensors,
    cross_entropy_steps,
    head_state,
    propose,
    unroll,
)
from orl.model.transformer import KVCache
from orl.model.weights import write_weights
from orl.tasks import tinycode
from orl.tasks.tinycode import TaskMix
from orl.tokenizer import save_tokenizer_files
from orl.train.config import Eagle3TrainConfig

SUMMARY = "train_summary.json"


@torch.no_grad()
def greedy_continuation(ckpt: Checkpoint, prompt_ids: list[int], max_new_tokens: int) -> list[int]:
    """The target's greedy tokens after `prompt_ids`, up to and including <eos>, with a static KV cache."""
    model = ckpt.model
    ends = set(ckpt.tokenizer.eos_ids)
    total = len(prompt_ids) + max_new_tokens
    if total > model.config.max_position_embeddings:
        raise InputError(
            f"--max-new-tokens {max_new_tokens}: prompt + completion ({total}) exceed the target's "
            f"max_position_embeddings {model.config.max_position_embeddings}"
        )
    cache = KVCache.allocate(model.config, 1, total, torch.device("cpu"), torch.float32)
    keys = torch.arange(total)
    slots = torch.arange(len(prompt_ids))
    tokens = torch.tensor([prompt_ids])
    generated: list[int] = []
    while len(generated) < max_new_tokens:
        mask = (keys[None, :] <= slots[:, None])[None]  # causal over the cache
        logits = model(tokens, positions=slots[None], mask=mask, cache=cache, slots=slots)
        generated.append(int(logits[0, -1].argmax()))
        if generated[-1] in ends:
            break
        slots = slots[-1:] + 1
        tokens = torch.tensor([[generated[-1]]])
    return generated


@dataclass
class Sample:
    ids: torch.Tensor  # [len] prompt + generated
    prompt_len: int
    aux: torch.Tensor  # [len, fc_in] the target's aux states


def make_samples(ckpt: Checkpoint, pairs, layer_ids: list[int]) -> list[Sample]:
    samples = []
    with torch.no_grad():
        for prompt, gen in pairs:
            ids = torch.tensor(prompt + gen)
            samples.append(Sample(ids, len(prompt), aux_hidden_states(ckpt.model, ids[None], layer_ids)[0]))
    return samples


def collate(samples: list[Sample], pad_id: int):
    width = max(len(s.ids) for s in samples)
    ids = torch.full((len(samples), width), pad_id, dtype=torch.long)
    aux = torch.zeros(len(samples), width, samples[0].aux.shape[-1])
    mask = torch.zeros(len(samples), width, dtype=torch.bool)
    for i, s in enumerate(samples):
        n = len(s.ids)
        ids[i, :n], aux[i, :n] = s.ids, s.aux
        mask[i, s.prompt_len : n] = True
    return ids, aux, mask


def acceptance_estimate(head: Eagle3Head, embed, samples: list[Sample], k: int) -> float:
    """Mean acceptance length (accepted drafts + the target's own token per verification) of greedy
    speculative decoding with `k` drafts over the target's generations, as vLLM counts it."""
    verifications = produced = 0
    for s in samples:
        seq = s.ids.tolist()
        c = s.prompt_len
        while c + 1 < len(seq):
            room = min(k, len(seq) - c - 1)
            drafts = propose(head, embed, s.aux[None, :c], seq[:c], seq[c], room)
            accepted = 0
            while accepted < room and drafts[accepted] == seq[c + 1 + accepted]:
                accepted += 1
            verifications += 1
            produced += accepted + 1
            c += accepted + 1
    return produced / max(verifications, 1)


def init_head(head: Eagle3Head, ckpt: Checkpoint, seed: int) -> None:
    """Normal(0, 0.02) as the target's init; lm_head starts as the target's output matrix."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in head.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
        head.lm_head.weight.copy_(ckpt.model.lm_head.weight)


def train_eagle3(
    target_dir: str | Path,
    out_dir: str | Path,
    cfg: Eagle3TrainConfig,
    mix: TaskMix,
    progress: bool = False,
) -> dict:
    """Generate the data (training prompts of `mix`, the preset's task mix), train the head, write it;
    returns the summary written to train_summary.json."""
    start = time.perf_counter()
    ckpt = load_checkpoint(target_dir, dtype=torch.float32)
    if ckpt.is_diffusion:
        raise CheckpointError(
            f"{ckpt.path / CONFIG}: architectures: an EAGLE-3 head drafts for an AR target; "
            f"{ckpt.arch} is a block-diffusion checkpoint"
        )
    ckpt.model.requires_grad_(False).eval()
    head_cfg = Eagle3Config(ckpt.model.config, list(cfg.aux_layer_ids))
    torch.manual_seed(cfg.seed)
    problems = tinycode.train_problems(cfg.seed, cfg.prompts + cfg.eval_prompts, mix)
    prompts = [p["prompt"] for p in problems]
    pairs = []
    for prompt in prompts:
        ids = ckpt.tokenizer.encode(prompt)
        pairs.append((ids, greedy_continuation(ckpt, ids, cfg.max_new_tokens)))
    samples = make_samples(ckpt, pairs, head_cfg.aux_layer_ids)
    train, held = samples[: cfg.prompts], samples[cfg.prompts :]
    gen_s = time.perf_counter() - start

    head = Eagle3Head(head_cfg)
    init_head(head, ckpt, cfg.seed)
    embed = ckpt.model.model.embed_tokens
    opt = torch.optim.AdamW(head.parameters(), lr=cfg.lr, weight_decay=0.0)
    rng = random.Random(cfg.seed)
    losses, accuracies = [], []
    for step in range(cfg.steps):
        lr = cfg.lr * 0.5 * (1 + math.cos(math.pi * step / cfg.steps))  # cosine to 0
        for group in opt.param_groups:
            group["lr"] = lr
        ids, aux, mask = collate(rng.sample(train, min(cfg.batch_size, len(train))), ckpt.tokenizer.pad_id)
        loss, acc = cross_entropy_steps(unroll(head, embed, aux, ids, cfg.ttt_steps), ids, mask, cfg.decay)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        opt.step()
        losses.append(round(loss.item(), 5))
        accuracies.append([round(a, 4) for a in acc])
        if progress and (step % 25 == 0 or step == cfg.steps - 1):
            print(f"step {step}: loss {losses[-1]:.4f}, accuracy per draft step {acc}", flush=True)
    head.eval()
    with torch.no_grad():
        estimate = acceptance_estimate(head, embed, held, cfg.ttt_steps) if held else None
    summary = {
        "target": str(ckpt.path),
        "config": asdict(cfg),
        "task_mix": asdict(mix),
        "aux_layer_ids": head_cfg.aux_layer_ids,
        "train_sequences": len(train),
        "train_generated_tokens": int(sum(len(s.ids) - s.prompt_len for s in train)),
        "generation_s": round(gen_s, 2),
        "wall_s": round(time.perf_counter() - start, 2),
        "initial_loss": losses[0],
        "final_loss": losses[-1],
        "losses": losses,
        "final_accuracy_per_step": accuracies[-1],
        "acceptance_length_estimate": None if estimate is None else round(estimate, 4),
        "acceptance_estimate_k": cfg.ttt_steps,
        "acceptance_estimate_prompts": len(held),
    }
    write_head(head, ckpt, out_dir, summary)
    return summary


def write_head(head: Eagle3Head, ckpt: Checkpoint, out_dir: str | Path, summary: dict | None = None) -> Path:
    """config.json (last: a folder with a config is complete), weights, the target's tokenizer files."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    state = head_state(head)
    check_head_tensors(head.cfg, state, str(out))
    save_tokenizer_files(ckpt.tokenizer, out)
    write_weights(state, out)
    if summary is not None:
        atomic_write_json(out / SUMMARY, summary)
    atomic_write_json(out / CONFIG, head.cfg.to_hf())
    return out
