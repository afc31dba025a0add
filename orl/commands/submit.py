"""`orl submit`: validate a contributor's records and file them under results/hardware/<gpu>/."""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    submit = subparsers.add_parser(
        "submit",
        help="validate a contributor's records and file them under results/hardware/<gpu>/",
        description="Check RESULTS.jsonl (schema, complete environment block, plausible values, one GPU, "
        "one commit) and file it as <root>/<gpu-slug>/<date>-<sha>.jsonl for Table 4. Never overwrites; "
        "writes nothing on any failure. TPF follows the rule `orl records validate` applies too (0 to 1024; "
        "below 1 is valid: docs/metrics.md).",
    )
    submit.add_argument("results_file", metavar="RESULTS.jsonl", help="record file of one GPU and one commit")
    submit.add_argument("--root", help="where submissions are filed (default: results/hardware)")
    submit.set_defaults(func=run_submit)


def run_submit(args: argparse.Namespace) -> int:
    from orl.records.submit import DEFAULT_HARDWARE_ROOT, submit

    target = submit(args.results_file, args.root or DEFAULT_HARDWARE_ROOT)
    print(f"filed {args.results_file} as {target}")
    return 0
