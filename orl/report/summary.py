"""What `make reproduce` did, in three lines: where the table is, how much of it was measured, and how
many record files this run wrote (a fresh clone's run only checks the committed ones). With --against
(the table's CSV copied before the run), a run that measured again also says which lines reproduced
their decoded figures exactly (orl/report/reproduced.py).

    python -m orl.report.summary --profile tiny --table 2 --since <unix time the run started> \
        [--against <copy of reports/tiny/table2.csv from before the run>]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from orl.records.store import NOT_RECORD_DIRS
from orl.report.reproduced import compare_tables, reproduction_lines


def record_files(results: Path) -> list[Path]:
    """The record files of a profile, as the tables read them (not checkpoints or scratch)."""
    return [
        p
        for p in sorted(results.rglob("*.jsonl"))
        if not any(
            part in NOT_RECORD_DIRS or part.startswith(".") for part in p.relative_to(results).parts[:-1]
        )
    ]


def summary(
    profile: str, table: str, since: float, root: Path = Path("."), against: Path | None = None
) -> list[str]:
    results, reports = root / "results" / profile, root / "reports" / profile
    md, csv = reports / f"table{table}.md", reports / f"table{table}.csv"
    lines = []
    if csv.is_file():
        status = pd.read_csv(csv)["status"].fillna("")
        measured = int((status == "measured").sum())
        lines.append(
            f"Table {table}: {md} (beside it .csv with every column, .tex, .html): {measured} of "
            f"{len(status)} lines measured, {len(status) - measured} not run (each with its reason)"
        )
    else:
        lines.append(f"Table {table}: {md} was not written (see the errors above)")
    files = record_files(results) if results.is_dir() else []
    fresh = [p for p in files if p.stat().st_mtime >= since]
    if files and not fresh:
        lines.append(
            f"This run wrote no record: the {len(files)} record files under {results}/ were already up to "
            "date, so nothing was trained or measured (FORCE=1 retrains ORL from the base and measures what "
            "descends from it again; FORCE=all everything)."
        )
    else:
        lines.append(f"This run wrote {len(fresh)} of the {len(files)} record files under {results}/.")
        if against is not None and against.is_file() and against.stat().st_size and csv.is_file():
            before, after = pd.read_csv(against, dtype=str), pd.read_csv(csv, dtype=str)
            lines += reproduction_lines(compare_tables(before, after), f"the table before this run ({csv})")
    lines.append(
        f"All tables and figures: {reports}/index.md; the HTML report: make report PROFILE={profile}"
    )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m orl.report.summary", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--profile", required=True)
    parser.add_argument("--table", default="2")
    parser.add_argument("--since", type=float, required=True, help="unix time the run started")
    parser.add_argument(
        "--against", type=Path, default=None, help="the table's CSV as it was before the run (a copy)"
    )
    args = parser.parse_args(argv)
    print("\n".join(summary(args.profile, args.table, args.since, against=args.against)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
