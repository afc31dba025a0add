"""Training objectives of the base models (docs/method.md §1).

- `ar_sum`: next-token cross-entropy on completion tokens (prompt → completion).
- `masked_blocks_sum` (with `noise_blocks`): the block-diffusion objective. Every block j of
  the completion is trained with the prompt and the clean blocks < j as its context; each
  token of block j is replaced by [MASK] with probability t_j ~ U(0, 1] (at least one);
  loss = cross-entropy on masked positions weighted 1/t_j, averaged over the masked
  tokens of the batch (MDLM / LLaDA ELBO weighting). One forward trains all blocks of a
  row: the row's clean tokens, then a noisy copy of its completion (SDAR, Fast-dLLM v2).

Each returns the batch's *sum* and its *count* (the loss is sum / count over the global
batch, orl/train/loop.py), so a batch split over ranks or micro-batches trains the same.
Both run the batch as a few forwards over rows of similar length (`length_groups`):
TinyCode rows vary a lot in length, and one forward padded to the longest row
spends about 40% of its compute on padding. The loss is the same sum divided by
the same count, so grouping changes only float summation order.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F

from orl.model.masks import copy_training_mask
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


NOISED_BLOCKS = ("one", "every")


@dataclass
class Noise:
    """Completion blocks of each row masked at their own rate t (docs/method.md §1).

    A row is a clean prefix followed by a noisy copy of the blocks being trained (SDAR, Fast-dLLM
    v2): the copy's tokens sit at their original positions, so one forward trains each copied block
    against the clean blocks before it, which is what decoding a block sees. "every" copies all
    completion blocks after the whole clean row; "one" copies one block, drawn at random, after the
    clean tokens before it (the objective as the page writes it, one block per row).
    """

    ids: torch.Tensor  # [b, n] clean prefix, then the noisy copy, then padding
    targets: torch.Tensor  # [b, n] the clean token at each index's position
    positions: torch.Tensor  # [b, n] RoPE position of each index (the copy repeats the prefix's)
    masked: torch.Tensor  # [b, n] bool, only inside the copy and never on a prompt position
    weight: torch.Tensor  # [b, n] 1/t of the index's block where masked, 0 elsewhere
    clean_lengths: torch.Tensor  # [b] indices of the clean prefix
    copy_start: torch.Tensor  # [b] first position copied (a block start)
    copy_end: torch.Tensor  # [b] one past the last position copied
    mask_origin: torch.Tensor  # [b] where the block-causal mask counts blocks from (orl/decoding/layout.py)

    def select(self, rows: torch.Tensor | slice) -> Noise:
        return Noise(*(getattr(self, f.name)[rows] for f in fields(self)))

    @property
    def widths(self) -> torch.Tensor:
        """[b] indices each row uses: the clean prefix and its copy."""
        return self.clean_lengths + self.copy_end - self.copy_start

    @property
    def count(self) -> float:
        return float(self.masked.sum())


def noise_blocks(
    batch: TokenBatch,
    block_size: int,
    mask_id: int,
    generator: torch.Generator,
    layout: str = "after-prompt",
    noised: str = "every",
) -> Noise:
    """Copy each row's trained blocks (`noised`: "every" or "one") after its clean prefix, each block
    masked at its own rate t ~ U(0, 1], at least one position per block.

    Our layout counts blocks from the end of the prompt; the absolute one (SDAR) from position 0,
    so its first block holds the prompt's tail, whose positions are copied but never masked. Drawn
    on the CPU from the step's generator for the whole global batch, whatever the device and the
    world size, so every split of the batch sees the same noise.
    """
    if noised not in NOISED_BLOCKS:
        raise ValueError(f"diffusion.noised_blocks: expected one of {NOISED_BLOCKS}, got {noised!r}")
    b, width = batch.ids.shape
    B, P, L = block_size, batch.prompt_lens[:, None], batch.lengths[:, None]
    origin = torch.zeros_like(P) if layout == "absolute" else P
    first = origin + torch.div(P - origin, B, rounding_mode="floor") * B  # the completion's first block
    if noised == "every":
        copy_start, copy_end, clean = first, L, L
    else:
        n_blocks = torch.div(L - first + B - 1, B, rounding_mode="floor")
        copy_start = first + (torch.rand(b, 1, generator=generator) * n_blocks).long() * B
        copy_end, clean = torch.minimum(copy_start + B, L), copy_start
    n = int((clean + copy_end - copy_start).max())
    index = torch.arange(n)[None, :]
    in_copy = (index >= clean) & (index < clean + copy_end - copy_start)
    positions = torch.where(in_copy, copy_start + index - clean, index).clamp(max=width - 1)
    targets = batch.ids.gather(1, positions)
    maskable = in_copy & (positions >= P)
    if noised == "every":
        t, masked = _every_block_mask(positions, maskable, origin, B, generator)
    else:
        t, masked = _one_block_mask(positions, maskable, width, clean, copy_start, copy_end, P, generator)
    ids = torch.where(masked, mask_id, targets)
    weight = torch.where(masked, 1.0 / t, 0.0)
    row = (clean, copy_start, copy_end, origin)
    return Noise(ids, targets, positions, masked, weight, *(x[:, 0] for x in row))


def _every_block_mask(
    positions: torch.Tensor, maskable: torch.Tensor, origin: torch.Tensor, B: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each block's t, and its masked positions: at rate t, plus the maskable one with the top score."""
    b, n = positions.shape
    block = torch.div(positions - origin, B, rounding_mode="floor").clamp_min(0)
    n_blocks = int(block.max()) + 1
    t = torch.rand(b, n_blocks, generator=generator).clamp_min(1e-3).gather(1, block)
    masked = maskable & (torch.rand(b, n, generator=generator) < t)
    score = torch.rand(b, n, generator=generator)
    for j in range(n_blocks):
        candidates = maskable & (block == j)
        forced = torch.where(candidates, score, -1.0).argmax(dim=1)
        masked[torch.arange(b), forced] |= candidates.any(dim=1)
    return t, masked


def _one_block_mask(
    positions: torch.Tensor,
    maskable: torch.Tensor,
    width: int,
    clean: torch.Tensor,
    copy_start: torch.Tensor,
    copy_end: torch.Tensor,
    P: torch.Tensor,
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The row's t and the copied block's masked positions, drawn in the order the committed tiny base
    was trained with (a rate per row, a number per row position, then the forced position)."""
    b, n = positions.shape
    t = torch.rand(b, 1, generator=generator).clamp_min(1e-3)
    masked = maskable & (torch.rand(b, width, generator=generator).gather(1, positions) < t)
    start = torch.maximum(copy_start, P)  # the block's first maskable position
    forced = start + (torch.rand(b, 1, generator=generator) * (copy_end - start)).long()
    masked[torch.arange(b), (clean + forced - copy_start)[:, 0]] = True
    return t.expand(b, n), masked


def masked_blocks_sum(model: Transformer, noise: Noise, groups: int = LENGTH_GROUPS) -> torch.Tensor:
    """Σ over masked positions of cross-entropy weighted 1/t (the MDLM / LLaDA ELBO weighting)."""
    cfg = model.config
    device = model.embedding.device
    total = torch.zeros((), device=device)
    for rows in length_groups(noise.widths, groups):
        part = noise.select(rows)
        n = int(part.widths.max())
        row_ranges = (part.clean_lengths, part.copy_start, part.copy_end, part.mask_origin)
        mask = copy_training_mask(n, *(x.to(device) for x in row_ranges), cfg.block_size)
        logits = model(part.ids[:, :n].to(device), positions=part.positions[:, :n].to(device), mask=mask)
        targets = part.targets[:, :n].to(device)
        ce = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none").view_as(targets)
        total = total + (ce * part.weight[:, :n].to(device)).sum()
    return total
