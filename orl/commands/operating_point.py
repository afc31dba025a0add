"""`orl operating-point`: the matched-accuracy point (the policy's parameter, e.g. τ) chosen from a sweep
(docs/metrics.md)."""

from __future__ import annotations


def register(subparsers) -> None:
    from orl.eval.operating_point import DEFAULT_TOLERANCE

    p = subparsers.add_parser(
        "operating-point", help="choose the matched-accuracy threshold from a sweep",
        description="Matched accuracy (docs/metrics.md): the fastest threshold of --sweep that matches the "
        "--reference record (the AR target's greedy pass@1): its pass@1 is at least the reference's minus "
        "--tolerance AND the paired bootstrap over the problems does not show it worse (95% interval of the "
        "difference not below 0). Without a match, the most accurate point, marked unmatched; a chosen point at "
        "an end of the grid is marked (edge). Writes {policy, tau, pass_at_1, tpf, matched, edge, ...} as JSON "
        "(usable as --policy @FILE) and, with --quality-out, the chosen sweep point as a 'quality' record.",
    )
    p.add_argument("--sweep", required=True, help="records of `orl sweep`")
    p.add_argument("--reference", required=True, help="quality record of the reference system (the AR target)")
    p.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE,
                   help=f"pass@1 tolerance (default {DEFAULT_TOLERANCE} = 1 point)")
    p.add_argument("--out", required=True, help="operating point JSON")
    p.add_argument("--quality-out", default=None, help="also write the chosen point as a quality record")
    p.set_defaults(func=run_operating_point)


def _runs(record: dict, where: str):
    """The per-problem outcomes of a record, or InputError naming the file and the field."""
    from orl.errors import InputError
    from orl.eval.uncertainty import stack_runs

    entries = record.get("per_problem")
    if not entries:
        raise InputError(f"{where}: per_problem: expected per-problem outcomes (task_id, passed), got none; "
                         "matched accuracy is a paired test over the problems")
    return stack_runs([e["task_id"] for e in entries], [{"passed": [bool(e["passed"]) for e in entries]}])


def run_operating_point(args) -> int:
    from orl.decoding import Policy
    from orl.errors import InputError
    from orl.eval.operating_point import Candidate, choose_operating_point, edge_note
    from orl.io import atomic_write_json
    from orl.records import load_records, make_record, write_records

    if not 0 <= args.tolerance <= 1:
        raise InputError(f"--tolerance: expected a pass@1 difference in [0, 1], got {args.tolerance}")
    sweep = [r for r in load_records(args.sweep) if r["kind"] == "sweep" and r["status"] == "measured"]
    reference = [r for r in load_records(args.reference) if r["kind"] == "quality" and r["status"] == "measured"]
    if not sweep or not reference:
        raise InputError(f"{args.sweep if not sweep else args.reference}: no measured "
                         f"{'sweep' if not sweep else 'quality'} record")
    reference_record = max(reference, key=lambda r: r["created"])
    policies = [Policy.from_record(r["policy"], f"{args.sweep}: policy") for r in sweep]
    candidates = [Candidate(p, r["metrics"]["pass_at_1"], r["metrics"]["tpf"],
                            _runs(r, f"{args.sweep} ({p.parameter}={p.value:g})"))
                  for p, r in zip(policies, sweep, strict=True)]  # fmt: skip
    point = choose_operating_point(candidates, _runs(reference_record, args.reference), args.tolerance)
    atomic_write_json(args.out, point.to_dict())
    if args.quality_out:
        chosen = next(r for p, r in zip(policies, sweep, strict=True) if p.value == point.value)
        record = make_record(
            "quality", system=chosen["system"], engine=chosen["engine"], model=chosen["model"],
            policy=chosen["policy"], suite=chosen["suite"], n_problems=chosen["n_problems"],
            metrics={k: v for k, v in chosen["metrics"].items() if k in ("pass_at_1", "tpf", "nfe_mean")},
            per_problem=chosen["per_problem"],
            extra={"source": f"{args.sweep}: sweep point {point.parameter}={point.value:g}", "matched": point.matched,
                   "edge": point.edge, "grid": point.grid, "matching": point.matching, "why": point.why,
                   "reference": {"file": str(args.reference), "system": reference_record["system"],
                                 "engine": reference_record["engine"]},
                   "reference_pass_at_1": point.reference_pass_at_1, "tolerance": point.tolerance,
                   "difference": point.difference, "difference_lo": point.difference_lo,
                   "difference_hi": point.difference_hi},
        )  # fmt: skip
        write_records(args.quality_out, [record])
    status = "matched" if point.matched else "NOT matched (most accurate point used)"
    edge = edge_note(point.edge, point.grid, policies[0].rule.symbol)
    print(f"operating point {point.policy}: pass@1={point.pass_at_1:.4f} tpf={point.tpf:.3f} "
          f"(reference {point.reference_pass_at_1:.4f} - {point.tolerance}; {status}; {point.why})"
          + (f"; {edge}" if edge else ""))
    return 0
