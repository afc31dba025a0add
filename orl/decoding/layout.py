"""Where a request's blocks sit, for each checkpoint family (docs/method.md §1, §5).

- "after-prompt" (ours): the prompt attends causally; block 0 starts right after it.
- "absolute" (SDAR / TraDo): blocks sit at absolute positions, multiples of B; the prompt
  lies inside blocks, so the first block to decode holds the prompt's last P mod B tokens
  (committed from the start) followed by masks, and the block-causal mask counts blocks
  from position 0, prompt included.

Both are "key < limit(query)" masks from orl.model.masks.block_causal_limits with a
different origin: the prompt length for ours, 0 for the absolute layout.
"""

from __future__ import annotations

from dataclasses import dataclass

from orl.errors import InputError


@dataclass(frozen=True)
class BlockPlan:
    """One request's geometry in absolute positions."""

    prompt_len: int  # P
    first: int  # position of the first block to decode
    mask_origin: int  # blocks of the block-causal mask are counted from here
    blocks: int  # blocks to decode
    block: int  # B

    @property
    def prefix(self) -> int:
        """Prompt tokens inside the first block (0 for the after-prompt layout)."""
        return self.prompt_len - self.first

    @property
    def end(self) -> int:
        return self.first + self.blocks * self.block


def plan_blocks(
    prompt_len: int, max_new_tokens: int, block: int, layout: str, max_positions: int
) -> BlockPlan:
    """The whole blocks covering positions [P, P + max_new_tokens) in `layout`, validated before any
    compute."""
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens <= 0:
        raise InputError(f"max_new_tokens: expected a positive integer, got {max_new_tokens!r}")
    if prompt_len <= 0:
        raise InputError("prompt: empty prompt (it must encode to at least one token)")
    first, origin = (
        (prompt_len, prompt_len) if layout == "after-prompt" else (prompt_len - prompt_len % block, 0)
    )
    blocks = -(-(prompt_len - first + max_new_tokens) // block)
    plan = BlockPlan(prompt_len, first, origin, blocks, block)
    if plan.end > max_positions:
        raise InputError(
            f"prompt: {prompt_len} prompt tokens + {plan.end - prompt_len} new tokens = {plan.end} exceeds "
            "the "
            f"model's context (config.json: max_position_embeddings = {max_positions})"
        )
    return plan


def plan_request(prompt_len: int, max_new_tokens: int, max_positions: int) -> None:
    """Validate an autoregressive request (one token per block) before any compute."""
    plan_blocks(prompt_len, max_new_tokens, 1, "after-prompt", max_positions)
