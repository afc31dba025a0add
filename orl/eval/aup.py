"""AUP: area under the accuracy-vs-parallelism curve of a threshold sweep (after d3LLM).

A threshold sweep gives points (TPF_i, pass@1_i), one per confidence threshold. AUP
summarises the whole trade-off in one number, so that a method cannot win by picking
a single favourable operating point:

    1. Points with equal TPF are merged into one, at their mean pass@1 (so the result
       does not depend on the order the sweep wrote them in).
    2. The points are sorted by TPF: (t_1, a_1), ..., (t_n, a_n) with t_1 < ... < t_n.
    3. The curve starts at TPF = 1 (one token per forward: no parallelism) at the
       accuracy of the least parallel point, i.e. the point (1, a_1) is prepended when
       t_1 > 1. Between points the curve is linear.
    4. AUP = trapezoidal area under that curve from TPF = 1 to TPF = t_n:

           AUP = a_1 (t_1 - 1) + sum_{i=2..n} (t_i - t_{i-1}) (a_i + a_{i-1}) / 2

AUP is in pass@1 x TPF units: a method that keeps pass@1 = 0.8 up to TPF 4 scores
0.8 x 3 = 2.4; a sweep that never leaves TPF 1 scores 0. Unlike d3LLM's published
variant this one does not down-weight low-accuracy points; the pass@1 of every point
is plotted beside it, so an accuracy collapse stays visible.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from orl.errors import InputError


def curve(points: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """The sorted (TPF, pass@1) curve AUP integrates, with equal-TPF points merged."""
    merged: dict[float, list[float]] = {}
    for tpf, acc in points:
        if tpf is None or acc is None or not (math.isfinite(tpf) and math.isfinite(acc)):
            raise InputError(f"AUP: point (tpf={tpf}, pass@1={acc}) is not a pair of finite numbers")
        if tpf < 1:
            raise InputError(f"AUP: TPF must be >= 1 (one token per forward at least), got {tpf}")
        if not 0 <= acc <= 1:
            raise InputError(f"AUP: pass@1 must be in [0, 1], got {acc}")
        merged.setdefault(float(tpf), []).append(float(acc))
    return [(tpf, sum(accs) / len(accs)) for tpf, accs in sorted(merged.items())]


def aup(points: Iterable[tuple[float, float]]) -> float:
    """Area under pass@1 over TPF from TPF = 1 to the largest TPF (module docstring)."""
    pts = curve(points)
    if not pts:
        raise InputError("AUP: no sweep points")
    t_prev, a_prev = 1.0, pts[0][1]
    area = 0.0
    for tpf, acc in pts:
        area += (tpf - t_prev) * (acc + a_prev) / 2
        t_prev, a_prev = tpf, acc
    return area


def aup_or_none(points: Iterable[tuple[float, float]]) -> tuple[float | None, str | None]:
    """AUP, or (None, why) where it is undefined (no points, or a point below one token per forward,
    which a model that spends forwards on text after <eos> can produce)."""
    try:
        return aup(points), None
    except InputError as exc:
        return None, str(exc)
