"""A sweep: the same checkpoint decoded at each value of its policy's parameter (τ of threshold(τ), the
default; Policy.parameter), pass@1 and TPF per point.

The sweep is what AUP integrates and what the operating point is chosen from (METHOD.md §4).
Each point is a full quality evaluation (sandboxed tests) with per-problem results, so the
uncertainty of every point and of paired differences can be computed from the records.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from orl.decoding import Policy
from orl.engines.base import Engine
from orl.eval.quality import QualityResult, evaluate_quality


@dataclass
class SweepPoint:
    policy: Policy
    result: QualityResult
    engine: Engine

    @property
    def tokens_per_s(self) -> float | None:
        return self.result.tokens / self.result.wall_s if self.result.wall_s else None


def sweep_policies(policy: Policy, values: Sequence[float], where: str = "sweep") -> list[Policy]:
    """`policy` at each of `values` of its parameter, each checked (InputError naming `where`)."""
    return [policy.with_value(value, where) for value in values]


def run_sweep(make_engine: Callable[[Policy], Engine], problems: Sequence[dict], policies: Sequence[Policy],
              max_new_tokens: int, *, progress: bool = True,
              report: Callable[[SweepPoint], None] | None = None,
              chat: Callable[[str], str] | None = None) -> list[SweepPoint]:
    """One quality evaluation per policy (`sweep_policies`; prompts through `chat`, the chat template,
    where given); each engine is warmed up on the first prompt so compilation is not timed."""
    points = []
    for policy in policies:
        engine = make_engine(policy)
        engine.generate(chat(problems[0]["prompt"]) if chat else problems[0]["prompt"], max_new_tokens)
        result = evaluate_quality(engine, list(problems), max_new_tokens, progress=progress, chat=chat)
        point = SweepPoint(policy, result, engine)
        points.append(point)
        if report is not None:
            report(point)
    return points
