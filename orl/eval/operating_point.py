"""Matched accuracy (docs/method.md §4): which sweep points match a reference system, and the one chosen.

A candidate matches the reference when both hold:
    1. its pass@1 is within the tolerance: pass@1 >= reference pass@1 - tolerance;
    2. the paired test does not show it worse at α = 0.05: the 95% paired-bootstrap interval of
       (candidate - reference) over the problems both solved or failed is not entirely below 0.
The operating point of a sweep is the fastest matching point (highest TPF; ties: higher pass@1);
where none matches, the most accurate point (ties: higher TPF), marked unmatched. A chosen point
at an end of the grid is marked: at the lowest τ a faster point may still match (its TPF is a
lower bound of the matched TPF); unmatched at the highest τ, a stricter τ might match. A sweep
varies its policy's parameter (Policy.parameter: τ of the thresholds), whichever policy it is.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from orl.decoding.policy import Policy
from orl.decoding.verify import Verification
from orl.errors import InputError
from orl.eval.uncertainty import Estimate, Runs, paired, ratio_of_sums, stack_runs
from orl.io import atomic_write_json

DEFAULT_TOLERANCE = 0.01  # one point of pass@1: the configs' match_tolerance
EPSILON = 1e-9  # "exactly reference - tolerance" (e.g. 1 problem in 100) is within it


@dataclass(frozen=True)
class Match:
    matched: bool
    within_tolerance: bool
    shown_worse: bool
    difference: Estimate  # candidate - reference pass@1, paired over problems
    why: str  # one line a table can print


def match(candidate: Runs, reference: Runs, tolerance: float = DEFAULT_TOLERANCE) -> Match:
    """Whether `candidate` matches `reference` (module docstring); both need a `passed` array."""
    ids = [problem for problem in reference.ids if problem in set(candidate.ids)]
    if not ids:
        raise InputError("matched accuracy: the candidate and the reference share no problem")
    cand, ref = candidate.on(ids), reference.on(ids)
    diff = paired(
        ratio_of_sums(cand, "passed"), cand.n_seeds, ratio_of_sums(ref, "passed"), ref.n_seeds, len(ids)
    )
    cand_pass, ref_pass = float(cand.values["passed"].mean()), float(ref.values["passed"].mean())
    within = cand_pass >= ref_pass - tolerance - EPSILON
    worse = diff.hi is not None and diff.hi < 0
    if within and not worse:
        why = f"matched: {cand_pass:.3f} vs reference {ref_pass:.3f} (tolerance {tolerance:g})"
    elif not within:
        why = f"not matched: {cand_pass:.3f} < reference {ref_pass:.3f} - {tolerance:g}"
    else:
        why = (
            f"not matched: shown worse than the reference (difference {diff.value:+.3f}, "
            f"95% interval {diff.lo:+.3f} to {diff.hi:+.3f})"
        )
    return Match(within and not worse, within, worse, diff, why)


@dataclass(frozen=True)
class Candidate:
    """One sweep point: its policy (the swept parameter's value), pass@1, TPF and per-problem outcomes."""

    policy: Policy | Verification  # a τ sweep's commit policy, or a relaxed δ sweep's rule
    pass_at_1: float
    tpf: float
    runs: Runs  # `passed` at least, over the problems of the sweep

    @property
    def value(self) -> float:
        return self.policy.value


@dataclass
class OperatingPoint:
    policy: str  # e.g. "threshold:0.8"
    parameter: str  # the swept parameter (Policy.parameter): the JSON's key for `value` ("tau")
    value: float
    pass_at_1: float
    tpf: float
    reference_pass_at_1: float
    tolerance: float
    matched: bool  # False when no point matches: the most accurate one is used
    edge: str | None  # "lowest" / "highest": the chosen value is an end of the grid (module docstring)
    difference: float  # chosen - reference pass@1
    difference_lo: float | None
    difference_hi: float | None
    why: str
    grid: list[float]  # every value of the sweep
    matching: list[float]  # the values that match

    def to_dict(self) -> dict:
        """The operating-point file: {policy, <parameter>: value, pass_at_1, ...} (`--policy @FILE` reads
        it)."""
        fields = asdict(self)
        fields.pop("parameter")
        return {"policy": fields.pop("policy"), self.parameter: fields.pop("value"), **fields}


def outcomes(record: dict, where: str) -> Runs:
    """The per-problem outcomes of a record, or InputError naming the file and the field."""
    entries = record.get("per_problem")
    if not entries:
        raise InputError(
            f"{where}: per_problem: expected per-problem outcomes (task_id, passed), got none; "
            "matched accuracy is a paired test over the problems"
        )
    return stack_runs([e["task_id"] for e in entries], [{"passed": [bool(e["passed"]) for e in entries]}])


def candidates_of(records: Sequence[dict], where: str) -> list[Candidate]:
    """The sweep points of measured `sweep` records read from the file `where`."""
    policies = [Policy.from_record(r["policy"], f"{where}: policy") for r in records]
    return [
        Candidate(
            p,
            r["metrics"]["pass_at_1"],
            r["metrics"]["tpf"],
            outcomes(r, f"{where} ({p.parameter}={p.value:g})"),
        )
        for p, r in zip(policies, records, strict=True)
    ]


def _one_rule(candidates: Sequence[Candidate]) -> str:
    """The policy every candidate sweeps (a sweep varies one parameter of one rule)."""
    names = {c.policy.name for c in candidates}
    if len(names) != 1:
        raise InputError(
            f"operating point: a sweep varies one policy's parameter; got {', '.join(sorted(names))}"
        )
    return names.pop()


def choose_operating_point(
    candidates: Sequence[Candidate], reference: Runs, tolerance: float = DEFAULT_TOLERANCE
) -> OperatingPoint:
    """The fastest matching candidate, else the most accurate one (module docstring)."""
    if not candidates:
        raise InputError("operating point: no sweep points to choose from")
    _one_rule(candidates)
    ref_pass = float(np.asarray(reference.values["passed"]).mean())
    matches = {c.value: match(c.runs, reference, tolerance) for c in candidates}
    eligible = [c for c in candidates if matches[c.value].matched]
    if eligible:
        chosen = max(eligible, key=lambda c: (c.tpf, c.pass_at_1))
    else:
        chosen = max(candidates, key=lambda c: (c.pass_at_1, c.tpf))
    grid = sorted(c.value for c in candidates)
    edge = None
    if len(grid) > 1 and chosen.value == grid[0]:
        edge = "lowest"
    elif len(grid) > 1 and chosen.value == grid[-1] and not eligible:
        edge = "highest"
    result = matches[chosen.value]
    return OperatingPoint(
        policy=str(chosen.policy),
        parameter=chosen.policy.parameter,
        value=chosen.value,
        pass_at_1=chosen.pass_at_1,
        tpf=chosen.tpf,
        reference_pass_at_1=ref_pass,
        tolerance=tolerance,
        matched=bool(eligible),
        edge=edge,
        difference=result.difference.value,
        difference_lo=result.difference.lo,
        difference_hi=result.difference.hi,
        why=result.why,
        grid=grid,
        matching=sorted(c.value for c in eligible),
    )


EXTEND_LIMIT = 4  # values added beyond each end of a sweep's grid at most (grid-edge extension)
HALVINGS = 4  # a step that leaves the parameter's range is halved at most this many times


def next_value(grid: Sequence[float], side: str, valid: Callable[[float], bool]) -> float | None:
    """The value one step beyond the grid's `side` end ("lowest" / "highest"), the step being the spacing
    of the grid's two values at that end. Where that value leaves the parameter's range, the step is
    halved until it does not (δ's grid 0.3, 0.1 steps to -0.1, then 0.0, then 0.05: (0, 1] is approached
    without end); None when no halving gives a new valid value (τ = 1 at the top)."""
    end, step = (grid[0], grid[0] - grid[1]) if side == "lowest" else (grid[-1], grid[-1] - grid[-2])
    for _ in range(HALVINGS + 1):
        value = round(end + step, 6)
        if value not in grid and valid(value):
            return value
        step /= 2
    return None


def extend_grid(
    candidates: Sequence[Candidate],
    measure: Callable[[Policy | Verification], Candidate],
    reference: Runs,
    tolerance: float = DEFAULT_TOLERANCE,
    limit: int = EXTEND_LIMIT,
) -> list[Candidate]:
    """Grid-edge extension (docs/method.md §4), one value at a time, measured with `measure`:
    - the chosen point is matched at the grid's lowest value (for the thresholds and δ the fastest end: a
      faster point may still match): the value one step below, until accuracy falls off below the chosen
      point;
    - no point matches and the most accurate is the grid's highest value (a stricter value may match): the
      value one step above, until one matches or the most accurate point lies inside the grid.
    The step is `next_value`'s (halved at the parameter's range: τ and δ in (0, 1]). It stops where no
    value is left in the range, or after `limit` added values on a side. Returns the added candidates, in
    the order measured."""
    added: list[Candidate] = []
    counts = {"lowest": 0, "highest": 0}
    while True:
        everything = [*candidates, *added]
        point = choose_operating_point(everything, reference, tolerance)
        side = point.edge
        if side is None or len(point.grid) < 2 or counts[side] >= limit:
            break
        if side == "lowest" and not point.matched:
            break  # unmatched at the fastest end: every stricter value was already measured
        policy = everything[0].policy
        value = next_value(point.grid, side, policy.valid_value)
        if value is None:
            break
        counts[side] += 1
        added.append(measure(policy.with_value(value, "grid extension")))
    return added


def read_reference(path: str | Path) -> dict:
    """The latest measured `quality` record of a reference file (the AR target's pass@1), or InputError."""
    from orl.records import load_records

    measured = [r for r in load_records(path) if r["kind"] == "quality" and r["status"] == "measured"]
    if not measured:
        raise InputError(f"{path}: no measured quality record (the reference's per-problem outcomes)")
    return max(measured, key=lambda r: r["created"])


def check_same_problems(sweep: Sequence[dict], reference: dict, sweep_file, reference_file) -> None:
    """The sweep's points and the reference measured one suite's split: the paired test compares them
    problem by problem (a dev sweep needs a dev reference; the chosen point is measured on test after)."""
    from orl.records import record_split

    measured = sorted({(r["suite"], record_split(r)) for r in sweep}, key=str)
    if len(measured) > 1:
        raise InputError(f"{sweep_file}: suite/split: the sweep's records measured {measured}; expected one")
    theirs = (reference["suite"], record_split(reference))
    if theirs != measured[0]:
        raise InputError(
            f"{reference_file}: suite/split: the reference measured {theirs[0]} {theirs[1]}, "
            f"the sweep {measured[0][0]} {measured[0][1]}; matching compares the same problems: "
            "measure the reference on the sweep's split"
        )


def edge_note(edge: str | None, grid: Sequence[float], symbol: str = "τ") -> str | None:
    """What a chosen point at an end of the grid means, in one phrase (None when it is inside); `symbol`
    names the swept parameter (Policy.rule.symbol: τ and δ, both in (0, 1], 1 the strictest)."""
    span = f"{min(grid):g}-{max(grid):g}" if grid else "?"
    if edge == "lowest":
        return f"lowest {symbol} of the grid {span}: the matched TPF may be higher (a lower bound)"
    if edge == "highest" and grid and max(grid) >= 1.0:
        return f"highest {symbol} of the grid {span}, the strictest: no {symbol} matches"
    if edge == "highest":
        return f"highest {symbol} of the grid {span}: a stricter {symbol} might match"
    return None


def write_strict_point(source: str | Path, target: str | Path) -> None:
    """The operating-point file `source` at its policy's strict variant (threshold:τ -> strict-threshold:τ),
    written to `target` with `from` naming the source: Table 3's rows compare with SGLang, whose
    LowConfidence rule commits c > τ (workflows/rules/evaluate.smk, rule strict_point)."""
    point = json.loads(Path(source).read_text())
    spec = point.get("policy")
    if not isinstance(spec, str):
        raise InputError(f"{source}: policy: expected a spec such as 'threshold:0.9', got {spec!r}")
    try:
        strict = Policy.parse(spec).strict_variant(f"{source}: policy")
    except InputError as exc:
        raise InputError(f"{source}: Table 3's strict variant: {exc}") from None
    atomic_write_json(target, {**point, "policy": str(strict), "from": str(source)})


# What a chosen sweep point's quality record keeps of its metrics (tokens/s belongs to the latency records).
QUALITY_METRICS = (
    "pass_at_1",
    "tpf",
    "nfe_mean",
    "tpf_prefill",
    "tpf_commit",
    "tpf_ceiling",
    "nfe_prefill_mean",
    "blocks_mean",
    "block_size",
)


def point_quality_record(
    point: OperatingPoint, chosen: dict, reference: dict, *, sweep_file: str, reference_file: str
) -> dict:
    """The chosen sweep point as a `quality` record: what the tables read as the row's pass@1 and TPF,
    with the matching verdict and its reference."""
    from orl.records import make_record, record_split

    return make_record(
        "quality",
        system=chosen["system"],
        engine=chosen["engine"],
        model=chosen["model"],
        policy=chosen["policy"],
        suite=chosen["suite"],
        split=record_split(chosen),
        n_problems=chosen["n_problems"],
        metrics={k: v for k, v in chosen["metrics"].items() if k in QUALITY_METRICS},
        per_problem=chosen["per_problem"],
        extra={
            "source": f"{sweep_file}: sweep point {point.parameter}={point.value:g}",
            "matched": point.matched,
            "edge": point.edge,
            "grid": point.grid,
            "matching": point.matching,
            "why": point.why,
            "reference": {
                "file": str(reference_file),
                "system": reference["system"],
                "engine": reference["engine"],
            },
            "reference_pass_at_1": point.reference_pass_at_1,
            "tolerance": point.tolerance,
            "difference": point.difference,
            "difference_lo": point.difference_lo,
            "difference_hi": point.difference_hi,
        },
    )


def point_line(point: OperatingPoint, policy: Policy) -> str:
    """`orl operating-point`'s printed line: the choice, its pass@1 and TPF, the verdict, an edge's note."""
    status = "matched" if point.matched else "NOT matched (most accurate point used)"
    edge = edge_note(point.edge, point.grid, policy.rule.symbol)
    return (
        f"operating point {point.policy}: pass@1={point.pass_at_1:.4f} tpf={point.tpf:.3f} "
        f"(reference {point.reference_pass_at_1:.4f} - {point.tolerance}; {status}; {point.why})"
        + (f"; {edge}" if edge else "")
    )
