"""`orl operating-point`: the matched-accuracy point (the policy's parameter, e.g. τ) chosen from a sweep
(docs/metrics.md)."""

from __future__ import annotations


def register(subparsers) -> None:
    from orl.eval.operating_point import DEFAULT_TOLERANCE

    p = subparsers.add_parser(
        "operating-point",
        help="choose the matched-accuracy threshold from a sweep",
        description="Matched accuracy (docs/metrics.md): the fastest threshold of --sweep that matches the "
        "--reference record (the AR target's greedy pass@1): its pass@1 is at least the reference's minus "
        "--tolerance AND the paired bootstrap over the problems does not show it worse (95% interval of the "
        "difference not below 0). Without a match, the most accurate point, marked unmatched; a chosen "
        "point at "
        "an end of the grid is marked (edge). Writes {policy, tau, pass_at_1, tpf, matched, edge, ...} as "
        "JSON "
        "(usable as --policy @FILE) and, with --quality-out, the chosen sweep point as a 'quality' record.",
    )
    p.add_argument("--sweep", required=True, help="records of `orl sweep`")
    p.add_argument(
        "--reference", required=True, help="quality record of the reference system (the AR target)"
    )
    p.add_argument(
        "--tolerance",
        type=float,
        default=DEFAULT_TOLERANCE,
        help=f"pass@1 tolerance (default {DEFAULT_TOLERANCE} = 1 point)",
    )
    p.add_argument("--out", required=True, help="operating point JSON")
    p.add_argument("--quality-out", default=None, help="also write the chosen point as a quality record")
    p.set_defaults(func=run_operating_point)


def run_operating_point(args) -> int:
    from orl.errors import InputError
    from orl.eval.operating_point import (
        candidates_of,
        check_same_problems,
        choose_operating_point,
        outcomes,
        point_line,
        point_quality_record,
        read_reference,
    )
    from orl.io import atomic_write_json
    from orl.records import load_records, write_records

    if not 0 <= args.tolerance <= 1:
        raise InputError(f"--tolerance: expected a pass@1 difference in [0, 1], got {args.tolerance}")
    sweep = [r for r in load_records(args.sweep) if r["kind"] == "sweep" and r["status"] == "measured"]
    if not sweep:
        raise InputError(f"{args.sweep}: no measured sweep record")
    reference_record = read_reference(args.reference)
    check_same_problems(sweep, reference_record, args.sweep, args.reference)
    candidates = candidates_of(sweep, args.sweep)
    point = choose_operating_point(candidates, outcomes(reference_record, args.reference), args.tolerance)
    atomic_write_json(args.out, point.to_dict())
    if args.quality_out:
        chosen = next(r for c, r in zip(candidates, sweep, strict=True) if c.value == point.value)
        write_records(
            args.quality_out,
            [
                point_quality_record(
                    point, chosen, reference_record, sweep_file=args.sweep, reference_file=args.reference
                )
            ],
        )
    print(point_line(point, candidates[0].policy))
    return 0
