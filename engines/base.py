"""The one interface every engine and baseline implements.

The evaluation, the latency protocol and the tables only ever see
`Engine.generate(...) -> Generation`; a table row is therefore a configuration,
never new code (shared/design/ARCHITECTURE.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


@dataclass
class StepLog:
    """One denoising step of one block (diffusion engines only)."""

    block: int
    step: int
    committed: int  # positions committed by this step
    masked_before: int  # positions still masked when the step started
    mean_entropy: float  # mean entropy (nats) over the positions masked before the step
    mean_confidence: float  # mean max-probability over the same positions


@dataclass
class Generation:
    """What one request produced, and what it cost.

    nfe counts model forwards during generation with prompt prefill excluded
    (METHOD.md §4); for speculative decoding it counts target-model forwards.
    """

    token_ids: list[int]  # generated tokens, up to and including <eos> when one was produced
    text: str  # decoded completion, <eos> and what follows removed
    nfe: int
    prefill_forwards: int
    wall_time_s: float
    steps: list[StepLog] | None = None
    draft_forwards: int = 0  # forwards of a draft model (speculative baselines)
    extra: dict = field(default_factory=dict)

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def tpf(self) -> float:
        """Tokens per forward: generated tokens / NFE (METHOD.md §4)."""
        return self.num_tokens / self.nfe if self.nfe else 0.0


@runtime_checkable
class Engine(Protocol):
    """Anything that turns a prompt into a Generation."""

    name: str

    def generate(self, prompt: str, max_new_tokens: int) -> Generation: ...


class EngineUnavailable(RuntimeError):
    """Raised when an engine cannot run here (no CUDA, package missing).

    The message is the reason a table row prints as "not run: <reason>".
    """


def plan_request(prompt_len: int, max_new_tokens: int, max_positions: int, block_size: int = 1) -> int:
    """Validate a request before any compute; returns the number of blocks to generate.

    The completion is generated in whole blocks, so max_new_tokens is rounded up to a
    multiple of the block size, and prompt plus that must fit the model's context.
    """
    from orl.errors import InputError

    if not isinstance(max_new_tokens, int) or max_new_tokens <= 0:
        raise InputError(f"max_new_tokens: expected a positive integer, got {max_new_tokens!r}")
    if prompt_len <= 0:
        raise InputError("prompt: empty prompt (it must encode to at least one token)")
    blocks = -(-max_new_tokens // block_size)
    total = prompt_len + blocks * block_size
    if total > max_positions:
        raise InputError(
            f"prompt: {prompt_len} prompt tokens + {blocks * block_size} new tokens = {total} exceeds the model's "
            f"context (config.json: max_position_embeddings = {max_positions})"
        )
    return blocks
