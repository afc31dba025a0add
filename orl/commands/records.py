"""`orl records validate`: check a record file against the schema."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    records = subparsers.add_parser(
        "records",
        help="inspect result record files",
        description="Work with result record files (.jsonl, one record per line, "
        "orl/records/record.schema.json).",
    )
    records_sub = records.add_subparsers(dest="records_command", metavar="ACTION")
    validate = records_sub.add_parser(
        "validate",
        help="check a record file against the schema",
        description="Validate every line of a record file against the schema and the value rules `orl "
        "submit` "
        "applies too (TPF in [0, 1024], docs/metrics.md); exit non-zero with the line and field of the first "
        "error, or when the file holds no record.",
    )
    validate.add_argument("file", type=Path, help="records file (.jsonl)")
    validate.set_defaults(func=run_validate)
    show = records_sub.add_parser(
        "show",
        help="one line per record: kind, system, engine, status and its main metrics",
        description="Print each record of a file (validated first) as one line: line number, kind, system, "
        "engine, suite, status, then its metrics rounded to 4 significant digits.",
    )
    show.add_argument("file", type=Path, help="records file (.jsonl)")
    show.set_defaults(func=run_show)
    records.set_defaults(func=lambda args: (records.print_help(), 2)[1])


def run_validate(args: argparse.Namespace) -> int:
    from orl.errors import InputError
    from orl.records import load_records
    from orl.records.rules import record_value_problems

    records = load_records(args.file)
    if not records:
        raise InputError(f"{args.file}: no records (the file is empty or holds only blank lines)")
    problems = [
        f"{args.file} line {i}: {p}" for i, r in enumerate(records, 1) for p in record_value_problems(r)
    ]
    if problems:  # the same value rules `orl submit` applies (orl/records/rules.py)
        raise InputError(problems[0] + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
    print(f"{args.file}: {len(records)} valid records")
    return 0


def run_show(args: argparse.Namespace) -> int:
    from orl.records import load_records

    for i, record in enumerate(load_records(args.file), 1):
        metrics = " ".join(
            f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
            for k, v in (record.get("metrics") or {}).items()
            if v is not None
        )
        print(
            f"{i}: {record['kind']} | {record['system']} | {record['engine']} | "
            f"{record.get('suite') or '-'} | "
            f"{record['status']}" + (f" | {metrics}" if metrics else "")
        )
    return 0
