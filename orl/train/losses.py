"""ORL's losses (METHOD.md §3) and the dParallel-style baseline's.

    L     = CE(y at masked positions) + λ · L_AEC
    L_AEC = mean_i  g_i · relu( H_i^{(k)} − ρ · H_i^{(k−1)} ),   g_i = 1[ c_i^{(k−1)} < τ_gate ]

over positions masked at both steps k−1 and k (states with k > 0). H^{(k)} comes
from the current weights, with gradient; H^{(k−1)} and c^{(k−1)} were captured in
the rollout and are detached.

Each loss is a sum over positions and a count of positions (`*_terms`), so that a mean is
taken over the global batch however it is split (orl/train/loop.py); `*` = sum / count.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def mean(terms: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    total, count = terms
    return total / count.clamp_min(1)


def masked_ce_terms(logits: torch.Tensor, targets: torch.Tensor, masked: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Cross-entropy over masked positions (sum, count); logits [n, B, V], targets/masked [n, B]."""
    ce = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), reduction="none").view_as(targets)
    return (ce * masked).sum(), masked.sum()


def masked_ce(logits: torch.Tensor, targets: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
    return mean(masked_ce_terms(logits, targets, masked))


def entropy(logits: torch.Tensor) -> torch.Tensor:
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


def aec_loss(
    logits: torch.Tensor, masked: torch.Tensor, has_prev: torch.Tensor, prev_entropy: torch.Tensor,
    prev_confidence: torch.Tensor, rho: float, gate: float | None,
) -> torch.Tensor:
    return mean(aec_terms(logits, masked, has_prev, prev_entropy, prev_confidence, rho, gate))


def aec_terms(
    logits: torch.Tensor, masked: torch.Tensor, has_prev: torch.Tensor, prev_entropy: torch.Tensor,
    prev_confidence: torch.Tensor, rho: float, gate: float | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Adjacent Entropy Contraction (sum, count over positions masked at both steps); `gate=None` is the
    no-gate ablation (g_i = 1)."""
    current = entropy(logits)
    # A position masked at step k was also masked at k-1 (masks only shrink), so "masked at
    # both" is masked now in a state that has a previous step.
    both = masked & has_prev[:, None]
    g = both if gate is None else both & (prev_confidence < gate)
    excess = torch.relu(current - rho * prev_entropy.detach())
    return (excess * g).sum(), both.sum()


def dparallel_entropy(logits: torch.Tensor, targets: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
    return mean(dparallel_entropy_terms(logits, targets, masked))


def dparallel_entropy_terms(logits: torch.Tensor, targets: torch.Tensor,
                            masked: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Entropy over masked positions the model already predicts correctly (sum, count), dParallel-style.
    The count depends on the forward (which predictions are correct)."""
    correct = masked & (logits.argmax(-1) == targets)
    return (entropy(logits) * correct).sum(), correct.sum()
