"""Table cells as people read them: 4 significant digits, "—" for nothing, and a value's companions (sd,
interval, test, per-seed values) folded into its cell for Markdown and LaTeX.
"""

from __future__ import annotations

import math

import pandas as pd


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
    if row.get(f"{name}_sitting") == "separate":  # a ratio of throughputs not timed together
        parts.append("(separate sittings)")
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
