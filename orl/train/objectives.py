"""Training objectives of the base models (docs/method.md §1).

- `ar_sum`: next-token cross-entropy on completion tokens (prompt → completion).
- `masked_block_sum` (with `noise_one_block`): the block-diffusion objective. For each row pick one block j
  of the completion; the context is the prompt and the clean blocks < j; each
  token of block j is replaced by [MASK] with probability t ~ U(0, 1] (at least
  one); loss = cross-entropy on masked positions weighted 1/t, averaged over the
  masked tokens of the batch (MDLM / LLaDA ELBO weighting).

Each returns the batch's *sum* and its *count* (the loss is sum / count over the global
batch, orl/train/loop.py), so a batch split over ranks or micro-batches trains the same.
Both run the batch as a few forwards over rows of similar length (`length_groups`):
TinyCode rows vary a lot in length, and one forward padded to the longest row
spends about 40% of its compute on padding. The loss is the same sum divided by
the same count, so grouping changes only float summation order.
"""

from __future__ import annotations

from dataclasses import dataclass

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


def ar_count(batch: TokenBatch) -> float:
    """Target tokens of an AR batch: every completion token after the first position."""
    return float(batch.loss_mask[:, 1:].sum())


def ar_sum(model: Transformer, batch: TokenBatch, groups: int = LENGTH_GROUPS) -> torch.Tensor:
    """Σ next-token cross-entropy over the completion tokens of the batch."""
    batch = batch.to(model.embedding.device)
    total = torch.zeros((), device=batch.ids.device)
    for rows in length_groups(batch.lengths, groups):
        width = int(batch.lengths[rows].max())
        ids = batch.ids[rows, :width]
        logits = model(ids[:, :-1])  # causal fast path (mask=None)
        weight = batch.loss_mask[rows, 1:width].float()
        ce = F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten(), reduction="none").view_as(weight)
        total = total + (ce * weight).sum()
    return total


@dataclass
class Noise:
    """One block per row masked at rate t (docs/method.md §1): what `masked_block_sum` trains on."""

    ids: torch.Tensor  # [b, t] noisy ids ([MASK] in the chosen block where masked)
    masked: torch.Tensor  # [b, t] bool
    t: torch.Tensor  # [b]
    lengths: torch.Tensor  # [b] each row cut after its chosen block
    mask_origin: torch.Tensor  # [b] where the block-causal mask counts blocks from (orl/decoding/layout.py)

    def select(self, rows: torch.Tensor | slice) -> Noise:
        return Noise(
            self.ids[rows], self.masked[rows], self.t[rows], self.lengths[rows], self.mask_origin[rows]
        )

    @property
    def count(self) -> float:
        return float(self.masked.sum())


def noise_one_block(
    batch: TokenBatch, block_size: int, mask_id: int, generator: torch.Generator, layout: str = "after-prompt"
) -> Noise:
    """Pick a block per row, cut the row after it, mask it with rate t (at least one position).

    Our layout counts blocks from the end of the prompt; the absolute one (SDAR) from position 0,
    so the first block a row may pick holds the prompt's tail, whose positions stay unmasked.
    Drawn on the CPU from the step's generator for the whole global batch, whatever the device
    and the world size, so every split of the batch sees the same noise.
    """
    ids = batch.ids.clone()
    b, width = ids.shape
    B, P = block_size, batch.prompt_lens
    # The row's blocks: encode_pair pads every row's end to a block boundary of its layout.
    origin = torch.zeros_like(P) if layout == "absolute" else P
    first = torch.div(P - origin, B, rounding_mode="floor")  # the block holding position P
    n_blocks = (torch.div(batch.lengths - origin - 1, B, rounding_mode="floor") - first + 1).clamp_min(1)
    block = first + (torch.rand(b, generator=generator) * n_blocks).long()
    start = torch.maximum(origin + block * B, P)  # never a prompt position
    lengths = torch.minimum(origin + (block + 1) * B, batch.lengths)
    t = torch.rand(b, generator=generator).clamp_min(1e-3)
    pos = torch.arange(width)[None, :]
    in_block = (pos >= start[:, None]) & (pos < lengths[:, None])
    masked = in_block & (torch.rand(b, width, generator=generator) < t[:, None])
    # At least one masked token per row: force a random position of the block.
    forced = start + (torch.rand(b, generator=generator) * (lengths - start)).long()
    masked[torch.arange(b), forced] = True
    ids[masked] = mask_id
    return Noise(ids, masked, t, lengths, origin)


def masked_block_sum(
    model: Transformer, batch: TokenBatch, noise: Noise, groups: int = LENGTH_GROUPS
) -> torch.Tensor:
    """Σ over masked positions of cross-entropy weighted 1/t (the MDLM / LLaDA ELBO weighting)."""
    cfg = model.config
    device = model.embedding.device
    batch = batch.to(device)
    noisy, masked, t, lengths = (
        noise.ids.to(device),
        noise.masked.to(device),
        noise.t.to(device),
        noise.lengths.to(device),
    )
    total = torch.zeros((), device=device)
    for rows in length_groups(lengths, groups):
        width = int(lengths[rows].max())
        targets = batch.ids[rows, :width]
        mask = training_mask(width, noise.mask_origin[rows].to(device), cfg.block_size, lengths[rows])
        logits = model(noisy[rows, :width], mask=mask)
        ce = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none").view_as(targets)
        total = total + (ce * masked[rows, :width].float() / t[rows, None]).sum()
    return total
