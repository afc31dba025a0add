"""ORL's Table 5 ablations (docs/method.md §3): each a switch of the one loop in orl/train/orl.py, with the
same N, K, S, prompts and number of updates.

  none              ORL itself
  stale             one rollout set, generated once by θ₀ over every update's prompts, replayed for
                    every update (each update draws from the whole set): only staleness differs
  no-aec            λ = 0
  no-gate           CE on every masked position, no KL anchor
  no-residual       no adapter; residual off in rollouts and replay (α = 0 in the checkpoint)
  entropy-weighted  no adapter; the version-1 residual E[MASK] + α(1 − H/log V)·z (RCD-style)
  dparallel         dParallel's certainty-forcing recipe (its public training script): offline
                    trajectories of θ₀ (the stale set's, verified), no residual, each block masked at
                    rate 0.5 and its complementary mask, CE on both plus entropy (at T = 0.5, weight
                    2) on masked positions the model already predicts correctly
"""

from __future__ import annotations

from dataclasses import dataclass

ABLATIONS = ("none", "stale", "no-aec", "no-gate", "no-residual", "entropy-weighted", "dparallel")


@dataclass(frozen=True)
class Variant:
    """What an ablation switches in the one loop."""

    residual: str = "adapter"  # "adapter", "entropy-weighted" or "off"
    stale: bool = False  # rollouts from θ₀, generated once, replayed by every update
    gate: bool = True  # CE on U, KL anchor on C (False: CE on every masked position)
    aec: bool = True
    dparallel: bool = False


VARIANTS = {
    "none": Variant(),
    "stale": Variant(stale=True),
    "no-aec": Variant(aec=False),
    "no-gate": Variant(gate=False),
    "no-residual": Variant(residual="off"),
    "entropy-weighted": Variant(residual="entropy-weighted"),
    "dparallel": Variant(residual="off", stale=True, gate=False, aec=False, dparallel=True),
}
