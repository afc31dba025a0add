"""Replay: forward the current weights on captured states (METHOD.md §3, step 3).

A state is the sequence [context | block] where the block's masked positions get
E_θ[MASK] + w·r with the *captured* residual r^{(k-1)} and weight w. Two layouts:

- padded: one state per row, right-padded to the longest state of the batch;
- packed: several states per row up to a fixed token budget, each a segment with
  its own block-causal mask and positions restarting at 0, rows filled to balance
  the attended-token cost (Σ L² / 2 per row) rather than the token count alone.

Both return the block logits [n, B, V] in state order, so the losses do not care.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from orl.model.masks import block_causal_limits
from orl.model.transformer import Transformer
from orl.train.rollout import CapturedStates


@dataclass
class Layout:
    """Where each state sits: row and first column of its segment."""

    row: list[int]
    start: list[int]
    width: int
    rows: int


def padded_layout(lengths: list[int]) -> Layout:
    return Layout(row=list(range(len(lengths))), start=[0] * len(lengths), width=max(lengths), rows=len(lengths))


def packed_layout(lengths: list[int], pack_tokens: int) -> Layout:
    """Compute-balanced packing: longest first, each into the row with the least attention cost
    that still has room; a new row when none has."""
    if max(lengths) > pack_tokens:
        raise ValueError(f"orl.pack_tokens = {pack_tokens} is smaller than a replay state ({max(lengths)} tokens)")
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    used: list[int] = []
    cost: list[int] = []
    row, start = [0] * len(lengths), [0] * len(lengths)
    n_rows = -(-sum(lengths) // pack_tokens)
    used, cost = [0] * n_rows, [0] * n_rows
    for i in order:
        fits = [r for r in range(len(used)) if used[r] + lengths[i] <= pack_tokens]
        if not fits:
            used.append(0)
            cost.append(0)
            fits = [len(used) - 1]
        r = min(fits, key=lambda r: (cost[r], used[r]))
        row[i], start[i] = r, used[r]
        used[r] += lengths[i]
        cost[r] += lengths[i] * lengths[i]
    return Layout(row=row, start=start, width=max(used), rows=len(used))


def replay_logits(model: Transformer, states: CapturedStates, pack_tokens: int = 0, residual: bool = True) -> torch.Tensor:
    """Block logits [n, B, V] of the current weights on the captured states."""
    cfg = model.config
    B = cfg.block_size
    device = model.embedding.device
    lengths = [len(c) + B for c in states.context]
    layout = packed_layout(lengths, pack_tokens) if pack_tokens else padded_layout(lengths)
    ids = torch.full((layout.rows, layout.width), cfg.pad_token_id, dtype=torch.long)
    positions = torch.zeros((layout.rows, layout.width), dtype=torch.long)
    seg_start = torch.zeros((layout.rows, layout.width), dtype=torch.long)
    limits = torch.zeros((layout.rows, layout.width), dtype=torch.long)
    # Padding columns: a segment of their own that sees only itself.
    cols = torch.arange(layout.width)
    seg_start[:] = cols
    limits[:] = cols + 1
    block_cols = []
    for i, context in enumerate(states.context):
        r, s, n = layout.row[i], layout.start[i], lengths[i]
        ids[r, s : s + n - B] = context
        local = torch.arange(n)
        positions[r, s : s + n] = local
        seg_start[r, s : s + n] = s
        limits[r, s : s + n] = s + block_causal_limits(local[None], int(states.mask_origin[i]), B)[0]
        block_cols.append((r, s + n - B))
    mask = (cols[None, None, :] >= seg_start[:, :, None]) & (cols[None, None, :] < limits[:, :, None])
    rows_idx = torch.tensor([r for r, _ in block_cols])
    block_idx = torch.tensor([c for _, c in block_cols])[:, None] + torch.arange(B)[None, :]
    where = (rows_idx[:, None].expand_as(block_idx), block_idx)
    # The block's tokens ([MASK] where masked) go in as ids; E[MASK] + w·r is then formed inside the
    # forward as the token embedding plus w·r at masked positions (orl.decoding.residual's mix).
    ids = ids.index_put(where, states.tokens)
    added = torch.zeros(layout.rows, layout.width, states.residual.shape[-1], dtype=states.residual.dtype)
    if residual:
        mixed = states.weight[..., None].to(states.residual.dtype) * states.residual
        added = added.index_put(where, torch.where(states.masked[..., None], mixed, torch.zeros_like(mixed)))
    logits = model(ids.to(device), residual=added.to(device), positions=positions.to(device), mask=mask.to(device))
    return logits[where[0].to(device), where[1].to(device)]
