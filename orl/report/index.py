"""reports/<profile>/index.md: one page that links every table and figure of a profile.

The index lists what is on disk in the report folder, so rendering some tables
later (``orl render --tables 2``) still leaves an index that links all of them, and a
table or figure that has not been rendered yet is named as such rather than linked.
"""

from __future__ import annotations

import csv
from pathlib import Path

from orl.io import atomic_write_text
from orl.report.attach import TABLE_TITLES
from orl.report.caveats import GENERAL_CAVEATS
from orl.report.figures import FIGURES, figure_paths
from orl.report.render import table_paths


def _status_counts(csv_path: Path) -> str:
    with csv_path.open(newline="", encoding="utf-8") as handle:
        statuses = [row.get("status", "") for row in csv.DictReader(handle)]
    measured = sum(1 for status in statuses if status == "measured")
    return f"{measured} of {len(statuses)} lines measured"


def write_index(out_dir: str | Path, profile: str) -> Path:
    out_dir = Path(out_dir)
    lines = [f"# ORL reproduction report: profile `{profile}`", ""]
    lines += [f"> {caveat}" for caveat in GENERAL_CAVEATS[:1]]
    lines += ["", "## Tables", ""]
    for table, title in TABLE_TITLES.items():
        paths = table_paths(out_dir, table)
        if all(path.is_file() for path in paths.values()):
            links = ", ".join(f"[{ext}]({path.name})" for ext, path in paths.items())
            lines.append(f"- {title}: {links} ({_status_counts(paths['csv'])})")
        else:
            lines.append(f"- {title}: not rendered yet (`orl render --profile {profile} --tables {table}`)")
    lines += ["", "## Figures", ""]
    for name in FIGURES:
        png, pdf = figure_paths(out_dir)[name]
        if png.is_file() and pdf.is_file():
            rel_png, rel_pdf = png.relative_to(out_dir).as_posix(), pdf.relative_to(out_dir).as_posix()
            lines += [
                f"### {name}",
                "",
                f"![{name}]({rel_png})",
                "",
                f"[PNG]({rel_png}) · [PDF]({rel_pdf})",
                "",
            ]
        else:
            lines += [f"### {name}", "", f"not rendered yet (`orl render --profile {profile} --figures`)", ""]
    lines += ["", "The paper's claims and their sources: results/paper/claims.yaml."]
    path = out_dir / "index.md"
    atomic_write_text(path, "\n".join(lines).rstrip("\n") + "\n")
    return path
