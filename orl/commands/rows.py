"""`orl rows`: the system names each table reads from the records, with the engine and what each needs."""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "rows",
        help="list the system names each table expects in the records (orl/rows.py)",
        description="Print, table by table, every line's system name (the `system` field its records must "
        "carry, e.g. `orl eval-quality --system NAME`), its engine, the row key of its files under "
        "results/<profile>/ and what it needs to run. A record whose system is listed nowhere appears in no "
        "table.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--table", default=None, choices=["1", "2", "3", "4", "5"], help="one table only (default: all)"
    )
    p.set_defaults(func=run_rows)


def run_rows(args) -> int:
    from orl import rows

    tables = [int(args.table)] if args.table else list(rows.TABLES)
    for table in tables:
        print(f"Table {table}")
        for row, line in rows.lines(table):
            label = f" [{line.label}]" if line.label else ""
            needs = row.needs_of(line)
            print(
                f"  {row.system!r}{label}  engine {row.engine_of(line)}  key {row.key}"
                + (f"  ({needs})" if needs else "")
            )
    return 0
