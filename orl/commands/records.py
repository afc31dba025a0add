"""`orl records validate`: check a record file against the schema."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    records = subparsers.add_parser(
        "records",
        help="inspect result record files",
        description="Work with result record files (.jsonl, one record per line, orl/records/record.schema.json).",
    )
    records_sub = records.add_subparsers(dest="records_command", metavar="ACTION")
    validate = records_sub.add_parser(
        "validate",
        help="check a record file against the schema",
        description="Validate every line of a record file; exit non-zero with the line and field of the first "
        "error, or when the file holds no record.",
    )
    validate.add_argument("file", type=Path, help="records file (.jsonl)")
    validate.set_defaults(func=run_validate)
    records.set_defaults(func=lambda args: (records.print_help(), 2)[1])


def run_validate(args: argparse.Namespace) -> int:
    from orl.errors import InputError
    from orl.records import load_records

    records = load_records(args.file)
    if not records:
        raise InputError(f"{args.file}: no records (the file is empty or holds only blank lines)")
    print(f"{args.file}: {len(records)} valid records")
    return 0
