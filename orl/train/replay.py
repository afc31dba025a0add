"""Replay: forward the current weights on captured states (docs/method.md §3, step 3).

A state is [context | block]: the block's masked positions get E_θ[MASK] + α·g_ϕ(z) (or the
entropy-weighted w·z) with the *captured* pre-adapter residual z, formed inside the forward
(Transformer.residual_term), so the adapter gets its gradient.

Shared clean context ("staircase", `share_context=True`): states with the same clean prefix
(prompt + clean blocks < j: the states of one trajectory's block, and at block 0 those of all K
rollouts of a prompt, or later where their earlier blocks agree) are laid out as one segment

    [ context | noisy state 1 | noisy state 2 | ... ]

with one copy of the context: context tokens attend as in decoding (block-causal), and each noisy
state sees the context and itself, never the other noisy states, its clean answer or later
blocks. Its positions continue the context's (L .. L+B-1), exactly as when it is replayed alone,
so its logits are the same up to float summation order.

Rows: one segment per row, right-padded (`pack_tokens=0`), or several segments per row up to a
token budget, balanced by attended-token cost (Σ L² per row) rather than the token count alone.
Either way the block logits come back [n, B, V] in state order, so the losses do not care.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from orl.decoding.rollout import CapturedStates
from orl.model.masks import block_causal_limits
from orl.model.transformer import Transformer


@dataclass
class Layout:
    """Where each segment sits: row and first column."""

    row: list[int]
    start: list[int]
    width: int
    rows: int


def padded_layout(lengths: list[int]) -> Layout:
    return Layout(
        row=list(range(len(lengths))), start=[0] * len(lengths), width=max(lengths), rows=len(lengths)
    )


def packed_layout(lengths: list[int], pack_tokens: int) -> Layout:
    """Compute-balanced packing: longest first, each into the row with the least attention cost
    that still has room; a new row when none has."""
    if max(lengths) > pack_tokens:
        raise ValueError(
            f"orl.pack_tokens = {pack_tokens} is smaller than a replay segment ({max(lengths)} tokens)"
        )
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
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


def context_groups(states: CapturedStates, share_context: bool = True) -> list[list[int]]:
    """State indices grouped by shared clean context: the same context tokens (and block origin), so
    the states of one trajectory's block, and at block 0 the K rollouts of one prompt, share one copy.
    Without sharing, every state is its own group (one copy of context each)."""
    if not share_context:
        return [[i] for i in range(len(states))]
    groups: dict[tuple, list[int]] = {}
    for i, context in enumerate(states.context):
        groups.setdefault((int(states.mask_origin[i]), tuple(context.tolist())), []).append(i)
    return list(groups.values())


def replay_logits(
    model: Transformer,
    states: CapturedStates,
    pack_tokens: int = 0,
    residual: bool = True,
    share_context: bool = True,
) -> torch.Tensor:
    """Block logits [n, B, V] of the current weights on the captured states."""
    cfg = model.config
    B = cfg.block_size
    device = model.embedding.device
    groups = context_groups(states, share_context)
    ctx_len = [len(states.context[g[0]]) for g in groups]
    lengths = [n + len(g) * B for n, g in zip(ctx_len, groups, strict=True)]
    layout = packed_layout(lengths, pack_tokens) if pack_tokens else padded_layout(lengths)
    rows, width = layout.rows, layout.width
    ids = torch.full((rows, width), cfg.pad_token_id, dtype=torch.long)
    positions = torch.zeros((rows, width), dtype=torch.long)
    cols = torch.arange(width)
    # Each query sees keys [lo, hi) (its clean context, causal / block-causal) and [own_lo, own_hi)
    # (its own noisy block). Padding columns see only themselves.
    lo, hi = cols.repeat(rows, 1), (cols + 1).repeat(rows, 1)
    own_lo, own_hi = (
        torch.zeros((rows, width), dtype=torch.long),
        torch.zeros((rows, width), dtype=torch.long),
    )
    block_row, block_col = [0] * len(states), [0] * len(states)
    for g, members in enumerate(groups):
        r, s, n = layout.row[g], layout.start[g], ctx_len[g]
        first = members[0]
        ids[r, s : s + n] = states.context[first]
        local = torch.arange(n)
        positions[r, s : s + n] = local
        lo[r, s : s + n] = s
        hi[r, s : s + n] = s + block_causal_limits(local[None], int(states.mask_origin[first]), B)[0]
        for m, i in enumerate(members):
            c = s + n + m * B
            positions[r, c : c + B] = n + torch.arange(B)
            lo[r, c : c + B], hi[r, c : c + B] = s, s + n
            own_lo[r, c : c + B], own_hi[r, c : c + B] = c, c + B
            block_row[i], block_col[i] = r, c
    keys = cols[None, None, :]
    mask = ((keys >= lo[:, :, None]) & (keys < hi[:, :, None])) | (
        (keys >= own_lo[:, :, None]) & (keys < own_hi[:, :, None])
    )
    rows_idx = torch.tensor(block_row)
    block_idx = torch.tensor(block_col)[:, None] + torch.arange(B)[None, :]
    where = (rows_idx[:, None].expand_as(block_idx), block_idx)
    # The block's tokens ([MASK] where masked) go in as ids; the residual term is added inside the
    # forward at masked positions (weight 0 elsewhere), as the decoders' mix_residual forms it.
    ids = ids.index_put(where, states.tokens)
    z = torch.zeros(rows, width, states.residual.shape[-1], dtype=states.residual.dtype)
    weight = torch.zeros(rows, width, dtype=states.weight.dtype)
    if residual:
        z = z.index_put(where, states.residual)
        weight = weight.index_put(
            where, torch.where(states.masked, states.weight, torch.zeros_like(states.weight))
        )
    logits = model(
        ids.to(device),
        residual=z.to(device),
        residual_weight=weight.to(device),
        positions=positions.to(device),
        mask=mask.to(device),
    )
    return logits[where[0].to(device), where[1].to(device)]
