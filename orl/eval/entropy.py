"""Entropy per denoising step: the picture of "uncertainty drops faster" (docs/tables.md, figures).

For each step index k within a block, the mean over requests and blocks of the mean entropy of
the positions still masked when step k began, from the reference decoder's step logs; and the `entropy`
record `orl entropy-profile` writes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from orl.engines.base import Engine, Generation
from orl.eval.quality import generate_all
from orl.records import make_record


def entropy_per_step(generations: Sequence[Generation]) -> tuple[list[float], list[int]]:
    """(mean entropy per step index, how many (request, block) states each mean is over)."""
    sums: dict[int, list[float]] = {}
    for gen in generations:
        for log in gen.steps or []:
            if log.masked_before:
                sums.setdefault(log.step, []).append(log.mean_entropy)
    ordered = sorted(sums.items())
    return [sum(v) / len(v) for _, v in ordered], [len(v) for _, v in ordered]


def entropy_record(
    engine: Engine,
    problems: list[dict],
    max_new_tokens: int,
    *,
    suite: str,
    system: str | None,
    progress: bool = True,
    chat: Callable[[str], str] | None = None,
) -> tuple[dict, list[float]]:
    """What `orl entropy-profile` writes: `problems` decoded by `engine` (built with step logs), and the
    `entropy` record of their mean entropy per step; (the record, the means)."""
    per_step, counts = entropy_per_step(
        generate_all(engine, problems, max_new_tokens, progress=progress, chat=chat)
    )
    info = engine.describe()
    model = info.model_block()
    record = make_record(
        "entropy",
        system=system or model["name"],
        engine=info.name,
        model=model,
        policy=info.policy,
        suite=suite,
        n_problems=len(problems),
        metrics={},
        extra={
            "mean_entropy_per_step": per_step,
            "states_per_step": counts,
            "device": info.device,
            "chat_template": chat is not None,
        },
    )
    return record, per_step
