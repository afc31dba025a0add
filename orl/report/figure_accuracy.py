"""The accuracy_vs_tpf figure (orl/report/figures.py): pass@1 against TPF for every threshold sweep, one line
per system (the mean over its training seeds, the seeds' range as a band), and the AUP its table reports in
the legend (table_aups).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from orl.decoding.policy import Policy
from orl.eval.uncertainty import wilson
from orl.report.figure_draw import empty, new_figure, save


def pass_interval(record: dict) -> tuple[float, float] | None:
    """Wilson 95% interval of a sweep point's pass@1, from its per-problem outcomes."""
    per_problem = record.get("per_problem") or []
    if not per_problem:
        return None
    return wilson(sum(bool(p["passed"]) for p in per_problem), len(per_problem))


def sweep_curves(records: list[dict]) -> dict[tuple, list[tuple]]:
    """{(system, engine, suite, checkpoint digest): [(tpf, pass_at_1, tau, interval), ...] sorted by TPF}
    from measured sweep records: one curve per system and checkpoint (training seed)."""
    curves: dict[tuple, list] = {}
    for record in records:
        if record["kind"] != "sweep" or record["status"] != "measured":
            continue
        tpf, acc = record["metrics"].get("tpf"), record["metrics"].get("pass_at_1")
        if tpf is None or acc is None:
            continue
        block = record.get("policy")  # the value of the swept parameter (τ of the thresholds)
        tau = Policy.from_record(block, f"{record['system']}: policy").value if block else None
        key = (record["system"], record["engine"], record["suite"], record["model"]["ckpt_sha256"])
        curves.setdefault(key, []).append((tpf, acc, tau, pass_interval(record)))
    return {
        key: sorted(points, key=lambda p: p[:3])
        for key, points in sorted(curves.items(), key=lambda kv: str(kv[0]))
    }


def mean_curves(curves: dict[tuple, list[tuple]]) -> dict[tuple, list[tuple]]:
    """{(system, engine, suite): [(τ, mean TPF, mean pass@1, lowest pass@1, highest pass@1), ...] sorted by
    mean TPF}: a system's checkpoints (training seeds) averaged at each threshold they all ran."""
    by_system: dict[tuple, list[list[tuple]]] = {}
    for (system, engine, suite, _), points in curves.items():
        by_system.setdefault((system, engine, suite), []).append(points)
    out = {}
    for key, seeds in by_system.items():
        taus = set.intersection(*({p[2] for p in points} for points in seeds))
        rows = []
        for tau in taus:
            at = [next(p for p in points if p[2] == tau) for points in seeds]
            accs = [p[1] for p in at]
            rows.append((tau, sum(p[0] for p in at) / len(at), sum(accs) / len(accs), min(accs), max(accs)))
        out[key] = sorted(rows, key=lambda r: r[1])
    return out


def plot_accuracy_vs_tpf(
    records: list[dict], paths: list[Path], table_aups: dict | None = None
) -> list[Path]:
    """One line per system and suite: the mean over its training seeds at each threshold, the band the seeds
    span, τ at the ends of the line; the legend gives each system's AUP as its table reports it
    (`table_aups`: {(system, suite): (aup, lo, hi, table)}), so figure and tables agree."""
    curves = mean_curves(sweep_curves(records))
    suites = sorted({key[2] or "" for key in curves}) or [""]
    fig = new_figure(6.0 * len(suites), 5.6)
    axes = fig.subplots(1, len(suites), squeeze=False)[0]
    if not curves:
        empty(axes[0], "no measured records of kind 'sweep'")
    seeds = {}
    for key in sweep_curves(records):
        seeds[key[:3]] = seeds.get(key[:3], 0) + 1
    for ax, suite in zip(axes, suites, strict=True):
        panel = {key: rows for key, rows in curves.items() if (key[2] or "") == suite}
        for index, ((system, engine, _), rows) in enumerate(panel.items()):
            color = f"C{index % 10}"
            xs, ys = [r[1] for r in rows], [r[2] for r in rows]
            aup = (table_aups or {}).get((system, suite or None))
            label = f"{system} [{engine}]"
            if aup and aup[0] is not None:
                interval = (
                    f" [{aup[1]:.0f}, {aup[2]:.0f}]" if aup[1] is not None and aup[2] is not None else ""
                )
                label += f", AUP {aup[0]:.0f}{interval} (Table {aup[3]})"
            if seeds.get((system, engine, suite or None), 1) > 1:
                label += f", mean of {seeds[(system, engine, suite or None)]} seeds"
                ax.fill_between(
                    xs, [r[3] for r in rows], [r[4] for r in rows], color=color, alpha=0.12, linewidth=0
                )
            ax.plot(xs, ys, marker="o", markersize=3, linewidth=1.2, color=color, label=label)
            for r in (rows[0], rows[-1]) if len(rows) > 1 else rows:
                ax.annotate(
                    f"τ {r[0]:g}",
                    (r[1], r[2]),
                    textcoords="offset points",
                    xytext=(3, 3),
                    fontsize=6,
                    color=color,
                )
        if curves:
            ax.set_xlabel("tokens per forward (TPF)")
            ax.set_ylabel("pass@1")
            ax.set_title(
                f"accuracy vs TPF{f' ({suite})' if suite else ''}: threshold sweeps; band: the seeds' range",
                fontsize=8,
            )
            ax.set_xlim(left=0)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncols=1, frameon=False)
    return save(fig, paths)


def table_aups(*frames: pd.DataFrame) -> dict[tuple, tuple]:
    """{(system, suite): (aup, lo, hi, table)} from built tables, the first frame that has a line winning."""
    out: dict[tuple, tuple] = {}
    for frame in frames:
        if "aup" not in frame.columns:
            continue
        for row in frame[frame["status"] == "measured"].to_dict("records"):
            key = (row["system"], row.get("suite"))
            if key not in out and not pd.isna(row.get("aup")):
                lo, hi = row.get("aup_lo"), row.get("aup_hi")
                out[key] = (
                    float(row["aup"]),
                    None if pd.isna(lo) else float(lo),
                    None if pd.isna(hi) else float(hi),
                    frame.attrs.get("table"),
                )
    return out
