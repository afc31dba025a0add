"""ORL's losses (METHOD.md §3) and the dParallel-style baseline's.

    L     = CE(y at masked positions) + λ · L_AEC
    L_AEC = mean_i  g_i · relu( H_i^{(k)} − ρ · H_i^{(k−1)} ),   g_i = 1[ sg(c_i^{(k)}) < τ_gate ]

over positions masked at both steps k−1 and k (states with k > 0). H^{(k)} and c^{(k)}
come from the current weights on the replayed state k (H with gradient, c detached);
H^{(k−1)} was captured in the rollout and is detached. The gate reads the replayed step's
own confidence: under threshold rollouts every position still masked at k had
c^{(k−1)} < τ_train ≤ τ_gate, so a gate on c^{(k−1)} never closes (METHOD.md §3).

Each loss is a sum over positions and a count of positions (`*_terms`), so that a mean is
taken over the global batch however it is split (orl/train/loop.py); `*` = sum / count.
"""

from __future__ import annotations

from dataclasses import dataclass

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


def aec_positions(masked: torch.Tensor, has_prev: torch.Tensor) -> torch.Tensor:
    """Positions masked at both steps k-1 and k: masks only shrink, so masked now in a state with k > 0."""
    return masked & has_prev[:, None]


@dataclass
class AecParts:
    """One forward's AEC quantities, computed once for the loss and the gate's diagnostics."""

    excess: torch.Tensor  # relu(H^{(k)} − ρ·H^{(k−1)}) per position, with gradient through H^{(k)}
    positions: torch.Tensor  # masked at both steps k−1 and k
    closed: torch.Tensor  # AEC positions where g_i = 0: sg(c^{(k)}) reaches τ_gate

    def terms(self, gated: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """(sum, count) of L_AEC; gated=False is the no-gate ablation (g_i = 1)."""
        g = self.positions & ~self.closed if gated else self.positions
        return (self.excess * g).sum(), self.positions.sum()

    def gate_sums(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(AEC positions the gate closes on, the AEC loss they carry, AEC positions), as tensors
        (no host sync), so that a step can add them over its micro-batches."""
        return self.closed.sum(), (self.excess.detach() * self.closed).sum(), self.positions.sum()


def aec_parts(logits: torch.Tensor, masked: torch.Tensor, has_prev: torch.Tensor, prev_entropy: torch.Tensor,
              rho: float, gate: float) -> AecParts:
    positions = aec_positions(masked, has_prev)
    confidence = torch.softmax(logits.detach().float(), dim=-1).amax(-1)
    excess = torch.relu(entropy(logits) - rho * prev_entropy.detach())
    return AecParts(excess, positions, positions & (confidence >= gate))


def aec_loss(
    logits: torch.Tensor, masked: torch.Tensor, has_prev: torch.Tensor, prev_entropy: torch.Tensor, rho: float,
    gate: float | None,
) -> torch.Tensor:
    """Adjacent Entropy Contraction (mean over positions masked at both steps); `gate=None` is the
    no-gate ablation (g_i = 1)."""
    parts = aec_parts(logits, masked, has_prev, prev_entropy, rho, 1.0 if gate is None else gate)
    return mean(parts.terms(gated=gate is not None))


def gate_stats(logits: torch.Tensor, masked: torch.Tensor, has_prev: torch.Tensor, prev_entropy: torch.Tensor,
               rho: float, gate: float) -> tuple[float, float]:
    """What the gate does to one replay batch: (share of AEC positions it closes on, the AEC loss it
    removes = mean over AEC positions of the excess on closed ones). The no-gate ablation logs what the
    gate would have done. A closed position whose entropy already contracted by ρ has no excess, so
    the second number says whether gating changes the objective at all."""
    closed, removed, positions = aec_parts(logits.detach(), masked, has_prev, prev_entropy, rho, gate).gate_sums()
    count = positions.clamp_min(1)
    return float(closed / count), float(removed / count)


def dparallel_entropy(logits: torch.Tensor, targets: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
    return mean(dparallel_entropy_terms(logits, targets, masked))


def dparallel_entropy_terms(logits: torch.Tensor, targets: torch.Tensor,
                            masked: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Entropy over masked positions the model already predicts correctly (sum, count), dParallel-style.
    The count depends on the forward (which predictions are correct)."""
    correct = masked & (logits.argmax(-1) == targets)
    return (entropy(logits) * correct).sum(), correct.sum()
