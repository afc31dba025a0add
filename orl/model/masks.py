"""Attention masks as pure functions (True = the query may attend the key).

Every pattern the harness needs is "key index < limit(query)", with a per-query
limit (docs/method.md §1):
- causal:       limit(q) = q + 1
- block-causal: prompt queries are causal; a completion query in block j sees
                the prompt, all earlier blocks and all of block j, so
                limit(q) = start + (j + 1) * B with j = (q - start) // B.
                This is our "after-prompt" block layout.
- absolute:     SDAR's layout (docs/method.md §5): blocks sit at multiples of B from
                position 0, the prompt included, so every query sees its own
                block whole and all earlier ones: limit(q) = (q // B + 1) * B.
Indices are cache slots in the engine and sequence positions in training; the
rule is the same. `key_valid` hides padding slots.
"""

from __future__ import annotations

import torch


def causal_limits(query_idx: torch.Tensor) -> torch.Tensor:
    return query_idx + 1


def block_causal_limits(
    query_idx: torch.Tensor, completion_start: torch.Tensor | int, block_size: int
) -> torch.Tensor:
    """Per-query key limits; `completion_start` is a scalar or one value per batch row ([b, 1])."""
    start = torch.as_tensor(completion_start, device=query_idx.device)
    if start.dim() == 1:
        start = start[:, None]
    block = torch.div(query_idx - start, block_size, rounding_mode="floor")
    in_completion = query_idx >= start
    return torch.where(in_completion, start + (block + 1) * block_size, query_idx + 1)


def absolute_block_limits(query_idx: torch.Tensor, block_size: int) -> torch.Tensor:
    """Per-query key limits of the absolute block layout (SDAR): the end of the query's own block."""
    return (torch.div(query_idx, block_size, rounding_mode="floor") + 1) * block_size


BLOCK_LAYOUTS = ("after-prompt", "absolute")


def layout_block_limits(
    layout: str, query_idx: torch.Tensor, completion_start: torch.Tensor | int, block_size: int
) -> torch.Tensor:
    """Key limits of a block-diffusion model for its `block_layout` (ModelConfig.block_layout).

    `completion_start` (the prompt length) only matters for "after-prompt"; in the
    absolute layout the prompt's last block is part prompt, part completion.
    """
    if layout == "after-prompt":
        return block_causal_limits(query_idx, completion_start, block_size)
    if layout == "absolute":
        return absolute_block_limits(query_idx, block_size)
    raise ValueError(f"block_layout: expected one of {BLOCK_LAYOUTS}, got {layout!r}")


def mask_from_limits(
    limits: torch.Tensor, key_idx: torch.Tensor, key_valid: torch.Tensor | None = None
) -> torch.Tensor:
    """[b, t, s] mask from limits [b, t] and key indices [s] (and optional key_valid [b, s])."""
    mask = key_idx[None, None, :] < limits[:, :, None]
    if key_valid is not None:
        mask = mask & key_valid[:, None, :]
    return mask


def training_mask(
    seq_len: int, completion_start: torch.Tensor, block_size: int, lengths: torch.Tensor
) -> torch.Tensor:
    """Block-causal mask for right-padded training rows (start and length per row)."""
    idx = torch.arange(seq_len, device=lengths.device)
    limits = block_causal_limits(idx.expand(len(lengths), seq_len), completion_start, block_size)
    key_valid = idx[None, :] < lengths[:, None]
    mask = mask_from_limits(limits, idx, key_valid)
    # Padding queries must still see one key, or softmax over an empty row gives NaN.
    return mask | torch.eye(seq_len, dtype=torch.bool, device=lengths.device)[None]


def copy_training_mask(
    width: int,
    clean_lengths: torch.Tensor,
    copy_start: torch.Tensor,
    copy_end: torch.Tensor,
    origin: torch.Tensor,
    block_size: int,
) -> torch.Tensor:
    """Block-causal mask for training rows that carry a noisy copy of some of their blocks.

    Row r is a clean prefix (indices < clean_lengths[r]), then a copy of positions copy_start[r] ..
    copy_end[r] - 1 (orl/train/objectives.py `noise_blocks`). Clean queries see what the block-causal
    mask gives them; a copy query in block j sees the clean keys before block j and the copy of
    block j itself: the view of a block being decoded over an exact cache of the blocks before it.
    `origin` is where blocks are counted from: the prompt's end, or 0 for the absolute layout.
    """
    index = torch.arange(width, device=clean_lengths.device)[None, :]
    clean_end, start = clean_lengths[:, None], copy_start[:, None]
    clean = index < clean_end
    in_copy = (index >= clean_end) & (index < clean_end + copy_end[:, None] - start)
    positions = torch.where(in_copy, start + index - clean_end, index)
    block_end = block_causal_limits(positions, origin, block_size)
    block_start = block_end - block_size
    clean_limit = torch.where(in_copy, block_start, block_end)  # [b, n]
    sees_clean = clean[:, None, :] & (index[:, None, :] < clean_limit[:, :, None])
    same_block = (positions[:, None, :] >= block_start[:, :, None]) & (
        positions[:, None, :] < block_end[:, :, None]
    )
    sees_copy = in_copy[:, :, None] & in_copy[:, None, :] & same_block
    # Padding queries must still see one key, or softmax over an empty row gives NaN.
    return sees_clean | sees_copy | torch.eye(width, dtype=torch.bool, device=clean_lengths.device)[None]
