"""`orl render`, `orl submit`, `orl regress`: tables and figures, hardware submissions, the regression gate."""

from __future__ import annotations

import argparse
import sys


def register(subparsers) -> None:
    render = subparsers.add_parser(
        "render",
        help="render Tables 1-5 (md, tex, csv), figures and index.md from record files",
        description="Read every record under --results (and contributed results under --hardware for "
        "Table 4), set them beside the paper's claims and write reports/<profile>/tableN.{md,tex,csv}, "
        "figures/*.{png,pdf} (with --figures) and index.md.",
    )
    render.add_argument("--profile", required=True, help="profile name (smoke, tiny, paper)")
    render.add_argument("--results", help="folder of record files (default: results/<profile>)")
    render.add_argument("--out", help="report folder (default: reports/<profile>)")
    render.add_argument("--tables", default="1,2,3,4,5",
                        help="comma-separated table numbers, or 'none' (default: all)")
    render.add_argument("--figures", action="store_true", help="also draw the figures (PNG and PDF)")
    render.add_argument("--no-index", action="store_true", help="do not (re)write index.md")
    render.add_argument("--claims", help="claims ledger (default: results/paper/claims.yaml)")
    render.add_argument("--hardware", help="contributed results for Table 4 (default: results/hardware)")
    render.set_defaults(func=run_render)

    submit = subparsers.add_parser(
        "submit",
        help="validate a contributor's records and file them under results/hardware/<gpu>/",
        description="Check RESULTS.jsonl (schema, complete environment block, plausible values, one GPU, "
        "one commit) and file it as <root>/<gpu-slug>/<date>-<sha>.jsonl for Table 4. Never overwrites; "
        "writes nothing on any failure.",
    )
    submit.add_argument("results_file", metavar="RESULTS.jsonl")
    submit.add_argument("--root", help="where submissions are filed (default: results/hardware)")
    submit.set_defaults(func=run_submit)

    regress = subparsers.add_parser(
        "regress",
        help="compare a run's records with a baseline; non-zero exit on a regression",
        description="Pair records by (kind, system, engine, policy, suite, precision). Deterministic metrics "
        "(tpf, nfe_mean, pass_at_1, tokens, ...) must match exactly or within --tolerance; timing metrics are "
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
    regress.add_argument("--timing-threshold", type=float, default=1.5,
                         help="largest allowed slowdown relative to the reference timing (default 1.5)")  # fmt: skip
    regress.add_argument("--reference-system", default=None,
                         help="system name of the reference timing record (default 'reference timing')")  # fmt: skip
    regress.add_argument("--strict", action="store_true",
                         help="also fail on improvements and neutral changes of deterministic metrics")  # fmt: skip
    regress.set_defaults(func=run_regress)


def _tables(text: str) -> tuple[int, ...]:
    from orl.errors import ConfigError

    if text.strip() == "none":
        return ()
    try:
        tables = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ConfigError(f"--tables {text!r}: expected comma-separated numbers from 1 to 5") from None
    if not tables or any(t not in (1, 2, 3, 4, 5) for t in tables):
        raise ConfigError(f"--tables {text!r}: expected comma-separated numbers from 1 to 5")
    return tables


def run_render(args: argparse.Namespace) -> int:
    from orl.records.submit import DEFAULT_HARDWARE_ROOT
    from orl.report.build import render_report
    from orl.report.claims import DEFAULT_CLAIMS_PATH

    written = render_report(
        args.profile,
        args.results or f"results/{args.profile}",
        args.out or f"reports/{args.profile}",
        tables=_tables(args.tables),
        figures=args.figures,
        index=not args.no_index,
        claims_path=args.claims or DEFAULT_CLAIMS_PATH,
        hardware_root=args.hardware or DEFAULT_HARDWARE_ROOT,
    )
    for path in written:
        print(f"wrote {path}")
    return 0


def run_submit(args: argparse.Namespace) -> int:
    from orl.records.submit import DEFAULT_HARDWARE_ROOT, submit

    target = submit(args.results_file, args.root or DEFAULT_HARDWARE_ROOT)
    print(f"filed {args.results_file} as {target}")
    return 0


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
