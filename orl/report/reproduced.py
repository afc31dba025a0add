"""Which figures of a table a re-run reproduced: the table before a run (a copy of its CSV) against the
table the run rendered, line by line.

Decoded figures (pass@1, the TPF counts, acceptance length, AUP, the verification rule) are deterministic
given the checkpoint, the code and the numerical path, so they are compared exactly, as the CSV writes
them. Timed figures (tokens/s, speedups) depend on the machine and the hour: for them the ratio after /
before is reported, not a verdict. Lines are matched by system, engine, suite and claim (one measurement
can stand beside two claims); only lines measured in both tables are compared.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

KEY = ("system", "engine", "suite", "claim")
DECODED = ("verification", "pass_at_1", "tpf", "tpf_prefill", "tpf_commit", "acceptance_length", "aup")
TIMED = ("tokens_per_s", "speedup_vs_ar")


@dataclass
class Reproduction:
    compared: int  # lines measured in both tables
    exact: int  # of them, every decoded column equal
    differences: list[str] = field(default_factory=list)  # "<line>: <column> <before> -> <after>"
    timed_ratios: dict[str, tuple[float, float]] = field(default_factory=dict)  # column -> (min, max)


def _measured(table: pd.DataFrame) -> pd.DataFrame:
    """The measured lines, indexed by KEY (a missing key column, or a line without a claim: "")."""
    lines = table[table["status"] == "measured"].copy()
    for column in KEY:
        lines[column] = lines[column].fillna("") if column in lines.columns else ""
    return lines.drop_duplicates(list(KEY), keep=False).set_index(list(KEY))


def compare_tables(before: pd.DataFrame, after: pd.DataFrame) -> Reproduction:
    """The decoded columns of every line measured in both tables compared exactly (read the CSVs with
    dtype=str: the writer's digits are the figures), and the timed columns' after / before ratios."""
    old, new = _measured(before), _measured(after)
    shared = [key for key in old.index if key in new.index]
    result = Reproduction(compared=len(shared), exact=0)
    for key in shared:
        line = " / ".join(part for part in key if part)
        differing = [
            f"{line}: {column} {old.at[key, column]} -> {new.at[key, column]}"
            for column in DECODED
            if column in old.columns and column in new.columns
            and not (pd.isna(old.at[key, column]) and pd.isna(new.at[key, column]))
            and old.at[key, column] != new.at[key, column]
        ]  # fmt: skip
        result.exact += not differing
        result.differences += differing
    for column in TIMED:
        if column not in old.columns or column not in new.columns:
            continue
        ratios = pd.to_numeric(new.loc[shared, column], errors="coerce") / pd.to_numeric(
            old.loc[shared, column], errors="coerce"
        )
        ratios = ratios.dropna()
        if len(ratios):
            result.timed_ratios[column] = (float(ratios.min()), float(ratios.max()))
    return result


def reproduction_lines(result: Reproduction, before_name: str) -> list[str]:
    """What `make reproduce` prints after a run that measured again."""
    if not result.compared:
        return [f"No line was measured both in {before_name} and now: nothing to compare."]
    lines = [
        f"Against {before_name}: {result.exact} of {result.compared} lines measured in both reproduced "
        f"every decoded figure exactly ({', '.join(DECODED)})."
    ]
    lines += [f"  differs: {d}" for d in result.differences]
    for column, (low, high) in result.timed_ratios.items():
        lines.append(f"Timed, {column}: now / before {low:.2f}-{high:.2f} (machine and hour dependent).")
    return lines
