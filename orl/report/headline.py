"""The headline of a table: the few columns a reader looks at first, measured lines only, one value with
its 95% interval per cell; the lines that did not run as a list of reasons under it.

The full table (every column, every companion) stays in the CSV beside it; the Markdown keeps it too,
after the headline and the caveats. Tables 1, 2, 3 and 5 have a headline; 3b and 4 are small already.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from orl.engines.kinds import ENGINES


@dataclass(frozen=True)
class Column:
    header: str
    source: str  # the frame's column (its _lo / _hi companions give the interval)
    interval: bool = True
    signed: bool = False  # differences show their sign
    derive: Callable[[dict], object] | None = None  # a value not in the frame


def verification(row: dict) -> str:
    """How a Table 2 line's output is checked: strict for speculative rows (every drafted token verified
    greedily against the AR target) or relaxed with its δ, none for AR decoding, parallel commits for the
    dLLM rows."""
    engine = row.get("engine")
    if isinstance(
        row.get("verification"), str
    ):  # the line's row drafts (orl.rows Row.draft; table2.verification)
        return "strict (greedy)" if row["verification"] == "strict" else row["verification"]
    if engine in ENGINES and ENGINES[engine].diffusion:
        return "none (dLLM commits)"
    return "none (AR)"


def short_point(row: dict) -> str | None:
    """Table 1's operating point without its notes ('τ=0.6 (s0, s1); τ=0.4 (s2)'): the CSV keeps them."""
    text = row.get("operating_point")
    if _missing(text):
        return None
    parts = str(text).split("; AR target")[0].split("; ")
    return "; ".join(part.split(":")[0] if part.startswith("τ=") else part for part in parts)


HEADLINES: dict[int, tuple[Column, ...]] = {
    1: (
        Column("model", "model", False),
        Column("variant", "variant", False),
        Column("operating point", "operating_point", False, derive=short_point),
        Column("TPF", "tpf"),
        Column("tokens/s", "tokens_per_s"),
        Column("pass@1", "pass_at_1"),
        Column("TPF gain", "tpf_gain"),
        Column("throughput gain", "throughput_gain"),
    ),
    2: (
        Column("system", "system", False),
        Column("verification", "", False, derive=verification),
        Column("TPF", "tpf"),
        Column("tokens/s", "tokens_per_s"),
        Column("pass@1", "pass_at_1"),
        Column("matched", "matched", False),
        Column("speedup vs AR", "speedup_vs_ar"),
    ),
    3: (
        Column("setup", "setup", False),
        Column("engine", "engine", False),
        Column("tokens/s", "tokens_per_s"),
        Column("TPF", "tpf"),
        Column("same TPF", "same_tpf", False),
        Column("speedup vs reference", "speedup_vs_reference"),
    ),
    5: (
        Column("system", "system", False),
        Column("TPF", "tpf"),
        Column("pass@1", "pass_at_1"),
        Column("AUP", "aup"),
        Column("TPF − ORL", "tpf_diff", signed=True),
        Column("pass@1 − ORL", "pass_at_1_diff", signed=True),
        Column("self-generated tokens", "self_generated_tokens", False),
    ),
}
HEADLINE_TABLES = tuple(HEADLINES)
NOT_RUN_PREFIX = "not run: "
NO_RECORD = "not run: no record"  # a line no record was found for (orl/report/select.py)


def _missing(value) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def _number(value, signed: bool = False) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if abs(value) >= 1000:
        text = f"{value:,.0f}"
    elif abs(value) >= 100:
        text = f"{value:.0f}"
    else:
        text = f"{value:.3g}"
    return f"+{text}" if signed and value > 0 else text


def cell(row: dict, column: Column) -> str:
    value = column.derive(row) if column.derive else row.get(column.source)
    if _missing(value):
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if not isinstance(value, (int, float)):
        return " ".join(str(value).split())
    text = _number(value, column.signed)
    lo, hi = row.get(f"{column.source}_lo"), row.get(f"{column.source}_hi")
    if column.interval and not _missing(lo) and not _missing(hi):
        text += f" [{_number(lo)}, {_number(hi)}]"
    return text


@dataclass
class Headline:
    suite: str | None
    frame: pd.DataFrame  # display strings, measured lines only
    title: str | None = None  # shown above it; default: the suite

    @property
    def heading(self) -> str | None:
        return self.title or self.suite


# ------------------------------------------------------------------------------------------
# Table 1 as the page's grid
# ------------------------------------------------------------------------------------------

# The page's benchmarks, in its order, and their names there; other suites (the tiny profile's) follow
# in the frame's order under their own names.
BENCHMARK_NAMES = {"gsm8k": "GSM8K", "math500": "MATH-500", "humaneval": "HumanEval", "mbpp": "MBPP"}
GRID_TITLE = "Per benchmark: accuracy (%) and TPF, base and +ORL (the page's Table 1 grid)"


def _recorded(row: dict) -> bool:
    """A line with a record: measured, or a "not run" record saying why (not the mere absence of one)."""
    status = str(row.get("status") or "")
    return status == "measured" or (status.startswith(NOT_RUN_PREFIX) and not status.startswith(NO_RECORD))


def _grid_lines(frame: pd.DataFrame) -> tuple[list[dict], list[tuple], list[str]]:
    """The recorded lines of the grid's rows (model and variant with a measured line) and its suites (those
    with a recorded line in those rows), the page's benchmarks first, then the others in the frame's order."""
    records = frame.to_dict("records")
    keys = list(dict.fromkeys((r["model"], r["variant"]) for r in records if r.get("status") == "measured"))
    lines = [r for r in records if (r["model"], r["variant"]) in keys and _recorded(r)]
    found = [s for s in dict.fromkeys(r.get("suite") for r in lines) if not _missing(s)]
    suites = [s for s in BENCHMARK_NAMES if s in found] + [s for s in found if s not in BENCHMARK_NAMES]
    return lines, keys, suites


def table1_grid(frame: pd.DataFrame) -> pd.DataFrame:
    """Table 1 laid out as the page's grid: one row per model and variant that has a measured line, and per
    suite its accuracy (pass@1 in percent) and TPF with their 95% intervals, as columns `<suite>_accuracy`,
    `<suite>_tpf` and their `_lo` / `_hi`, and `<suite>_status` (the line's status; None: no line). The
    suites: those with a measured line or a "not run" record in these rows, the page's benchmarks first."""
    lines, keys, suites = _grid_lines(frame)
    rows = []
    for model, variant in keys:
        row: dict = {"model": model, "variant": variant}
        for suite in suites:
            line = next(
                (r for r in lines if (r["model"], r["variant"], r.get("suite")) == (model, variant, suite)),
                {},
            )
            for name, source, scale in (("accuracy", "pass_at_1", 100.0), ("tpf", "tpf", 1.0)):
                for suffix in ("", "_lo", "_hi"):
                    value = line.get(source + suffix) if line.get("status") == "measured" else None
                    row[f"{suite}_{name}{suffix}"] = None if _missing(value) else value * scale
            row[f"{suite}_status"] = line.get("status")
        rows.append(row)
    columns = (
        ["model", "variant"]
        + [f"{s}_{n}{x}" for s in suites for n in ("accuracy", "tpf") for x in ("", "_lo", "_hi")]
        + [f"{s}_status" for s in suites]
    )
    return pd.DataFrame(rows, columns=columns)


def grid_headline(frame: pd.DataFrame) -> Headline:
    """The grid's display: each cell "value [95% interval]"; "not run" where the line's record says it did
    not run (the reason is in the list under the tables), "—" where there is no record."""
    grid = table1_grid(frame)
    suites = _grid_lines(frame)[2]
    columns = [(None, Column("model", "model", False)), (None, Column("variant", "variant", False))]
    for suite in suites:
        name = BENCHMARK_NAMES.get(suite, suite)
        columns += [
            (suite, Column(f"{name} acc. (%)", f"{suite}_accuracy")),
            (suite, Column(f"{name} TPF", f"{suite}_tpf")),
        ]
    cells = [
        tuple(
            "not run"
            if suite and str(r[f"{suite}_status"] or "").startswith(NOT_RUN_PREFIX)
            else cell(r, column)
            for suite, column in columns
        )
        for r in grid.to_dict("records")
    ]
    return Headline(None, pd.DataFrame(cells, columns=[c.header for _, c in columns]), GRID_TITLE)


def headlines(frame: pd.DataFrame) -> list[Headline]:
    """One compact table per suite (in the frame's order) of the measured lines; repeated lines (one per
    claim they are compared with) shown once. Table 1 starts with its grid (grid_headline)."""
    table = frame.attrs["table"]
    columns = HEADLINES[table]
    records = frame.to_dict("records")
    suites = list(dict.fromkeys(r.get("suite") for r in records if r.get("status") == "measured"))
    out = [grid_headline(frame)] if table == 1 and suites else []
    for suite in suites:
        cells = [
            tuple(cell(r, c) for c in columns)
            for r in records
            if r.get("status") == "measured" and r.get("suite") == suite
        ]
        cells = list(dict.fromkeys(cells))
        out.append(
            Headline(
                None if _missing(suite) else suite, pd.DataFrame(cells, columns=[c.header for c in columns])
            )
        )
    return out


def not_run_lines(frame: pd.DataFrame) -> list[str]:
    """'system (engine): reason [suites]' for every line that did not run, each reason once."""
    reasons: dict[tuple, list[str]] = {}
    for r in frame.to_dict("records"):
        status = str(r.get("status") or "")
        if status == "measured":
            continue
        label = str(r.get("system") or "")
        if "model" in frame.columns and not _missing(r.get("model")):  # Table 1: family and variant
            label = f"{r['model']} {r.get('variant') or ''}".strip()
        elif "setup" in frame.columns and not _missing(r.get("setup")):  # Table 3: the serving setup
            label = str(r["setup"])
        key = (label, r.get("engine"), status.removeprefix(NOT_RUN_PREFIX))
        suite = r.get("suite")
        reasons.setdefault(key, [])
        if not _missing(suite) and suite not in reasons[key]:
            reasons[key].append(str(suite))
    return [
        f"{label} ({engine}): {reason}" + (f" ({', '.join(suites)})" if suites else "")
        for (label, engine, reason), suites in reasons.items()
    ]


def measured_on(frame: pd.DataFrame) -> str:
    """Where the measured lines ran: their GPUs, or 'CPU' for lines whose records name none."""
    gpus = frame.attrs.get("gpus") or []
    places = [*gpus, *(["CPU"] if frame.attrs.get("cpu_lines") else [])]
    return ", ".join(places) if places else "nothing measured"
