"""The report's figures, as PNG and PDF, drawn from records only.

    accuracy_vs_tpf     pass@1 against TPF for every threshold sweep (records of kind
                        "sweep": one per threshold, metrics pass_at_1 and tpf,
                        policy.params.tau), one line per system: the mean over its
                        training seeds with the seeds' range as a band, and the AUP its
                        table reports (Table 5, else Table 1) in the legend
    tokens_per_s        tokens/s bars for Table 2's measured lines with their 95% intervals
                        (the lines that did not run are listed under the bars)
    entropy_per_step    mean entropy of the still-masked positions per denoising step
                        (records of kind "entropy", extra.mean_entropy_per_step) for
                        base vs +ORL: "uncertainty drops faster"
    speedup_vs_length   dlmrt's tokens/s over the reference decoder's against the generation
                        length, from fixed-length runs (engine_bench records with
                        extra.stop_at_eos false, one `orl bench-engine --ignore-eos` per
                        length), with the paired bootstrap interval over requests
    floor               time per forward against the hardware floor per model size
                        (Table 3b's scale_bench records; says so where there are none)

A figure without data is still written, saying which records it found none of, so
the report never links a missing file. Matplotlib is used through its object API
(Figure, no pyplot state) with the Agg renderer; PDFs carry no creation date, so a
rerun on the same records gives the same files.
"""

from __future__ import annotations

import io
import textwrap
from pathlib import Path

import pandas as pd

from orl.decoding.policy import Policy
from orl.eval.uncertainty import wilson
from orl.io import atomic_write_bytes
from orl.report import stats
from orl.report.table3b import build_table3b

FIGURES = ("accuracy_vs_tpf", "tokens_per_s", "entropy_per_step", "speedup_vs_length", "floor")


def figure_paths(out_dir: str | Path) -> dict[str, list[Path]]:
    """{figure name: [png, pdf]} under <out_dir>/figures/."""
    base = Path(out_dir) / "figures"
    return {name: [base / f"{name}.png", base / f"{name}.pdf"] for name in FIGURES}


def _new_figure(width: float = 6.4, height: float = 4.2):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def _save(fig, paths: list[Path]) -> list[Path]:
    for path in paths:
        buffer = io.BytesIO()
        fmt = path.suffix.lstrip(".")
        metadata = {"CreationDate": None} if fmt == "pdf" else {"Software": None}
        fig.savefig(buffer, format=fmt, dpi=150, metadata=metadata)
        atomic_write_bytes(path, buffer.getvalue())
    return paths


def _empty(ax, message: str) -> None:
    ax.text(0.5, 0.5, message, ha="center", va="center", wrap=True, transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def _interval(record: dict) -> tuple[float, float] | None:
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
        curves.setdefault(key, []).append((tpf, acc, tau, _interval(record)))
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
    fig = _new_figure(6.0 * len(suites), 5.6)
    axes = fig.subplots(1, len(suites), squeeze=False)[0]
    if not curves:
        _empty(axes[0], "no measured records of kind 'sweep'")
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
    return _save(fig, paths)


def plot_tokens_per_s(table2: pd.DataFrame, paths: list[Path]) -> list[Path]:
    """Bars from a Table 2 frame (orl.report.table2.build_table2): one per measured system line and suite,
    with its 95% interval; the lines that did not run are listed under the bars, not drawn."""
    measured = table2[table2["status"] == "measured"].dropna(subset=["tokens_per_s"])
    measured = measured.drop_duplicates(subset=["system", "suite"])
    suites = list(dict.fromkeys(measured["suite"])) or [None]
    labels = [f"{r.system} ({r.suite})" if len(suites) > 1 else str(r.system) for r in measured.itertuples()]
    not_run = sorted(set(table2.loc[table2["status"] != "measured", "system"]))
    fig = _new_figure(8.0, 0.32 * max(len(labels), 4) + 1.6 + 0.1 * len(not_run))
    ax = fig.subplots()
    if measured.empty:
        _empty(ax, "no measured Table 2 rows with tokens_per_s")
        return _save(fig, paths)
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
    if not_run:  # the constrained layout makes room for a wrapped label, where free text would be clipped
        xlabel += "\n" + "\n".join(textwrap.wrap("Not run here: " + "; ".join(not_run), 120))
    ax.set_xlabel(xlabel, fontsize=7)
    ax.set_title("Table 2: tokens/s of the measured lines", fontsize=9)
    return _save(fig, paths)


def entropy_curves(records: list[dict]) -> dict[tuple[str, str | None], list[float]]:
    """{(system, suite): mean entropy per step} from the latest measured entropy record of each."""
    latest: dict[tuple, dict] = {}
    for record in records:
        if record["kind"] != "entropy" or record["status"] != "measured":
            continue
        values = (record.get("extra") or {}).get("mean_entropy_per_step")
        if not isinstance(values, list) or not values:
            continue
        key = (record["system"], record["suite"])
        if key not in latest or record["created"] > latest[key]["created"]:
            latest[key] = record
    return {
        key: [float(v) for v in rec["extra"]["mean_entropy_per_step"]]
        for key, rec in sorted(latest.items(), key=str)
    }


def plot_entropy(records: list[dict], paths: list[Path]) -> list[Path]:
    curves = entropy_curves(records)
    fig = _new_figure()
    ax = fig.subplots()
    if not curves:
        _empty(ax, "no measured records of kind 'entropy' with extra.mean_entropy_per_step")
        return _save(fig, paths)
    for (system, suite), values in curves.items():
        ax.plot(
            range(1, len(values) + 1), values, marker=".", label=f"{system}{f' ({suite})' if suite else ''}"
        )
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("denoising step")
    ax.set_ylabel("mean entropy of still-masked positions")
    ax.set_title("uncertainty per denoising step: base vs +ORL")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, paths)


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
    fig = _new_figure()
    ax = fig.subplots()
    if not curves:
        _empty(
            ax,
            "no fixed-length engine_bench records (orl bench-engine --ignore-eos --max-new-tokens N, "
            "dlmrt and the reference decoder)",
        )
        return _save(fig, paths)
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
    return _save(fig, paths)


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
    fig = _new_figure(6.4, 5.2)
    ax = fig.subplots()
    if not series:
        _empty(ax, "no scale_bench records (orl bench-scale --arch ...; the DAG does not run it by default)")
        return _save(fig, paths)
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
    return _save(fig, paths)


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


def write_figures(
    records: list[dict], table2: pd.DataFrame, out_dir: str | Path, aups: dict | None = None
) -> list[Path]:
    """Every figure as PNG + PDF under <out_dir>/figures/; returns the paths written. `aups`: the tables'
    AUPs (table_aups) for the accuracy_vs_tpf legend."""
    paths = figure_paths(out_dir)
    written = plot_accuracy_vs_tpf(records, paths["accuracy_vs_tpf"], aups)
    written += plot_tokens_per_s(table2, paths["tokens_per_s"])
    written += plot_entropy(records, paths["entropy_per_step"])
    written += plot_speedup_vs_length(records, paths["speedup_vs_length"])
    written += plot_floor(records, paths["floor"])
    return written
