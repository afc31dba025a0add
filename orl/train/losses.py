"""ORL's loss, version 2 (docs/method.md §3), and the dParallel row's.

Over the masked positions M_k of a replayed state k:

    L = mean_{i∈U} CE(y_i)  +  β · mean_{i∈C} min(KL(p_θ,i ‖ p_ref,i), κ)  +  λ · L_AEC

- the gate: U = {i ∈ M_k : c_i^{(k)} < τ_gate}, c^{(k)} the rollout's confidence at that state
  (captured, detached); C = M_k \\ U are anchored to the frozen stage-initial model p_ref = θ₀;
- AEC (the page's Equation 2), one term per state k > 0 (the pair k−1 → k of its block):
  L_AEC = [max(0, H̄_next − (1 − ρ)·H̄_source)]², H̄ the state-averaged normalised entropy
  (H / log V): H̄_source from the rollout at k−1 over M_{k−1} (detached), H̄_next of p_θ at k
  over M_k (with gradient).

Each term is a (sum, count) pair so that a mean is taken over the global batch however it is
split over ranks and micro-batches (orl/train/loop.py); `mean` = sum / count. CE and KL are
means over positions of the whole batch, AEC a mean over its states with k > 0 (ours).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F


def mean(terms: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    total, count = terms
    return total / count.clamp_min(1)


def masked_ce_terms(
    logits: torch.Tensor, targets: torch.Tensor, masked: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Cross-entropy over the `masked` positions (sum, count); logits [n, B, V], targets/masked [n, B]."""
    ce = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), reduction="none").view_as(targets)
    return (ce * masked).sum(), masked.sum()


def masked_ce(logits: torch.Tensor, targets: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
    return mean(masked_ce_terms(logits, targets, masked))


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy in nats of softmax(logits) over the last axis."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


def gate_split(
    masked: torch.Tensor, confidence: torch.Tensor, tau_gate: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(U, C): masked positions the rollout was uncertain about (c < τ_gate), and the confident rest."""
    uncertain = masked & (confidence.detach() < tau_gate)
    return uncertain, masked & ~uncertain


def capped_reverse_kl(logits: torch.Tensor, ref_logits: torch.Tensor, cap: float) -> torch.Tensor:
    """min(KL(p_θ ‖ p_ref), κ) per position [n, B]; the reference is detached."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    logq = torch.log_softmax(ref_logits.detach().float(), dim=-1)
    kl = (logp.exp() * (logp - logq)).sum(-1)
    return torch.clamp(kl, max=cap)


def kl_anchor_terms(
    logits: torch.Tensor, ref_logits: torch.Tensor, confident: torch.Tensor, cap: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Σ over confident positions of min(KL, κ), and their count."""
    return (capped_reverse_kl(logits, ref_logits, cap) * confident).sum(), confident.sum()


def aec_hinge(next_entropy: torch.Tensor, source_entropy: torch.Tensor, rho: float) -> torch.Tensor:
    """[max(0, H̄_next − (1 − ρ)·H̄_source)]² (normalised entropies; the page's worked example:
    ρ 0.25, source 0.40, next 0.36 → 0.0036)."""
    return torch.relu(next_entropy - (1.0 - rho) * source_entropy.detach()) ** 2


@dataclass
class AecParts:
    """One forward's AEC quantities per state: the hinge (with gradient), which states have a pair."""

    loss: torch.Tensor  # [n] squared hinge, 0 where no pair
    paired: torch.Tensor  # [n] bool: k > 0 and something masked at k
    shortfall: torch.Tensor  # [n] H̄_next − (1 − ρ)·H̄_source (detached)

    def terms(self) -> tuple[torch.Tensor, torch.Tensor]:
        return (self.loss * self.paired).sum(), self.paired.sum()

    def stats(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(pairs with a shortfall > 0, Σ hinge over pairs), detached: the log's AEC active share and mean."""
        active = self.paired & (self.shortfall > 0)
        return active.sum(), (self.loss.detach() * self.paired).sum()


def aec_parts(
    logits: torch.Tensor, masked: torch.Tensor, step: torch.Tensor, source_entropy: torch.Tensor, rho: float
) -> AecParts:
    """AEC per replayed state. `source_entropy` [n]: H̄ of the rollout at k−1 over M_{k−1}, in nats."""
    log_v = math.log(logits.shape[-1])
    h = entropy(logits) / log_v
    count = masked.sum(-1)
    next_mean = (h * masked).sum(-1) / count.clamp_min(1)
    source = source_entropy.float() / log_v
    paired = (step > 0) & (count > 0)
    loss = aec_hinge(next_mean, source, rho)
    return AecParts(loss, paired, (next_mean - (1.0 - rho) * source).detach())


def dparallel_entropy_terms(
    logits: torch.Tensor, targets: torch.Tensor, masked: torch.Tensor, temperature: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """dParallel's certainty forcing: entropy of softmax(logits / T) over masked positions the model
    already predicts correctly (sum, count). The count depends on the forward."""
    correct = masked & (logits.argmax(-1) == targets)
    return (entropy(logits / temperature) * correct).sum(), correct.sum()
