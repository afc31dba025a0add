"""The decoding policy of a block-diffusion model: one implementation, used by dlmrt,
by the reference decoder and by the ORL rollout (METHOD.md §2).

Everything here is batched tensor code with static shapes and no host
synchronisation (no .item(), no Python branching on tensor values), so the
same functions run eagerly, under torch.compile(fullgraph=True) and inside a
captured CUDA graph.

State of the current block, per row: `tokens` [b, B] (committed ids, [MASK]
elsewhere), `masked` [b, B] bool, and the previous step's distribution summary
used by the residual context.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from orl.errors import InputError

POLICY_NAMES = ("threshold", "fixed", "factor")


@dataclass(frozen=True)
class Policy:
    """A commit rule. `value` is τ for threshold, k for fixed, f for factor."""

    name: str
    value: float

    @classmethod
    def parse(cls, spec: str) -> Policy:
        """Parse 'threshold:0.9', 'fixed:1' or 'factor:1.0'."""
        name, _, raw = spec.partition(":")
        if name not in POLICY_NAMES:
            raise InputError(f"--policy: unknown policy {name!r} in {spec!r}; expected one of "
                             f"{', '.join(f'{n}:<value>' for n in POLICY_NAMES)}")
        try:
            value = float(raw)
        except ValueError:
            raise InputError(f"--policy: {spec!r}: expected a number after '{name}:'") from None
        if name == "threshold" and not 0.0 < value <= 1.0:
            raise InputError(f"--policy: threshold must be in (0, 1], got {value}")
        if name == "fixed" and (value < 1 or value != int(value)):
            raise InputError(f"--policy: fixed:k needs a positive integer k, got {raw}")
        if name == "factor" and value <= 0:
            raise InputError(f"--policy: factor must be positive, got {value}")
        return cls(name, value)

    def __str__(self) -> str:
        return f"{self.name}:{int(self.value) if self.name == 'fixed' else self.value:g}"

    def as_record(self) -> dict:
        key = {"threshold": "tau", "fixed": "k", "factor": "f"}[self.name]
        return {"name": self.name, "params": {key: int(self.value) if self.name == "fixed" else self.value}}


def confidence_ranks(confidence: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
    """0-based rank of each masked position by descending confidence (ties: lower index first).

    Unmasked positions get ranks after every masked one.
    """
    score = torch.where(masked, confidence, torch.full_like(confidence, -1.0))
    order = torch.argsort(score, dim=-1, descending=True, stable=True)
    ranks = torch.empty_like(order)
    ranks.scatter_(-1, order, torch.arange(order.shape[-1], device=order.device).expand_as(order))
    return ranks


def commit_mask(policy: Policy, confidence: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
    """Which masked positions to commit this step ([b, B] bool); at least one per row with any masked."""
    ranks = confidence_ranks(confidence, masked)
    most_confident = masked & (ranks == 0)
    if policy.name == "threshold":
        chosen = masked & (confidence >= policy.value)
    elif policy.name == "fixed":
        chosen = masked & (ranks < int(policy.value))
    else:  # factor: the n-th most confident (1-based) is committed if c >= 1 - f / (n + 1)
        n = (ranks + 1).to(confidence.dtype)
        chosen = masked & (confidence >= 1.0 - policy.value / (n + 1.0))
        # The bound rises with n while confidence falls, so the chosen set is a prefix of the
        # ranking; enforce it so a tie cannot leave a gap.
        first_gap = torch.where(masked & ~chosen, ranks, torch.full_like(ranks, ranks.shape[-1])).amin(-1, keepdim=True)
        chosen = masked & (ranks < first_gap)
    return chosen | most_confident


def entropy_and_confidence(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(probabilities, entropy in nats, confidence = max prob, argmax token) from logits [..., V]."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    probs = logp.exp()
    entropy = -(probs * logp).sum(-1)
    confidence, prediction = probs.max(-1)
    return probs, entropy, confidence, prediction


def residual_context(
    embedding: torch.Tensor, prev_probs: torch.Tensor, prev_entropy: torch.Tensor, alpha: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """ORL's residual r = P^{(k-1)} @ E and its weight w = α·(1 − H(P^{(k-1)}) / log V)."""
    weight = alpha * (1.0 - prev_entropy / math.log(embedding.shape[0]))
    return prev_probs.to(embedding.dtype) @ embedding, weight


def mix_residual(
    embedding: torch.Tensor, tokens: torch.Tensor, masked: torch.Tensor, residual: torch.Tensor,
    weight: torch.Tensor, mask_id: int,
) -> torch.Tensor:
    """Committed positions: E[token]; masked positions: E[MASK] + w·r."""
    mix = embedding[mask_id] + weight[..., None].to(embedding.dtype) * residual
    return torch.where(masked[..., None], mix, embedding[tokens])


def residual_embeddings(
    embedding: torch.Tensor, tokens: torch.Tensor, masked: torch.Tensor, prev_probs: torch.Tensor | None,
    prev_entropy: torch.Tensor | None, alpha: float, mask_id: int,
) -> torch.Tensor:
    """Input embeddings of a block with ORL's residual context (METHOD.md §2).

    Committed positions: E[token]. Masked positions: E[MASK] + w·(P^{(k-1)} @ E) with
    w = α·(1 − H(P^{(k-1)}) / log V); at step 0 (prev_probs None) or α = 0 just E[MASK].
    """
    if prev_probs is None or alpha == 0.0:
        return embedding[tokens]
    residual, weight = residual_context(embedding, prev_probs, prev_entropy, alpha)
    return mix_residual(embedding, tokens, masked, residual, weight, mask_id)


@dataclass
class StepOutput:
    tokens: torch.Tensor  # [b, B] after this step's commits
    masked: torch.Tensor  # [b, B] still masked after this step
    committed: torch.Tensor  # [b, B] committed by this step (incl. <eos> fill)
    probs: torch.Tensor  # [b, B, V] this step's distributions (next step's residual)
    entropy: torch.Tensor  # [b, B]
    confidence: torch.Tensor  # [b, B]


def denoise_step(
    policy: Policy, logits: torch.Tensor, tokens: torch.Tensor, masked: torch.Tensor, eos_id: int,
) -> StepOutput:
    """Apply one step's commits to the block state, given this step's logits [b, B, V].

    After the commits, once <eos> is committed at a position every later position of
    the block is committed as <eos> at once: no forward is spent on text that is dropped.
    Rows whose block is already done (nothing masked) are left unchanged, which is what
    makes extra predicated steps in a chunk no-ops.
    """
    probs, entropy, confidence, prediction = entropy_and_confidence(logits)
    commit = commit_mask(policy, confidence, masked)
    tokens = torch.where(commit, prediction, tokens)
    remaining = masked & ~commit
    eos_seen = ((tokens == eos_id) & ~remaining).int().cumsum(-1) > 0
    fill = remaining & eos_seen
    tokens = torch.where(fill, torch.full_like(tokens, eos_id), tokens)
    remaining = remaining & ~fill
    return StepOutput(tokens, remaining, commit | fill, probs, entropy, confidence)


def block_finished_with_eos(tokens: torch.Tensor, masked: torch.Tensor, eos_id: int) -> torch.Tensor:
    """[b] True where the block holds an <eos> with every earlier position committed."""
    is_eos = (tokens == eos_id) & ~masked
    before_first_eos = is_eos.int().cumsum(-1) == 0
    return is_eos.any(-1) & ~(masked & before_first_eos).any(-1)
