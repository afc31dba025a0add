"""Writing the tables: Markdown, LaTeX and CSV, each with its caveats and the claims it names.

Files (all written atomically through orl.io):
    <out>/table<N>.md    the table, the caveats under it, the paper's claims it names
    <out>/table<N>.tex   the same as a LaTeX table (needs no LaTeX packages)
    <out>/table<N>.csv   the raw values, full precision, with the `status` column
    <out>/table<N>.html  what a reader looks at first (the headline, or the whole table for 3b and 4):
                         an HTML fragment that `make report` puts on the report's first page

In the CSV every interval, sd, per-seed list and test is a column of its own (`<column>_lo`,
`_hi`, `_sd`, `_per_seed`, `_p`, `_test`); Markdown and LaTeX fold them into the value's cell:
"0.89 ± 0.01 [0.84, 0.93] (s0: 0.88; s1: 0.9)", "+0.06 [0.02, 0.11] resolved (p=0.004)".

The cells: orl/report/cells.py; the Markdown, LaTeX and HTML writers: orl/report/formats.py; the caveats:
orl/report/caveats.py.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from orl.io import atomic_write_text
from orl.report.caveats import GENERAL_CAVEATS, TABLE_CAVEATS
from orl.report.cells import display_frame
from orl.report.claims import Claim, LedgerNote, claims_for_table
from orl.report.formats import headline_latex, headline_markdown, table_html, to_latex, to_markdown
from orl.report.headline import HEADLINE_TABLES


def table_paths(out_dir: str | Path, table: int) -> dict[str, Path]:
    """Where Table `table` is written: {"md": ..., "tex": ..., "csv": ...}."""
    out_dir = Path(out_dir)
    return {ext: out_dir / f"table{table}.{ext}" for ext in ("md", "tex", "csv", "html")}


def claim_lines(claims: list[Claim]) -> list[str]:
    """One line per claim: id, what it is about, the number and the quoted phrase with its source."""
    lines = []
    for claim in claims:
        about = ", ".join(
            part for part in (claim.system, claim.model, claim.hardware, claim.precision) if part
        )
        lines.append(
            f'{claim.id} ({about}): {claim.metric} {claim.display()} -- "{claim.quote}" ({claim.source})'
        )
    return lines


def write_table(
    frame: pd.DataFrame, out_dir: str | Path, claims: list[Claim], ledger: list[LedgerNote] | tuple = ()
) -> list[Path]:
    """Write a table built by orl.report.tables in Markdown, LaTeX and CSV (with the ledger's notes
    about this table); return the paths."""
    table = frame.attrs["table"]
    title = frame.attrs["title"]
    paths = table_paths(out_dir, table)
    caveats = [*GENERAL_CAVEATS, *TABLE_CAVEATS[table], *frame.attrs.get("notes", [])]
    named = claim_lines(claims_for_table(claims, table))
    ledger = [note.text for note in ledger if table in note.tables]
    shown = display_frame(frame)

    n_measured = int((frame["status"] == "measured").sum())
    counts = f"{n_measured} of {len(frame)} lines measured; the rest not run (reasons in `status`)."
    headline = table in HEADLINE_TABLES
    if headline:
        md = [f"# {title}", "", *headline_markdown(frame, paths["csv"].name), "**Caveats**", ""]
    else:
        md = [f"# {title}", "", to_markdown(shown), counts, "", "**Caveats**", ""]
    md += [f"- {line}" for line in caveats]
    if ledger:
        md += ["", "**Notes of the claims ledger** (results/paper/claims.yaml)", ""]
        md += [f"- {line}" for line in ledger]
    md += ["", "**Paper claims named by this table** (results/paper/claims.yaml)", ""]
    md += [f"- {line}" for line in named] or ["- none"]
    if headline:
        md += [
            "",
            "## All columns",
            "",
            f"Every line and column of {paths['csv'].name}, intervals folded into their cells.",
            "",
            to_markdown(shown),
            counts,
        ]
    atomic_write_text(paths["md"], "\n".join(md) + "\n")

    tex_notes = [*caveats, *ledger, *(f"Claim {line}" for line in named)]
    if headline:  # the page-wide headline; every column is in the CSV
        atomic_write_text(paths["tex"], headline_latex(frame, title, paths["csv"].name, tex_notes))
    else:
        atomic_write_text(paths["tex"], to_latex(shown, title, tex_notes))
    atomic_write_text(paths["csv"], frame.to_csv(index=False))
    atomic_write_text(paths["html"], table_html(frame, title, shown, paths["csv"].name))
    return list(paths.values())
