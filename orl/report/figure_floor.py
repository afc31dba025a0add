"""The floor figure (orl/report/figures.py): time per forward against the hardware floor per model size,
from Table 3b's scale_bench records.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from orl.report.figure_draw import empty, new_figure, save
from orl.report.table3b import build_table3b


def floor_points(records: list[dict]) -> dict[tuple, list[tuple]]:
    """{(engine, precision, device, cpu linear): [(weight GB read per forward, time per forward s, floor s,
    arch),
    ...]}
    from the latest measured scale_bench record of each (arch, block, engine, precision, device)."""
    table = build_table3b(records)
    series: dict[tuple, list] = {}
    for line in table[table["status"] == "measured"].to_dict("records"):
        if line["weight_bytes_read"] is None or line["time_per_forward_s"] is None:
            continue
        linear = line.get("cpu_linear")
        key = (line["engine"], line["precision"], line["device"], None if pd.isna(linear) else linear)
        arch = f"{line['arch']} b{line['block']}" if line["block"] else str(line["arch"])
        series.setdefault(key, []).append((line["weight_bytes_read"] / 1e9, line["time_per_forward_s"],
                                           line["floor_s"], arch))  # fmt: skip
    return {key: sorted(points) for key, points in sorted(series.items(), key=str)}


def plot_floor(records: list[dict], paths: list[Path]) -> list[Path]:
    series = floor_points(records)
    fig = new_figure(6.4, 5.2)
    ax = fig.subplots()
    if not series:
        empty(ax, "no scale_bench records (orl bench-scale --arch ...; the DAG does not run it by default)")
        return save(fig, paths)
    floors = {}
    for (engine, precision, device, linear), points in series.items():
        via = f", {linear} linears" if linear else ""
        ax.plot(
            [p[0] for p in points],
            [1e3 * p[1] for p in points],
            marker="o",
            linestyle="-" if len(points) > 1 else "none",
            label=f"{engine} ({precision}{via}) on {device}",
        )
        for x, _, floor, arch in points:
            floors[(x, arch, device, linear)] = floor
    for (x, arch, device, linear), floor in sorted(floors.items(), key=str):
        # Each run measures its machine's bandwidth, so each has its own floor: the label says whose it is.
        ax.plot([x], [1e3 * floor], marker="_", markersize=18, color="black")
        run = f", {linear} run" if linear else ""
        ax.annotate(
            f"{arch} floor: {device}{run}",
            (x, 1e3 * floor),
            textcoords="offset points",
            xytext=(6, -3),
            fontsize=6,
        )
    ax.plot(
        [],
        [],
        marker="_",
        markersize=12,
        color="black",
        linestyle="none",
        label="hardware floor (bytes / bandwidth)",
    )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("weight bytes read per forward (GB)")
    ax.set_ylabel("time per forward (ms)")
    ax.set_title(
        "Table 3b: time per forward against the hardware floor (random weights, speed only)", fontsize=8
    )
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), frameon=False)
    return save(fig, paths)
