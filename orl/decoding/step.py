"""One denoising step of a block: distributions in, commits out (docs/method.md §2).

`denoise_step` is the whole decision a step makes, shared by every decoder: the
confidences, the policy's commits, then the <eos> rule (the run of <eos> predictions
before a committed <eos>, and the fill after it). Rows whose block is already done
(nothing masked) are left unchanged, which is what makes dlmrt's extra predicated steps
in a chunk no-ops.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from orl.decoding.eos import committed_eos, eos_run, fill_after_eos
from orl.decoding.policy import Policy, commit_mask


def entropy_and_confidence(
    logits: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(probabilities, entropy in nats, confidence = max prob, argmax token) from logits [..., V]."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    probs = logp.exp()
    entropy = -(probs * logp).sum(-1)
    confidence, prediction = probs.max(-1)
    return probs, entropy, confidence, prediction


@dataclass
class StepOutput:
    tokens: torch.Tensor  # [b, B] after this step's commits
    masked: torch.Tensor  # [b, B] still masked after this step
    committed: torch.Tensor  # [b, B] committed by this step (incl. <eos> fill)
    probs: torch.Tensor  # [b, B, V] this step's distributions (next step's residual)
    entropy: torch.Tensor  # [b, B]
    confidence: torch.Tensor  # [b, B]


def denoise_step(
    policy: Policy,
    logits: torch.Tensor,
    tokens: torch.Tensor,
    masked: torch.Tensor,
    eos_ids: torch.Tensor,
    *,
    eos_fill: bool = True,
    generated: torch.Tensor | None = None,
    temperature: float = 0.0,
    gumbel: torch.Tensor | None = None,
) -> StepOutput:
    """Apply one step's commits to the block state, given this step's logits [b, B, V].

    Args:
        policy: the commit rule (orl.decoding.policy).
        logits: this step's logits at the block's positions.
        tokens, masked: the block state when the step began ([MASK] where masked).
        eos_ids: 1-D tensor of end-token ids.
        eos_fill: the <eos> rule of orl.decoding.eos: commit every masked position after a committed
            <eos>, and the run of masked <eos> predictions that leads up to one.
        generated: [b, B] bool, the block's completion positions (None: all of them); an end token
            in the prompt's tail (absolute layout) fills nothing.
        temperature, gumbel: ORL's rollouts sample token values (docs/method.md §3): the value is
            argmax(logits / T + Gumbel noise [b, B, V]), a draw from softmax(logits / T); which
            positions commit is still decided by the confidence of P (T = 1). None: greedy.
    """
    probs, entropy, confidence, prediction = entropy_and_confidence(logits)
    if gumbel is not None and temperature > 0:
        prediction = (logits.float() / temperature + gumbel).argmax(-1)
    commit = commit_mask(policy, confidence, masked)
    tokens = torch.where(commit, prediction, tokens)
    remaining = masked & ~commit
    if eos_fill:
        run = eos_run(prediction, remaining, committed_eos(tokens, remaining, eos_ids, generated), eos_ids)
        tokens = torch.where(run, prediction, tokens)
        remaining = remaining & ~run
        fill = fill_after_eos(tokens, remaining, eos_ids, generated)
        tokens = torch.where(fill, eos_ids[0].expand_as(tokens), tokens)
        remaining = remaining & ~fill
        commit = commit | run | fill
    return StepOutput(tokens, remaining, commit, probs, entropy, confidence)
