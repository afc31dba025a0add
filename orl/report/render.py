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

The Markdown and LaTeX writers are small and local on purpose: pandas' writers need
optional packages (tabulate, jinja2) that the harness does not depend on.
"""

from __future__ import annotations

import html
import math
from pathlib import Path

import pandas as pd

from orl import rows
from orl.io import atomic_write_text
from orl.report.claims import Claim, LedgerNote, claims_for_table
from orl.report.headline import HEADLINE_TABLES, headlines, measured_on, not_run_lines
from orl.report.notes import RUN_TO_RUN

# Where a reader finds what each column means (the project's own docs, in every clone).
DOCS_METRICS = "docs/metrics.md"

GENERAL_CAVEATS = (
    "All paper throughput figures are single-request (batch size 1) peaks on specific benchmarks, "
    "not averages over arbitrary prompts.",
    "`ratio` is reproduced / paper. Ratios (speedups, TPF gains) are compared across hardware; raw tokens/s "
    "only when the record's GPU and model are the claim's (docs/tables.md); `compared` says which applied.",
    "Rows that could not run here say `not run: <reason>`; none are dropped or filled in.",
)

_AR, _AR_HF, _AR_VLLM = (rows.with_role(2, role)[0][0].system for role in ("ar", "ar_hf", "ar_vllm"))
_REFERENCE = rows.ROW[rows.MATCH_REFERENCE].system
_ORL = rows.ROW[rows.TRAINED].system

# What the forward-count columns are (docs/metrics.md, orl/engines/forwards.py); in the caveats of every
# table that shows TPF.
FORWARD_COUNTS = (
    "`tpf` is tokens per decode forward (NFE: every forward after the prompt's prefill, the target's for a "
    "speculative line), the same count for every line; `tpf_prefill` counts the prefill forwards too "
    "(tokens / (NFE + prefill forwards)); `tpf_commit` (block decoders) adds one forward per decoded block, "
    "the page's count (tokens / (NFE + blocks)). `tpf_ceiling` (block decoders) is tokens / blocks: at one "
    "forward per block NFE cannot fall below the number of blocks, so no TPF on these completions can exceed "
    "it; a TPF near it is set by the canvas (block size against completion length), not by the method. "
    '"—" where the records do not say (never derived).'
)

TABLE_CAVEATS = {
    1: (
        "TPF gain and throughput gain are +ORL over base: same model family, suite and engine, same run; "
        "`pass_at_1_diff` is +ORL − base. +ORL is a training result: its values are means over the training "
        "seeds of the records (`seeds`), with sd and per-seed values.",
        f"Operating points are matched to the AR target ({_REFERENCE}, greedy); `operating_point` gives each "
        "seed's threshold and says where one sits at an end of its sweep grid.",
        "AUP is d3LLM's (orl/eval/aup.py): y_max is the highest pass@1 among the sweep points of this "
        "table's "
        "lines on the same suite; `aup_dropped` counts the points below y1 − 5 it leaves out.",
        "At tiny scale HumanEval pass@1 is expected near zero; it is reported as measured.",
        FORWARD_COUNTS,
        RUN_TO_RUN,
    ),
    2: (
        "An end-to-end system comparison, as in the paper: ORL runs on dlmrt, the paper's speculative "
        "baselines on vLLM (DFlash and EAGLE3 under relaxed verification, at comparable measured accuracy).",
        FORWARD_COUNTS + " "
        f"`speedup_vs_ar` is tokens/s over {_AR} (our own AR loop: static KV cache, compiled step, so the "
        f"dLLM-vs-AR ratio is not framework overhead), `speedup_vs_ar_hf` over {_AR_HF} (transformers' "
        f"generate), `speedup_vs_ar_vllm` over {_AR_VLLM}; all from this run, paired over the same requests.",
        f"Matched accuracy: every line is matched to the AR target's greedy pass@1 ({_REFERENCE}): within "
        "the "
        "tolerance and not shown worse by the paired test (α = 0.05); `matched` says which lines cannot "
        "reach it "
        "and why, `pass_at_1_diff` is the line's pass@1 minus the AR target's.",
        "Each system decodes its lowest training seed's checkpoint here (Table 1 and 5 show all seeds).",
        RUN_TO_RUN,
        "Where the GPU differs from the paper's H100, each claimed row is compared through its tokens/s "
        "relative to another claimed row (e.g. ORL over DFlash), never through raw tokens/s.",
    ),
    3: (
        "Every row runs the same model with the same decoding settings; identical TPF (`same_tpf`) is the "
        "check that they do.",
        "`speedup_vs_serving` is against the faster of SGLang dLLM / vLLM measured here; the paper reports "
        "1.2-1.6x on a single H100.",
    ),
    "3b": (
        "Random-weight models with real checkpoints' shapes (`orl bench-scale`, orl/eval/scale.py): speed "
        "only, "
        "never beside accuracy. floor = (weight bytes + KV bytes read per forward) / copy bandwidth "
        "measured in "
        "the same run; `floor_ratio` = time per forward / floor (1 is the limit). For dlmrt, "
        "`compute_floor_s` "
        "is a block forward's arithmetic (2 x tokens x weights + attention) over the FLOP/s of a large "
        "matmul "
        "measured in the same run, and `roofline_ratio` the time per forward over the larger of the two "
        "floors "
        "(where the compute floor is the larger, the step is compute-bound: no engine reaches the bandwidth "
        "floor there). dlmrt's time per forward is one "
        "decoding step of its compiled / captured chunk at the generation's end; the other engines' is "
        "wall time "
        "over every forward, prefill included. `kernels_per_step`: CUDA kernels (GPU) or CPU operators per "
        "dlmrt "
        "step, where the run was profiled.",
    ),
    4: (
        "Filled from contributed results (results/hardware/<gpu>/*.jsonl, filed by `orl submit`): one row "
        "per "
        "GPU, GPU count, model, precision and system, at its peak tokens/s; environment columns are the "
        "submitter's.",
    ),
    5: (
        "TPF and pass@1 at each system's chosen operating point (matched to the AR target); AUP is d3LLM's "
        "accuracy under parallelism of its threshold sweep (orl/eval/aup.py), `aup_dropped` the points below "
        "y1 − 5 it leaves out. Every line is a mean over its training seeds (`seeds`), with sd, per-seed "
        "values "
        "and the interval.",
        FORWARD_COUNTS,
        f"`tpf_diff`, `pass_at_1_diff`, `aup_diff`: the line minus {_ORL}, paired over the same problems; "
        "an effect whose interval includes 0 is labelled unresolved and stays in the table. "
        "`gated_share`: the mean share of masked positions the gate sends to the KL anchor instead of CE "
        "(c ≥ τ_gate; for no gate and dParallel what it would have split, or 0); `aec_active_share`: the "
        "share "
        "of state pairs whose entropy fell short of the (1 − ρ) contraction; `retained_fraction`: rollouts "
        "that "
        "passed their tests (docs/method.md §3, version 2).",
        "Cost of the ORL stage (mean over seeds): `world_size` training processes, `device_hours` = world "
        "size × "
        "wall (`train_gpu_hours` where the devices are GPUs: the paper's 36 H100-hours compare with it), "
        "`train_tokens_per_s` training tokens per second per device, `peak_memory_gb` the largest rank's "
        "peak "
        "(CUDA's allocator peak on a GPU, the peak resident set of the process on a CPU).",
        "The paper's training-step speedup combines residual state capture, attention kernels and packing; "
        "`train_step_speedup` here is training tokens/s with packing over without.",
        RUN_TO_RUN,
    ),
}


def table_paths(out_dir: str | Path, table: int) -> dict[str, Path]:
    """Where Table `table` is written: {"md": ..., "tex": ..., "csv": ...}."""
    out_dir = Path(out_dir)
    return {ext: out_dir / f"table{table}.{ext}" for ext in ("md", "tex", "csv", "html")}


# ------------------------------------------------------------------------------------------
# Cells
# ------------------------------------------------------------------------------------------


def _missing(value) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


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


def _number(value, signed: bool = False) -> str:
    text = format_cell(value)
    return f"+{text}" if signed and not _missing(value) and value > 0 else text


def folded_cell(row: dict, name: str, suffixes: tuple[str, ...]) -> str:
    """A value with its companions in one cell: 'v ± sd [lo, hi] label (p=..) (s0: ..; s1: ..)'."""
    value = row.get(name)
    if _missing(value):
        return format_cell(value)
    tested = "_test" in suffixes
    parts = [_number(value, signed=tested and name.endswith("_diff"))]
    if not _missing(row.get(f"{name}_sd")):
        parts.append(f"± {format_cell(row[f'{name}_sd'])}")
    if not _missing(row.get(f"{name}_lo")) and not _missing(row.get(f"{name}_hi")):
        parts.append(f"[{format_cell(row[f'{name}_lo'])}, {format_cell(row[f'{name}_hi'])}]")
    if tested and not _missing(row.get(f"{name}_test")):
        p = row.get(f"{name}_p")
        parts.append(
            str(row[f"{name}_test"]) + ("" if _missing(p) else " (p<0.001)" if p == 0 else f" (p={p:.2g})")
        )
    if not _missing(row.get(f"{name}_per_seed")):
        parts.append(f"({row[f'{name}_per_seed']})")
    return " ".join(parts)


def display_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame as Markdown and LaTeX show it: companion columns folded into their value's cell."""
    companions: dict[str, tuple[str, ...]] = frame.attrs.get("companions") or {}
    if not companions:
        return frame
    dropped = {name + suffix for name, suffixes in companions.items() for suffix in suffixes}
    columns = [c for c in frame.columns if c not in dropped]
    records = frame.to_dict("records")
    cells = [
        {c: folded_cell(r, c, companions[c]) if c in companions else r[c] for c in columns} for r in records
    ]
    return pd.DataFrame(cells, columns=columns)


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
    "±": r"$\pm$", "−": "-", "τ": r"$\tau$", "α": r"$\alpha$", "ρ": r"$\rho$",
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


def headline_markdown(frame: pd.DataFrame, csv_name: str) -> list[str]:
    """The top of a headline table's Markdown: where it ran, one compact table per suite, what did not run."""
    n_measured = int((frame["status"] == "measured").sum())
    md = [
        f"Measured on: {measured_on(frame)}. {n_measured} of {len(frame)} lines measured. Each cell: value "
        f'[95% interval]. Every column: [{csv_name}]({csv_name}) and "All columns" below; the metrics: '
        f"{DOCS_METRICS}.",
        "",
    ]
    for part in headlines(frame):
        if part.heading:
            md += [f"**{part.heading}**", ""]
        md += [to_markdown(part.frame)]
    missing = not_run_lines(frame)
    if missing:
        md += (
            [f"**Not run** ({len(frame) - n_measured} lines)", ""] + [f"- {line}" for line in missing] + [""]
        )
    return md


def headline_latex(frame: pd.DataFrame, caption: str, csv_name: str, notes: list[str]) -> str:
    """A headline table as LaTeX: one tabular per suite, measured lines only, then what did not run."""
    lines = [
        "% Generated by orl render; needs no LaTeX packages. Every column: " + csv_name,
        "\\begin{table}[ht]",
        "\\centering",
        "\\scriptsize",
    ]
    for part in headlines(frame):
        if part.heading:
            lines.append(f"\\par\\smallskip\\textbf{{{latex_escape(part.heading)}}}\\par")
        lines += [
            "\\begin{tabular}{" + "l" * len(part.frame.columns) + "}",
            "\\hline",
            " & ".join(latex_escape(str(c)) for c in part.frame.columns) + " \\\\",
            "\\hline",
        ]
        lines += [
            " & ".join(latex_escape(str(v)) for v in row) + " \\\\"
            for row in part.frame.itertuples(index=False)
        ]
        lines += ["\\hline", "\\end{tabular}"]
    lines.append(f"\\caption{{{latex_escape(caption)} (measured on: {latex_escape(measured_on(frame))})}}")
    missing = not_run_lines(frame)
    if missing:
        lines.append("\\par\\smallskip Not run: " + latex_escape("; ".join(missing)))
    lines += [f"\\par\\smallskip {latex_escape(note)}" for note in notes]
    lines.append("\\end{table}")
    return "\n".join(lines) + "\n"


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


# ------------------------------------------------------------------------------------------
# One table, three formats
# ------------------------------------------------------------------------------------------


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


def _html_table(frame: pd.DataFrame) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(format_cell(v))}</td>" for v in row) + "</tr>"
        for row in frame.itertuples(index=False)
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def table_html(frame: pd.DataFrame, title: str, shown: pd.DataFrame, csv_name: str) -> str:
    """A table as an HTML fragment for the report page: the headline and what did not run (Tables 1, 2,
    3, 5), or the whole table (3b, 4, which are small)."""
    n_measured = int((frame["status"] == "measured").sum())
    parts = [f"<h2>{html.escape(title)}</h2>"]
    if frame.attrs["table"] in HEADLINE_TABLES:
        parts.append(
            f"<p>Measured on: {html.escape(measured_on(frame))}. {n_measured} of {len(frame)} lines "
            f"measured. Each cell: value [95% interval]. Every column: {html.escape(csv_name)} (category "
            f"Tables); the metrics: {DOCS_METRICS}.</p>"
        )
        for part in headlines(frame):
            if part.heading:
                parts.append(f"<h3>{html.escape(part.heading)}</h3>")
            parts.append(_html_table(part.frame))
        missing = not_run_lines(frame)
        if missing:
            items = "".join(f"<li>{html.escape(line)}</li>" for line in missing)
            parts.append(f"<p>Not run ({len(frame) - n_measured} lines):</p><ul>{items}</ul>")
    else:
        parts.append(
            f"<p>{n_measured} of {len(frame)} lines measured. Also as {html.escape(csv_name)} (category "
            f"Tables); the metrics: {DOCS_METRICS}.</p>"
        )
        parts.append(_html_table(shown))
    return '<div class="orl-table">\n' + "\n".join(parts) + "\n</div>\n"
