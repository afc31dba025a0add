"""AUP (accuracy under parallelism), exactly as d3LLM defines it (its AUP_leaderboard/aup_utils.py).

A threshold sweep gives points (ρᵢ, yᵢ): tokens per forward and accuracy in percent. Then

    1. sort the points by ρ (a stable sort: points of equal TPF keep the order they were given in);
    2. y₁ is the accuracy of the least parallel point; drop every point with y < y₁ − 5, so that a
       collapse of accuracy at high parallelism is not integrated (how many were dropped is reported);
    3. AUP = ρ₁ y₁ + Σ_{i≥2} ½ (ρᵢ − ρᵢ₋₁) (yᵢ W(yᵢ) + yᵢ₋₁ W(yᵢ₋₁)),
       W(y) = min(exp(−α (1 − y / y_max)), 1),  α = 3,

with y_max the highest accuracy (percent) among the sweep points of every system of the same
table: AUP is therefore computed when a table is built, from the sweep records; a sweep alone
(the `aup` record of `orl sweep`) uses its own highest point and says so. The first term is the
rectangle from TPF 0 to ρ₁ at y₁, unweighted; each later segment is a trapezoid of the
quality-weighted accuracy, so a point far below the best accuracy in the table counts for less
than its own accuracy. Units: percent × tokens per forward (AR decoding at 80% scores 80).

d3LLM's script refuses a sweep whose most parallel point lies more than 5 points below y₁ (an
assertion) and otherwise drops those points; docs/method.md §4 drops them in every case and reports
the count. Where d3LLM's function returns a value, this one returns the same value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from orl.errors import InputError

ALPHA = 3.0  # d3LLM's penalty factor for accuracy below y_max
DROP_BELOW = 5.0  # points more than this many percentage points below y₁ are dropped


@dataclass(frozen=True)
class AUP:
    value: float  # percent × TPF
    y_max: float  # percent: the normalising accuracy W used
    kept: tuple[tuple[float, float], ...]  # (ρ, y%) integrated, in TPF order
    dropped: int  # points below y₁ − 5


def weight(y: float, y_max: float, alpha: float = ALPHA) -> float:
    """W(y) = min(exp(−α (1 − y / y_max)), 1); 1 where y_max is 0 (every accuracy is 0 then)."""
    if y_max == 0:
        return 1.0
    return min(math.exp(-alpha * (1 - y / y_max)), 1.0)


def _checked(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    out = []
    for rho, y in points:
        if rho is None or y is None or not (math.isfinite(rho) and math.isfinite(y)):
            raise InputError(f"AUP: point (tpf={rho}, accuracy={y}) is not a pair of finite numbers")
        if rho <= 0:
            raise InputError(f"AUP: TPF must be positive, got {rho}")
        if not 0 <= y <= 100:
            raise InputError(f"AUP: accuracy must be a percentage in [0, 100], got {y}")
        out.append((float(rho), float(y)))
    if not out:
        raise InputError("AUP: no sweep points")
    return out


def aup(points: Sequence[tuple[float, float]], y_max: float | None = None, alpha: float = ALPHA) -> AUP:
    """d3LLM's AUP of (TPF, accuracy in percent) points; y_max (percent) defaults to their own highest."""
    ordered = sorted(_checked(points), key=lambda point: point[0])
    top = max(y for _, y in ordered) if y_max is None else float(y_max)
    if not (math.isfinite(top) and 0 <= top <= 100):
        raise InputError(f"AUP: y_max must be a percentage in [0, 100], got {y_max}")
    floor = ordered[0][1] - DROP_BELOW
    kept = [(rho, y) for rho, y in ordered if y >= floor]
    value = kept[0][0] * kept[0][1]
    for (rho_prev, y_prev), (rho, y) in zip(kept, kept[1:], strict=False):
        value += 0.5 * (rho - rho_prev) * (y * weight(y, top, alpha) + y_prev * weight(y_prev, top, alpha))
    return AUP(value, top, tuple(kept), len(ordered) - len(kept))


def percent_points(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """(TPF, pass@1 as a fraction) -> (TPF, percent), the units AUP is defined in."""
    return [(tpf, 100.0 * acc) for tpf, acc in points]


def aup_or_none(
    points: Sequence[tuple[float, float]], y_max: float | None = None
) -> tuple[AUP | None, str | None]:
    """AUP of (TPF, pass@1 fraction) points, or (None, why) where it is undefined (no points, a bad value)."""
    try:
        return aup(percent_points(points), y_max), None
    except InputError as exc:
        return None, str(exc)
