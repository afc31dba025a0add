"""The speed figures drawn from engine records (orl/report/figures.py): tokens_per_s (Table 2's measured lines
with their 95% intervals) and speedup_vs_length (dlmrt over the reference decoder at fixed generation
lengths, with paired bootstrap intervals).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pandas as pd

from orl.report import stats
from orl.report.figure_draw import empty, new_figure, save


def plot_tokens_per_s(table2: pd.DataFrame, paths: list[Path]) -> list[Path]:
    """Bars from a Table 2 frame (orl.report.table2.build_table2): one per measured system line and suite,
    with its 95% interval; the lines that did not run are listed under the bars, not drawn."""
    measured = table2[table2["status"] == "measured"].dropna(subset=["tokens_per_s"])
    measured = measured.drop_duplicates(subset=["system", "suite"])
    suites = list(dict.fromkeys(measured["suite"])) or [None]
    labels = [f"{r.system} ({r.suite})" if len(suites) > 1 else str(r.system) for r in measured.itertuples()]
    not_run = sorted(set(table2.loc[table2["status"] != "measured", "system"]))
    fig = new_figure(8.0, 0.32 * max(len(labels), 4) + 1.6 + 0.1 * len(not_run))
    ax = fig.subplots()
    if measured.empty:
        empty(ax, "no measured Table 2 rows with tokens_per_s")
        return save(fig, paths)
    values = [float(v) for v in measured["tokens_per_s"]]
    lo = [float(v) if not pd.isna(v) else x for v, x in zip(measured["tokens_per_s_lo"], values, strict=True)]
    hi = [float(v) if not pd.isna(v) else x for v, x in zip(measured["tokens_per_s_hi"], values, strict=True)]
    positions = list(range(len(labels)))
    colors = [f"C{suites.index(s) % 10}" for s in measured["suite"]]
    ax.barh(
        positions,
        values,
        xerr=[
            [v - a for v, a in zip(values, lo, strict=True)],
            [b - v for v, b in zip(values, hi, strict=True)],
        ],
        color=colors,
        capsize=2,
        error_kw={"linewidth": 0.8},
    )
    for pos, value, top in zip(positions, values, hi, strict=True):
        ax.text(top, pos, f" {value:,.0f}", va="center", fontsize=7)
    ax.set_yticks(positions, labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, max(hi) * 1.18)
    xlabel = "tokens/s at batch 1 (returned tokens / wall time over the suite); whiskers: 95% interval"
    # The constrained layout makes room for a wrapped label, where free text would be clipped; 72 characters
    # at 7 pt (capitals included) fit the width of the axes, which the long system names push to the right.
    if not_run:
        xlabel += "\n" + "\n".join(textwrap.wrap("Not run here: " + "; ".join(not_run), 72))
    ax.set_xlabel(xlabel, fontsize=7)
    ax.set_title("Table 2: tokens/s of the measured lines", fontsize=9)
    return save(fig, paths)


def length_curves(records: list[dict]) -> dict[tuple, list[tuple]]:
    """{(system, suite, engine): [(max_new_tokens, speedup over the reference, lo, hi), ...]} from the
    fixed-length engine_bench runs (extra.stop_at_eos false), the latest record per engine and length."""
    latest: dict[tuple, dict] = {}
    for record in records:
        extra = record.get("extra") or {}
        if (
            record["kind"] != "engine_bench"
            or record["status"] != "measured"
            or extra.get("stop_at_eos") is not False
        ):
            continue
        key = (record["system"], record["suite"], extra.get("max_new_tokens"), record["engine"])
        if key[2] is not None and (key not in latest or record["created"] > latest[key]["created"]):
            latest[key] = record
    curves: dict[tuple, list] = {}
    for (system, suite, length, engine), record in sorted(latest.items(), key=lambda kv: str(kv[0])):
        reference = latest.get((system, suite, length, "reference"))
        if engine == "reference" or reference is None:
            continue
        estimate = stats.compare(
            stats.request_runs([record]), stats.request_runs([reference]), stats.tokens_per_s_of, ratio=True
        )
        value = record["metrics"]["tokens_per_s"] / reference["metrics"]["tokens_per_s"]
        lo, hi = (estimate.lo, estimate.hi) if estimate is not None else (None, None)
        curves.setdefault((system, suite, engine), []).append((int(length), value, lo, hi))
    return {key: sorted(points) for key, points in curves.items()}


def plot_speedup_vs_length(records: list[dict], paths: list[Path]) -> list[Path]:
    curves = length_curves(records)
    fig = new_figure()
    ax = fig.subplots()
    if not curves:
        empty(
            ax,
            "no fixed-length engine_bench records (orl bench-engine --ignore-eos --max-new-tokens N, "
            "dlmrt and the reference decoder)",
        )
        return save(fig, paths)
    for (system, suite, engine), points in curves.items():
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        bars = [
            (y - p[2], p[3] - y) if p[2] is not None else (0.0, 0.0) for y, p in zip(ys, points, strict=True)
        ]
        ax.errorbar(
            xs,
            ys,
            yerr=list(zip(*bars, strict=True)),
            marker="o",
            capsize=3,
            label=f"{engine} / reference ({system}, {suite})",
        )
    ax.set_xscale("log", base=2)
    ax.set_xticks(
        sorted({p[0] for points in curves.values() for p in points}),
        [str(n) for n in sorted({p[0] for points in curves.values() for p in points})],
    )
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xlabel("generated tokens per request (fixed length, end token ignored)")
    ax.set_ylabel("tokens/s over the reference decoder")
    ax.set_title(
        "dlmrt's speedup over the reference decoder against generation length; 95% paired intervals",
        fontsize=8,
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return save(fig, paths)
