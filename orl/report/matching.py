"""Matched accuracy in the tables (docs/metrics.md): each line against the AR target's greedy pass@1.

The reference is the quality record of orl.rows.MATCH_REFERENCE on the line's suite. A line's
pass@1 matches when it is within the tolerance of the reference's and the paired test does not
show it worse (orl/eval/operating_point.py: match). The tolerance is the one the DAG's
`orl operating-point` jobs used (their records' extra.tolerance), else the default. A swept
line also says where its chosen threshold sits in its grid: a point at the lowest τ has a TPF
that is only a lower bound of the matched TPF.
"""

from __future__ import annotations

from orl import rows
from orl.decoding.policy import Policy
from orl.eval.operating_point import DEFAULT_TOLERANCE, edge_note, match
from orl.eval.uncertainty import Runs
from orl.report import stats
from orl.report.measure import Measured
from orl.report.select import Want, resolve

REFERENCE = rows.ROW[rows.MATCH_REFERENCE]


def reference_runs(records: list[dict], suite: str | None) -> Runs | None:
    """Per-problem outcomes of the AR target's latest measured quality record on `suite`."""
    want = Want(REFERENCE.system, REFERENCE.engine, ("quality",))
    record = resolve(records, want, suite).primary
    return stats.problem_runs([record]) if record is not None else None


def tolerance_of(records: list[dict]) -> float:
    """The matching tolerance the operating-point records used (the latest one), else the default."""
    found = [
        r for r in records if r["kind"] == "quality" and (r.get("extra") or {}).get("tolerance") is not None
    ]
    if not found:
        return DEFAULT_TOLERANCE
    return float(max(found, key=lambda r: r["created"])["extra"]["tolerance"])


def _policy(record: dict) -> Policy | None:
    """The record's commit policy where it is an operating point's, else None.

    An operating point is a value of a confidence rule's parameter (τ, f: Policy.bound is defined); a
    rank cut (fixed:k) is a row's own fixed setting (orl.rows Row.policy), which its name already says.
    """
    block = record.get("policy")
    policy = Policy.from_record(block, f"{record.get('system')}: policy") if block else None
    return policy if policy is not None and policy.rule.bound is not None else None


def _edge(record: dict, sweep: list[dict]) -> str | None:
    """Whether the quality record's point is an end of its sweep's grid (a phrase), else None."""
    policy = _policy(record)
    grid = sorted(p.value for p in map(_policy, sweep) if p is not None and policy and p.name == policy.name)
    if policy is None or len(grid) < 2:
        return None
    extra, symbol = record.get("extra") or {}, policy.rule.symbol
    if "edge" in extra:  # the operating-point record's own verdict (highest only where nothing matched)
        return edge_note(extra["edge"], grid, symbol)
    if policy.value == grid[0]:
        return edge_note("lowest", grid, symbol)
    if policy.value == grid[-1]:
        return edge_note("highest", grid, symbol)
    return None


def operating_point_text(line: Measured) -> str | None:
    """Each seed's chosen point (τ=0.9) and where it sits in its sweep's grid (seeds choosing alike
    grouped)."""
    groups: dict[tuple, list] = {}
    for position, (seed, record) in enumerate(
        zip(line.seeds, line.records.get("quality") or [], strict=False)
    ):
        policy = _policy(record)
        sweep = line.sweeps[position] if position < len(line.sweeps) else []
        if policy is not None:
            groups.setdefault((policy.label(), _edge(record, sweep) if sweep else None), []).append(seed)
    parts = []
    for (label, edge), seeds in groups.items():
        named = ", ".join(f"s{seed}" for seed in seeds if seed is not None)
        parts.append(
            label + (f" ({named})" if named and len(groups) > 1 else "") + (f": {edge}" if edge else "")
        )
    return "; ".join(parts) or None


def matched_columns(
    line: Measured, reference: Runs | None, tolerance: float, *, is_reference: bool = False
) -> dict:
    """`matched` (text) and `pass_at_1_diff`: the line's pass@1 minus the AR target's, paired."""
    out = {"matched": None, **stats.comparison_columns("pass_at_1_diff", None)}
    if not line.measured or not line.records.get("quality"):
        return out
    if is_reference:
        out["matched"] = "the reference (AR target, greedy)"
        return out
    if reference is None or line.problems is None:
        out["matched"] = "not tested: no per-problem data of the line or of the AR target"
        return out
    result = match(line.problems, reference, tolerance)
    out.update(stats.comparison_columns("pass_at_1_diff", result.difference))
    out["matched"] = "yes" if result.matched else result.why.replace("not matched: ", "no: ")
    return out
