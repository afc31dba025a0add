"""Render a profile's report: records in, tables + figures + index out.

records under <results>/**/*.jsonl  ─┐
contributed results/hardware/**      ├─► tables 1..5 (md, tex, csv) ─┐
results/paper/claims.yaml           ─┘   figures (png, pdf)         ├─► <out>/index.md
"""

from __future__ import annotations

from pathlib import Path

from orl.records import load_record_tree
from orl.records.submit import DEFAULT_HARDWARE_ROOT
from orl.report.claims import DEFAULT_CLAIMS_PATH, load_claims, load_notes
from orl.report.figure_accuracy import table_aups
from orl.report.figures import write_figures
from orl.report.index import write_index
from orl.report.render import write_table
from orl.report.tables import TABLE_IDS, build_table, build_table2

ALL_TABLES = TABLE_IDS


def render_report(
    profile: str,
    records: list[dict],
    out_dir: str | Path,
    *,
    tables: tuple[int | str, ...] = ALL_TABLES,
    figures: bool = False,
    index: bool = True,
    claims_path: str | Path = DEFAULT_CLAIMS_PATH,
    hardware_root: str | Path = DEFAULT_HARDWARE_ROOT,
) -> list[Path]:
    """Write the chosen tables (and figures) of `records` (a results tree's, `load_record_tree`) and the
    index; return every path written."""
    claims, ledger = load_claims(claims_path), load_notes(claims_path)
    hardware = load_record_tree(hardware_root, missing_ok=True)
    written: list[Path] = []
    for table in tables:
        frame = build_table(table, hardware if table == 4 else records, claims)
        written += write_table(frame, out_dir, claims, ledger)
    if figures:
        aups = table_aups(build_table(5, records, claims), build_table(1, records, claims))
        written += write_figures(records, build_table2(records, claims), out_dir, aups)
    if index:
        written.append(write_index(out_dir, profile))
    return written
