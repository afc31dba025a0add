"""Matched accuracy (METHOD.md §4): a system's operating point is the fastest threshold whose
pass@1 is within a tolerance of the reference system's pass@1."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class OperatingPoint:
    policy: str  # e.g. "threshold:0.8"
    tau: float
    pass_at_1: float
    tpf: float
    reference_pass_at_1: float
    tolerance: float
    matched: bool  # False when no point reaches the reference: the most accurate one is used

    def to_dict(self) -> dict:
        return asdict(self)


def choose_operating_point(points: list[tuple[float, float, float]], reference_pass: float,
                           tolerance: float) -> OperatingPoint:
    """points: (tau, pass@1, tpf). Highest TPF among points with pass@1 >= reference - tolerance;
    if none qualifies, the most accurate point (ties: higher TPF), marked matched=False."""
    if not points:
        raise ValueError("no sweep points to choose from")
    # A small epsilon so that "exactly reference - tolerance" (e.g. 1 problem in 100) qualifies.
    eligible = [p for p in points if p[1] >= reference_pass - tolerance - 1e-9]
    matched = bool(eligible)
    tau, acc, tpf = max(eligible, key=lambda p: (p[2], p[1])) if matched else max(points, key=lambda p: (p[1], p[2]))
    return OperatingPoint(f"threshold:{tau:g}", tau, acc, tpf, reference_pass, tolerance, matched)
