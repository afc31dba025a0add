"""`orl operating-point`: the matched-accuracy threshold chosen from a sweep (METHOD.md §4)."""

from __future__ import annotations


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "operating-point", help="choose the matched-accuracy threshold from a sweep",
        description="Matched accuracy (METHOD.md §4): the fastest threshold of --sweep whose pass@1 is at least "
        "the --reference record's pass@1 minus --tolerance. Writes {policy, tau, pass_at_1, tpf, ...} as JSON "
        "(usable as --policy @FILE) and, with --quality-out, the chosen sweep point as a 'quality' record.",
    )
    p.add_argument("--sweep", required=True, help="records of `orl sweep`")
    p.add_argument("--reference", required=True, help="quality record of the reference system (e.g. fixed:1)")
    p.add_argument("--tolerance", type=float, default=0.01, help="pass@1 tolerance (default 0.01 = 1 point)")
    p.add_argument("--out", required=True, help="operating point JSON")
    p.add_argument("--quality-out", default=None, help="also write the chosen point as a quality record")
    p.set_defaults(func=run_operating_point)


def run_operating_point(args) -> int:
    from orl.decoding import Policy
    from orl.errors import InputError
    from orl.eval.operating_point import choose_operating_point
    from orl.io import atomic_write_json
    from orl.records import load_records, make_record, write_records

    sweep = [r for r in load_records(args.sweep) if r["kind"] == "sweep" and r["status"] == "measured"]
    reference = [r for r in load_records(args.reference) if r["kind"] == "quality" and r["status"] == "measured"]
    if not sweep or not reference:
        raise InputError(f"{args.sweep if not sweep else args.reference}: no measured "
                         f"{'sweep' if not sweep else 'quality'} record")
    taus = [Policy.from_record(r["policy"], f"{args.sweep}: policy").value for r in sweep]
    points = [(tau, r["metrics"]["pass_at_1"], r["metrics"]["tpf"]) for tau, r in zip(taus, sweep, strict=True)]
    point = choose_operating_point(points, reference[0]["metrics"]["pass_at_1"], args.tolerance)
    atomic_write_json(args.out, point.to_dict())
    if args.quality_out:
        chosen = next(r for tau, r in zip(taus, sweep, strict=True) if tau == point.tau)
        record = make_record(
            "quality", system=chosen["system"], engine=chosen["engine"], model=chosen["model"],
            policy=chosen["policy"], suite=chosen["suite"], n_problems=chosen["n_problems"],
            metrics={k: v for k, v in chosen["metrics"].items() if k in ("pass_at_1", "tpf", "nfe_mean")},
            per_problem=chosen["per_problem"],
            extra={"source": f"{args.sweep}: sweep point tau={point.tau:g}", "matched": point.matched,
                   "reference_pass_at_1": point.reference_pass_at_1, "tolerance": point.tolerance},
        )
        write_records(args.quality_out, [record])
    status = "matched" if point.matched else "NOT matched (most accurate point used)"
    print(f"operating point {point.policy}: pass@1={point.pass_at_1:.4f} tpf={point.tpf:.3f} "
          f"(reference {point.reference_pass_at_1:.4f} - {point.tolerance}; {status})")
    return 0
