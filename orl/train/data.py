"""Training batches from the TinyCode train stream.

A batch is a pure function of (seed, step): resuming at step s regenerates
exactly the batches an uninterrupted run would have seen, so there is no data
loader state to checkpoint.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from orl.tasks import tinycode
from orl.tokenizer import Tokenizer


@dataclass
class TokenBatch:
    """Right-padded rows: prompt tokens, then completion tokens, then <eos> (padding after)."""

    ids: torch.Tensor  # [b, t]
    prompt_lens: torch.Tensor  # [b]
    lengths: torch.Tensor  # [b] real tokens per row
    loss_mask: torch.Tensor  # [b, t] True on completion tokens (incl. <eos>)

    def select(self, rows: torch.Tensor | slice) -> TokenBatch:
        """The batch of these rows (a rank's share, a micro-batch)."""
        return TokenBatch(self.ids[rows], self.prompt_lens[rows], self.lengths[rows], self.loss_mask[rows])

    def to(self, device: torch.device | str) -> TokenBatch:
        return TokenBatch(
            self.ids.to(device),
            self.prompt_lens.to(device),
            self.lengths.to(device),
            self.loss_mask.to(device),
        )


def step_rng(seed: int, step: int) -> random.Random:
    return random.Random(seed * 1_000_003 + step)


def encode_pair(
    tokenizer: Tokenizer,
    prompt: str,
    completion: str,
    block_size: int | None = None,
    layout: str = "after-prompt",
) -> tuple[list[int], list[int]]:
    """Prompt ids and completion ids + <eos>; with a block size the completion is padded with <eos>
    to whole blocks of its layout (blocks from the prompt's end, or from position 0 for the
    absolute layout), which is what block decoding produces after <eos> (docs/method.md §2)."""
    prompt_ids = tokenizer.encode(prompt)
    completion_ids = tokenizer.encode(completion) + [tokenizer.eos_id]
    if block_size:
        used = len(completion_ids) + (len(prompt_ids) if layout == "absolute" else 0)
        completion_ids += [tokenizer.eos_id] * (-used % block_size)
    return prompt_ids, completion_ids


def pad_rows(rows: list[tuple[list[int], list[int]]], pad_id: int, max_len: int) -> TokenBatch:
    rows = [(p, c[: max(0, max_len - len(p))]) for p, c in rows]
    width = max(len(p) + len(c) for p, c in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    loss_mask = torch.zeros((len(rows), width), dtype=torch.bool)
    for i, (p, c) in enumerate(rows):
        ids[i, : len(p) + len(c)] = torch.tensor(p + c)
        loss_mask[i, len(p) : len(p) + len(c)] = True
    return TokenBatch(
        ids=ids,
        prompt_lens=torch.tensor([len(p) for p, _ in rows]),
        lengths=torch.tensor([len(p) + len(c) for p, c in rows]),
        loss_mask=loss_mask,
    )


def pair_batch(
    tokenizer: Tokenizer,
    seed: int,
    step: int,
    batch_size: int,
    mix: tinycode.TaskMix,
    max_len: int,
    block_size: int | None = None,
    layout: str = "after-prompt",
) -> TokenBatch:
    """Step `step`'s batch of `mix` problems (the test prompts of both suites held out)."""
    rng = step_rng(seed, step)
    held_out = mix.held_out()
    pairs = [tinycode.train_pair(rng, mix, held_out) for _ in range(batch_size)]
    return pad_rows(
        [encode_pair(tokenizer, p, c, block_size, layout) for p, c in pairs], tokenizer.pad_id, max_len
    )
