"""`orl regress`: compare a run's records with a baseline; non-zero exit on a regression."""

from __future__ import annotations

import argparse
import sys


def register(subparsers) -> None:
    regress = subparsers.add_parser(
        "regress",
        help="compare a run's records with a baseline; non-zero exit on a regression",
        description="Pair records by (kind, system, engine, policy, suite, precision). Deterministic metrics "
        "(tpf, nfe_mean, pass_at_1, tokens, ...) must match exactly or within --tolerance; timing metrics "
        "are "
        "normalised to a reference timing measured in the same run and may not worsen by more than "
        "--timing-threshold.",
    )
    regress.add_argument("--baseline", required=True, metavar="FILE", help="baseline record file (.jsonl)")
    regress.add_argument("--current", required=True, metavar="FILE", help="current record file (.jsonl)")
    regress.add_argument(
        "--tolerance", action="append", metavar="X|METRIC=X",
        help="absolute tolerance for deterministic metrics: a number for all, or metric=number "
        "(repeatable; default exact)",
    )  # fmt: skip
    regress.add_argument(
        "--timing-threshold",
        type=float,
        default=1.5,
        help="largest allowed slowdown relative to the reference timing (default: 1.5)",
    )
    regress.add_argument(
        "--reference-system",
        default=None,
        help="system name of the reference timing record (default 'reference timing')",
    )
    regress.add_argument(
        "--strict",
        action="store_true",
        help="also fail on improvements and neutral changes of deterministic metrics",
    )
    regress.set_defaults(func=run_regress)


def run_regress(args: argparse.Namespace) -> int:
    from orl.errors import ConfigError
    from orl.records import load_records
    from orl.records.regress import DEFAULT_REFERENCE_SYSTEM, compare_runs, parse_tolerances

    if args.timing_threshold < 1:
        raise ConfigError(f"--timing-threshold {args.timing_threshold}: must be >= 1 (a slowdown factor)")
    default, per_metric = parse_tolerances(args.tolerance)
    report = compare_runs(
        load_records(args.baseline),
        load_records(args.current),
        tolerances=per_metric,
        default_tolerance=default,
        timing_threshold=args.timing_threshold,
        reference_system=args.reference_system or DEFAULT_REFERENCE_SYSTEM,
        names=(str(args.baseline), str(args.current)),
    )
    sys.stdout.write(report.text())
    return 1 if report.failed(strict=args.strict) else 0
