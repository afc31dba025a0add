"""A sweep: the same checkpoint decoded at each value of its policy's parameter (τ of threshold(τ), the
default; Policy.parameter), pass@1 and TPF per point.

The sweep is what AUP integrates and what the operating point is chosen from (docs/method.md §4).
Each point is a full quality evaluation (sandboxed tests) with per-problem results, so the
uncertainty of every point and of paired differences can be computed from the records.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from orl.decoding import Policy
from orl.engines.base import Engine
from orl.eval.aup import aup_or_none
from orl.eval.operating_point import candidates_of, extend_grid, outcomes
from orl.eval.quality import QualityResult, evaluate_quality
from orl.records import make_record


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


def run_sweep(
    make_engine: Callable[[Policy], Engine],
    problems: Sequence[dict],
    policies: Sequence[Policy],
    max_new_tokens: int,
    *,
    progress: bool = True,
    report: Callable[[SweepPoint], None] | None = None,
    chat: Callable[[str], str] | None = None,
    suite: str | None = None,
    verdicts: dict | None = None,
) -> list[SweepPoint]:
    """One quality evaluation per policy (`sweep_policies`; prompts through `chat`, the chat template,
    where given; `suite` chooses the checker, orl.eval.quality.CHECKERS); each engine is warmed up on the
    first prompt so compilation is not timed. Grid points share their sandboxed verdicts (`verdicts`, kept
    across calls where given: a grid extension's points too): a completion decoded at several points runs
    once."""
    points, verdicts = [], {} if verdicts is None else verdicts
    for policy in policies:
        engine = make_engine(policy)
        engine.generate(chat(problems[0]["prompt"]) if chat else problems[0]["prompt"], max_new_tokens)
        result = evaluate_quality(
            engine,
            list(problems),
            max_new_tokens,
            progress=progress,
            chat=chat,
            suite=suite,
            verdicts=verdicts,
        )
        point = SweepPoint(policy, result, engine)
        points.append(point)
        if report is not None:
            report(point)
    return points


def sweep_record(
    point: SweepPoint,
    *,
    system: str,
    engine: str,
    model: dict,
    suite: str,
    split: str,
    n_problems: int,
    chat_template: bool,
) -> dict:
    """One point's `sweep` record: pass@1, TPF, tokens/s and the per-problem outcomes at its policy."""
    info = point.engine.describe()
    r = point.result
    return make_record(
        "sweep",
        system=system,
        engine=engine,
        model=model,
        policy=point.policy.to_record(),
        suite=suite,
        split=split,
        n_problems=n_problems,
        per_problem=r.per_problem,
        metrics={
            **r.forwards,
            "pass_at_1": r.pass_at_1,
            "tpf": r.tpf,
            "tokens_per_s": point.tokens_per_s,
            "nfe_mean": r.nfe_mean,
        },
        extra={"device": info.device, "chat_template": chat_template, **info.settings},
    )


def aup_record(
    points: Sequence[SweepPoint],
    *,
    system: str,
    engine: str,
    model: dict,
    suite: str,
    split: str,
    n_problems: int,
) -> dict:
    """The sweep's `aup` record: d3LLM's AUP with this sweep's own y_max (undefined: None and the reason)."""
    area, note = aup_or_none([(p.result.tpf, p.result.pass_at_1) for p in points])
    metrics = {"aup": None, "y_max": None, "aup_dropped": None}
    if area is not None:
        metrics = {"aup": area.value, "y_max": area.y_max, "aup_dropped": area.dropped}
    points_block = [
        {p.policy.parameter: p.policy.value, "tpf": p.result.tpf, "pass_at_1": p.result.pass_at_1}
        for p in points
    ]
    return make_record(
        "aup",
        system=system,
        engine=engine,
        model=model,
        suite=suite,
        split=split,
        n_problems=n_problems,
        metrics=metrics,
        extra={
            "definition": "d3LLM AUP (orl/eval/aup.py): percent x TPF, alpha 3, points below y1 - 5 dropped",
            "y_max_of": "this sweep's highest point; a table recomputes AUP with its own y_max",
            "points": points_block,
            "note": note,
        },
    )


def aup_line(record: dict) -> str:
    """The sweep's last printed line: aup=<x> (y_max, dropped points) or aup=undefined (why)."""
    m = record["metrics"]
    if m["aup"] is None:
        return f"aup=undefined ({record['extra']['note']})"
    return f"aup={m['aup']:.4f} (y_max {m['y_max']:.4g}%, {m['aup_dropped']} dropped)"


def point_line(point: SweepPoint) -> str:
    """One point's printed line: its parameter's value, pass@1, TPF and tokens/s."""
    r = point.result
    return (
        f"{point.policy.parameter}={point.policy.value:g} pass@1={r.pass_at_1:.4f} tpf={r.tpf:.3f} "
        f"tokens_per_s={point.tokens_per_s or 0:.1f}"
    )


def sweep_records(points: Sequence[SweepPoint], *, chat_template: bool, **row) -> list[dict]:
    """What `orl sweep` writes: one `sweep` record per point, then the sweep's `aup` record; `row` is the
    system, engine, model block, suite, split and number of problems they share."""
    return [sweep_record(p, **row, chat_template=chat_template) for p in points] + [aup_record(points, **row)]


def extended_sweep(
    measure: Callable[[Sequence[Policy]], list[SweepPoint]],
    policies: Sequence[Policy],
    record_of: Callable[[SweepPoint], dict],
    reference: tuple[str, dict] | None,
    tolerance: float,
) -> list[SweepPoint]:
    """`policies` measured, then, given the reference's quality record (its file name, the record), values
    added beyond an end of the grid where the operating point sits there: below the lowest while the
    matched point is there, above the highest while nothing matches and the most accurate point is there
    (grid-edge extension, docs/method.md §4: orl/eval/operating_point.py extend_grid); `record_of` makes a
    point's `sweep` record, which the matching reads."""
    points = measure(policies)
    if reference is None:
        return points
    name, record = reference
    added: list[SweepPoint] = []

    def measure_one(policy: Policy):
        added.extend(measure([policy]))
        return candidates_of([record_of(added[-1])], "grid extension")[0]

    candidates = candidates_of([record_of(point) for point in points], "sweep")
    extend_grid(candidates, measure_one, outcomes(record, name), tolerance)
    lowest, highest = min(p.policy.value for p in points), max(p.policy.value for p in points)
    for side, values in (
        ("below its lowest", [p.policy.value for p in added if p.policy.value < lowest]),
        ("above its highest", [p.policy.value for p in added if p.policy.value > highest]),
    ):
        if values:
            print(f"grid extended {side} value: {', '.join(f'{v:g}' for v in values)}", flush=True)
    return points + added
