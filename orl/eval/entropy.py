"""Entropy per denoising step: the picture of "uncertainty drops faster" (docs/tables.md, figures).

For each step index k within a block, the mean over requests and blocks of the mean entropy of
the positions still masked when step k began, from the reference decoder's step logs.
"""

from __future__ import annotations

from collections.abc import Sequence

from orl.engines.base import Generation


def entropy_per_step(generations: Sequence[Generation]) -> tuple[list[float], list[int]]:
    """(mean entropy per step index, how many (request, block) states each mean is over)."""
    sums: dict[int, list[float]] = {}
    for gen in generations:
        for log in gen.steps or []:
            if log.masked_before:
                sums.setdefault(log.step, []).append(log.mean_entropy)
    ordered = sorted(sums.items())
    return [sum(v) / len(v) for _, v in ordered], [len(v) for _, v in ordered]
