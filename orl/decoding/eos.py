"""The end-of-sequence rule, the same in every decoder (docs/method.md §2).

- Fill: once <eos> is committed at a position, every later position of that block is
  committed as <eos> at once, so no forward is spent on text that will be dropped (an
  option: SDAR-family rows run without it, docs/method.md §5).
- Run: in the same step, every masked position that reaches a committed <eos> of its block
  through masked positions all predicted <eos> (this step's argmax is an end token) is
  committed with its prediction. A model often commits a block's trailing <eos> right to
  left, the most confident first, one position per step; without the run those steps
  commit nothing that is kept. The run belongs to the fill (same option).
- Stop: generation stops when the block holding <eos> has every earlier position committed.
- Cut: tokens after the first <eos> are dropped; the <eos> itself is kept in the token ids
  (it counts as a generated token for TPF) and removed from the text.

A model may have several end tokens (Qwen: <|im_end|> and <|endoftext|>); `eos_ids` is a
1-D tensor of them on the decoder's device, and any of them ends the text. Only generated
positions count: in the absolute layout the first block also holds the prompt's tail, and an
end token there (a chat template's <|im_end|>) ends nothing (`generated` marks the others).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def is_eos(tokens: torch.Tensor, eos_ids: torch.Tensor) -> torch.Tensor:
    """Elementwise: is this token one of the end tokens (plain comparisons: compiles everywhere)."""
    return (tokens[..., None] == eos_ids).any(-1)


def committed_eos(
    tokens: torch.Tensor, masked: torch.Tensor, eos_ids: torch.Tensor, generated: torch.Tensor | None
) -> torch.Tensor:
    """Generated positions holding a committed end token ([b, B] bool)."""
    eos = is_eos(tokens, eos_ids) & ~masked
    return eos if generated is None else eos & generated


def fill_after_eos(
    tokens: torch.Tensor,
    remaining: torch.Tensor,
    eos_ids: torch.Tensor,
    generated: torch.Tensor | None = None,
) -> torch.Tensor:
    """Positions still masked that lie after a committed <eos> of their block ([b, B] bool)."""
    eos_seen = committed_eos(tokens, remaining, eos_ids, generated).int().cumsum(-1) > 0
    return remaining & eos_seen


def eos_run(
    prediction: torch.Tensor, remaining: torch.Tensor, anchor: torch.Tensor, eos_ids: torch.Tensor
) -> torch.Tensor:
    """Masked positions predicted <eos> from which every position up to the next committed <eos>
    (`anchor`) is a masked position predicted <eos> ([b, B] bool).

    Static shapes, no host sync: for each position j, the first later position that is not such a
    candidate is found with a B x B comparison (B is the block size), and j is in a run when that
    position is an anchor.
    """
    candidate = remaining & is_eos(prediction, eos_ids)
    B = candidate.shape[-1]
    index = torch.arange(B, device=candidate.device)
    later = index[None, :] > index[:, None]  # [j, k]: position k lies after position j
    stops = (~candidate)[..., None, :] & later  # [b, j, k]
    first_stop = torch.where(stops, index, B).amin(-1)  # [b, j]; B when every later position is a candidate
    anchored = torch.cat([anchor, torch.zeros_like(anchor[..., :1])], dim=-1).gather(-1, first_stop)
    return candidate & anchored


def block_finished_with_eos(
    tokens: torch.Tensor, masked: torch.Tensor, eos_ids: torch.Tensor, generated: torch.Tensor | None = None
) -> torch.Tensor:
    """[b] True where the block holds a generated <eos> with every earlier position committed."""
    eos = committed_eos(tokens, masked, eos_ids, generated)
    before_first_eos = eos.int().cumsum(-1) == 0
    return eos.any(-1) & ~(masked & before_first_eos).any(-1)


def cut_at_eos(token_ids: Sequence[int], eos_ids: Sequence[int]) -> list[int]:
    """The generated ids up to and including the first end token (all of them if there is none)."""
    ids = list(token_ids)
    ends = set(eos_ids)
    for i, token in enumerate(ids):
        if token in ends:
            return ids[: i + 1]
    return ids
