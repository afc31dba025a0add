"""Tables 1-5 (docs/tables.md) as pure functions: (records, claims) -> pandas.DataFrame.

Which lines each table has, which records a line reads and which claims it names are
data in orl/rows.py; this package only computes. One module per idea:

    select.py      which records a line reads, and its status ("measured" / "not run: ...")
    attach.py      the paper's claims beside the lines; the common columns; the frame
    measure.py     one line over its training seeds: records, per-problem data, values with intervals
    stats.py       records -> orl.eval.uncertainty (intervals, paired tests) -> columns
    matching.py    matched accuracy against the AR target
    table1.py ...  table5.py: one builder per table (its computed columns: gains, speedups, AUP);
                   table3b.py: scale_bench records against the hardware floor (no rows.py lines)
"""

from __future__ import annotations

import pandas as pd

from orl.report.attach import TABLE_COLUMNS, TABLE_TITLES
from orl.report.claims import Claim
from orl.report.table1 import build_table1
from orl.report.table2 import build_table2
from orl.report.table3 import build_table3
from orl.report.table3b import build_table3b
from orl.report.table4 import build_table4
from orl.report.table5 import build_table5

__all__ = ["TABLE_COLUMNS", "TABLE_TITLES", "build_table", "build_table1", "build_table2", "build_table3",
           "build_table3b", "build_table4", "build_table5"]  # fmt: skip

BUILDERS = {1: build_table1, 2: build_table2, 3: build_table3, 4: build_table4, 5: build_table5}
TABLE_IDS = (1, 2, 3, "3b", 4, 5)  # every table `orl render` writes, in order


def build_table(table: int | str, records: list[dict], claims: list[Claim]) -> pd.DataFrame:
    """Table `table` (1..5, or "3b"); Table 4 expects the contributed hardware records."""
    if table == "3b":
        return build_table3b(records)
    return BUILDERS[table](records, claims)
