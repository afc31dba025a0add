"""Training objectives of the base models (METHOD.md §1).

- `ar_loss`: next-token cross-entropy on completion tokens (prompt → completion).
- `masked_block_loss`: the block-diffusion objective. For each row pick one block j
  of the completion; the context is the prompt and the clean blocks < j; each
  token of block j is replaced by [MASK] with probability t ~ U(0, 1] (at least
  one); loss = cross-entropy on masked positions weighted 1/t, averaged over the
  masked tokens of the batch (MDLM / LLaDA ELBO weighting).

Both run the batch as a few forwards over rows of similar length (`length_groups`):
TinyCode rows vary a lot in length, and one forward padded to the longest row
spends about 40% of its compute on padding. The loss is the same sum divided by
the same count, so grouping changes only float summation order.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from orl.model.masks import training_mask
from orl.model.transformer import Transformer
from orl.train.data import TokenBatch

# Forwards per training batch; rows are sorted by length and split evenly among them.
LENGTH_GROUPS = 4


def length_groups(lengths: torch.Tensor, groups: int = LENGTH_GROUPS) -> list[torch.Tensor]:
    """Row indices sorted by length and cut into `groups` chunks of (nearly) equal size."""
    order = torch.argsort(lengths, stable=True)
    return [rows for rows in torch.tensor_split(order, min(groups, len(order))) if len(rows)]


def ar_loss(model: Transformer, batch: TokenBatch, groups: int = LENGTH_GROUPS) -> torch.Tensor:
    batch = batch.to(model.embedding.device)
    total = torch.zeros((), device=batch.ids.device)
    for rows in length_groups(batch.lengths, groups):
        width = int(batch.lengths[rows].max())
        ids = batch.ids[rows, :width]
        logits = model(ids[:, :-1])  # causal fast path (mask=None)
        weight = batch.loss_mask[rows, 1:width].float()
        ce = F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten(), reduction="none").view_as(weight)
        total = total + (ce * weight).sum()
    return total / batch.loss_mask[:, 1:].float().sum().clamp_min(1)


def noise_one_block(
    batch: TokenBatch, block_size: int, mask_id: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pick a block per row, cut the row after it, mask it with rate t.

    Returns (noisy ids, is_masked [b, t], t [b], row lengths [b]).
    """
    ids = batch.ids.clone()
    b, width = ids.shape
    completion_len = batch.lengths - batch.prompt_lens  # a multiple of block_size (encode_pair pads)
    n_blocks = torch.div(completion_len, block_size, rounding_mode="floor").clamp_min(1)
    block = (torch.rand(b, generator=generator) * n_blocks).long()
    start = batch.prompt_lens + block * block_size
    lengths = torch.minimum(start + block_size, batch.lengths)
    t = torch.rand(b, generator=generator).clamp_min(1e-3)
    pos = torch.arange(width)[None, :]
    in_block = (pos >= start[:, None]) & (pos < lengths[:, None])
    masked = in_block & (torch.rand(b, width, generator=generator) < t[:, None])
    # At least one masked token per row: force a random position of the block.
    forced = start + (torch.rand(b, generator=generator) * (lengths - start)).long()
    masked[torch.arange(b), forced] = True
    ids[masked] = mask_id
    return ids, masked, t, lengths


def masked_block_loss(
    model: Transformer, batch: TokenBatch, generator: torch.Generator, groups: int = LENGTH_GROUPS
) -> torch.Tensor:
    cfg = model.config
    # The noise is drawn on the CPU from the step's generator, whatever the model's device, so a
    # step's batch is the same everywhere; then everything moves to the model.
    noisy, masked, t, lengths = noise_one_block(batch, cfg.block_size, cfg.mask_token_id, generator)
    device = model.embedding.device
    batch, noisy, masked, t, lengths = batch.to(device), noisy.to(device), masked.to(device), t.to(device), lengths.to(device)
    total = torch.zeros((), device=device)
    for rows in length_groups(lengths, groups):
        width = int(lengths[rows].max())
        targets = batch.ids[rows, :width]
        mask = training_mask(width, batch.prompt_lens[rows], cfg.block_size, lengths[rows])
        logits = model(noisy[rows, :width], mask=mask)
        ce = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none").view_as(targets)
        total = total + (ce * masked[rows, :width].float() / t[rows, None]).sum()
    return total / masked.sum().clamp_min(1)
