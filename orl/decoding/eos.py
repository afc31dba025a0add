"""The end-of-sequence rule, the same in every decoder (METHOD.md §2).

- Fill: once <eos> is committed at a position, every later position of that block is
  committed as <eos> at once, so no forward is spent on text that will be dropped (an
  option: SDAR-family rows run without it, METHOD.md §5).
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


def committed_eos(tokens: torch.Tensor, masked: torch.Tensor, eos_ids: torch.Tensor,
                  generated: torch.Tensor | None) -> torch.Tensor:
    """Generated positions holding a committed end token ([b, B] bool)."""
    eos = is_eos(tokens, eos_ids) & ~masked
    return eos if generated is None else eos & generated


def fill_after_eos(tokens: torch.Tensor, remaining: torch.Tensor, eos_ids: torch.Tensor,
                   generated: torch.Tensor | None = None) -> torch.Tensor:
    """Positions still masked that lie after a committed <eos> of their block ([b, B] bool)."""
    eos_seen = committed_eos(tokens, remaining, eos_ids, generated).int().cumsum(-1) > 0
    return remaining & eos_seen


def block_finished_with_eos(tokens: torch.Tensor, masked: torch.Tensor, eos_ids: torch.Tensor,
                            generated: torch.Tensor | None = None) -> torch.Tensor:
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
