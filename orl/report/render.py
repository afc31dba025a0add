"""Writing the tables: Markdown, LaTeX and CSV, each with its caveats and the claims it names.

Files (all written atomically through orl.io):
    <out>/table<N>.md    the table, the caveats under it, the paper's claims it names
    <out>/table<N>.tex   the same as a LaTeX table (needs no LaTeX packages)
    <out>/table<N>.csv   the raw values, full precision, with the `status` column

The Markdown and LaTeX writers are small and local on purpose: pandas' writers need
optional packages (tabulate, jinja2) that the harness does not depend on.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from orl import rows
from orl.io import atomic_write_text
from orl.report.claims import Claim, claims_for_table

GENERAL_CAVEATS = (
    "All paper throughput figures are single-request (batch size 1) peaks on specific benchmarks, "
    "not averages over arbitrary prompts.",
    "`ratio` is reproduced / paper. Ratios (speedups, TPF gains) are compared across hardware; raw tokens/s "
    "only when the record's GPU and model are the claim's (TABLES.md); `compared` says which applied.",
    "Rows that could not run here say `not run: <reason>`; none are dropped or filled in.",
)

_AR, _AR_VLLM = (rows.with_role(2, role)[0][0].system for role in ("ar", "ar_vllm"))

TABLE_CAVEATS = {
    1: (
        "TPF gain and throughput gain are +ORL over base: same model family, suite and engine, same run.",
        "At tiny scale HumanEval pass@1 is expected near zero; it is reported as measured.",
    ),
    2: (
        "An end-to-end system comparison, as in the paper: ORL runs on dlmrt, the paper's speculative "
        "baselines on vLLM (DFlash and EAGLE3 under relaxed verification, at comparable measured accuracy).",
        "`tpf` is tokens per target forward (the mean acceptance length for speculative rows). "
        f"`speedup_vs_ar` is tokens/s over {_AR}, `speedup_vs_ar_vllm` over {_AR_VLLM}, both from this run.",
        "Where the GPU differs from the paper's H100, each claimed row is compared through its tokens/s "
        "relative to another claimed row (e.g. ORL over DFlash), never through raw tokens/s.",
    ),
    3: (
        "Every row runs the same model with the same decoding settings; identical TPF (`same_tpf`) is the "
        "check that they do.",
        "`speedup_vs_serving` is against the faster of SGLang dLLM / vLLM measured here; the paper reports "
        "1.2-1.6x on a single H100.",
    ),
    4: (
        "Filled from contributed results (results/hardware/<gpu>/*.jsonl, filed by `orl submit`): one row per "
        "GPU, GPU count, model, precision and system, at its peak tokens/s; environment columns are the "
        "submitter's.",
    ),
    5: (
        "TPF and pass@1 at each system's chosen operating point; AUP is the area under pass@1 over TPF of "
        "its threshold sweep, from TPF = 1 (orl/eval/aup.py).",
        "The paper's training-step speedup combines residual state capture, attention kernels and packing; "
        "`train_step_speedup` here is training tokens/s with packing over without.",
    ),
}


def table_paths(out_dir: str | Path, table: int) -> dict[str, Path]:
    """Where Table `table` is written: {"md": ..., "tex": ..., "csv": ...}."""
    out_dir = Path(out_dir)
    return {ext: out_dir / f"table{table}.{ext}" for ext in ("md", "tex", "csv")}


# ------------------------------------------------------------------------------------------
# Cells
# ------------------------------------------------------------------------------------------


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def format_cell(value) -> str:
    """A cell as people read it: 4 significant digits, thousands separators, '—' for nothing."""
    if _missing(value):
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.4g}"
    return " ".join(str(value).split())


def to_markdown(frame: pd.DataFrame) -> str:
    header = "| " + " | ".join(frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    lines = [header, rule]
    for row in frame.itertuples(index=False):
        cells = [format_cell(value).replace("|", "\\|") for value in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
    "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "×": r"$\times$", "–": "--",
    "—": "---", "≥": r"$\geq$", "≤": r"$\leq$", "<": r"\textless{}", ">": r"\textgreater{}",
}  # fmt: skip


def latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIAL.get(char, char) for char in text)


# Free-text columns wrap in a fixed width instead of running off the page.
WRAPPED_COLUMNS = {"compared": "4cm", "status": "4cm", "note": "3cm"}


def _latex_column(column: str) -> str:
    width = WRAPPED_COLUMNS.get(column)
    return f"p{{{width}}}" if width else "l"


def to_latex(frame: pd.DataFrame, caption: str, notes: list[str]) -> str:
    lines = [
        "% Generated by orl render; needs no LaTeX packages.",
        "\\begin{table}[ht]",
        "\\centering",
        "\\scriptsize",
        "\\begin{tabular}{" + "".join(_latex_column(column) for column in frame.columns) + "}",
        "\\hline",
        " & ".join(latex_escape(str(column)) for column in frame.columns) + " \\\\",
        "\\hline",
    ]
    for row in frame.itertuples(index=False):
        lines.append(" & ".join(latex_escape(format_cell(value)) for value in row) + " \\\\")
    lines += ["\\hline", "\\end{tabular}", f"\\caption{{{latex_escape(caption)}}}"]
    lines += [f"\\par\\smallskip {latex_escape(note)}" for note in notes]
    lines.append("\\end{table}")
    return "\n".join(lines) + "\n"


def claim_lines(claims: list[Claim]) -> list[str]:
    """One line per claim: id, what it is about, the number and the quoted phrase with its source."""
    lines = []
    for claim in claims:
        about = ", ".join(part for part in (claim.system, claim.model, claim.hardware, claim.precision) if part)
        lines.append(
            f"{claim.id} ({about}): {claim.metric} {claim.display()} -- \"{claim.quote}\" ({claim.source})"
        )
    return lines


# ------------------------------------------------------------------------------------------
# One table, three formats
# ------------------------------------------------------------------------------------------


def write_table(frame: pd.DataFrame, out_dir: str | Path, claims: list[Claim]) -> list[Path]:
    """Write a table built by orl.report.tables in Markdown, LaTeX and CSV; return the paths."""
    table = frame.attrs["table"]
    title = frame.attrs["title"]
    paths = table_paths(out_dir, table)
    caveats = [*GENERAL_CAVEATS, *TABLE_CAVEATS[table]]
    named = claim_lines(claims_for_table(claims, table))

    n_measured = int((frame["status"] == "measured").sum())
    counts = f"{n_measured} of {len(frame)} lines measured; the rest not run (reasons in `status`)."
    md = [f"# {title}", "", to_markdown(frame), counts, "", "**Caveats**", ""]
    md += [f"- {line}" for line in caveats]
    md += ["", "**Paper claims named by this table** (results/paper/claims.yaml)", ""]
    md += [f"- {line}" for line in named] or ["- none"]
    atomic_write_text(paths["md"], "\n".join(md) + "\n")

    atomic_write_text(paths["tex"], to_latex(frame, title, [*caveats, *(f"Claim {line}" for line in named)]))
    atomic_write_text(paths["csv"], frame.to_csv(index=False))
    return list(paths.values())
