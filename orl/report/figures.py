"""The report's figures, as PNG and PDF, drawn from records only.

    accuracy_vs_tpf     pass@1 against TPF for every threshold sweep (records of kind
                        "sweep": one per threshold, metrics pass_at_1 and tpf,
                        policy.params.tau), one curve per system, AUP in the legend
    tokens_per_s        tokens/s bars for Table 2's rows (rows that did not run are
                        labelled "not run", never drawn as zero-height bars)
    entropy_per_step    mean entropy of the still-masked positions per denoising step
                        (records of kind "entropy", extra.mean_entropy_per_step) for
                        base vs +ORL: "uncertainty drops faster"

A figure without data is still written, saying which records it found none of, so
the report never links a missing file. Matplotlib is used through its object API
(Figure, no pyplot state) with the Agg renderer; PDFs carry no creation date, so a
rerun on the same records gives the same files.
"""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd

from orl.eval.aup import aup_or_none
from orl.io import atomic_write_bytes

FIGURES = ("accuracy_vs_tpf", "tokens_per_s", "entropy_per_step")


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


def sweep_curves(records: list[dict]) -> dict[tuple[str, str, str | None], list[tuple[float, float, float | None]]]:
    """{(system, engine, suite): [(tpf, pass_at_1, tau), ...] sorted by TPF} from measured sweep records."""
    curves: dict[tuple, list] = {}
    for record in records:
        if record["kind"] != "sweep" or record["status"] != "measured":
            continue
        tpf, acc = record["metrics"].get("tpf"), record["metrics"].get("pass_at_1")
        if tpf is None or acc is None:
            continue
        tau = ((record.get("policy") or {}).get("params") or {}).get("tau")
        curves.setdefault((record["system"], record["engine"], record["suite"]), []).append((tpf, acc, tau))
    return {key: sorted(points) for key, points in sorted(curves.items(), key=lambda kv: str(kv[0]))}


def plot_accuracy_vs_tpf(records: list[dict], paths: list[Path]) -> list[Path]:
    curves = sweep_curves(records)
    suites = sorted({key[2] or "" for key in curves}) or [""]
    fig = _new_figure(5.2 * len(suites), 4.2)
    axes = fig.subplots(1, len(suites), squeeze=False)[0]
    if not curves:
        _empty(axes[0], "no measured records of kind 'sweep'")
    for ax, suite in zip(axes, suites, strict=True):
        for (system, engine, curve_suite), points in curves.items():
            if (curve_suite or "") != suite:
                continue
            xs, ys = [p[0] for p in points], [p[1] for p in points]
            area, _ = aup_or_none([(x, y) for x, y in zip(xs, ys, strict=True)])
            label = f"AUP {area:.3g}" if area is not None else "AUP undefined: TPF < 1"
            ax.plot(xs, ys, marker="o", label=f"{system} [{engine}] ({label})")
            for x, y, tau in points:
                if tau is not None:
                    ax.annotate(f"{tau:g}", (x, y), textcoords="offset points", xytext=(3, 3), fontsize=6)
        if curves:
            ax.set_xlabel("tokens per forward (TPF)")
            ax.set_ylabel("pass@1")
            ax.set_title(f"accuracy vs TPF{f' ({suite})' if suite else ''}; labels: threshold tau")
            ax.set_ylim(-0.02, 1.02)
            ax.set_xlim(left=0.9)  # AUP integrates from TPF = 1
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    return _save(fig, paths)


def plot_tokens_per_s(table2: pd.DataFrame, paths: list[Path]) -> list[Path]:
    """Bars from a Table 2 frame (orl.report.table2.build_table2): one per system row."""
    rows = table2.drop_duplicates(subset=["system"])
    fig = _new_figure(6.8, 0.45 * max(len(rows), 4) + 1.2)
    ax = fig.subplots()
    labels = list(rows["system"])
    values = [None if pd.isna(v) else float(v) for v in rows["tokens_per_s"]]
    measured = [v for v in values if v is not None]
    if not measured:
        _empty(ax, "no measured Table 2 rows with tokens_per_s")
        return _save(fig, paths)
    positions = range(len(labels))
    ax.barh(list(positions), [v or 0 for v in values], color=["C0" if v else "none" for v in values])
    for pos, value, status in zip(positions, values, rows["status"], strict=True):
        # The table holds the full reason; the figure keeps it to one short line.
        text = f"{value:,.1f}" if value is not None else str(status).split(" (expected")[0][:50]
        ax.text(value or 0, pos, f" {text}", va="center", fontsize=7)
    ax.set_yticks(list(positions), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, max(measured) * 1.6)
    ax.set_xlabel("tokens/s (batch 1; generated tokens / wall time over the suite)")
    ax.set_title("Table 2 rows: tokens/s")
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
    return {key: [float(v) for v in rec["extra"]["mean_entropy_per_step"]] for key, rec in sorted(latest.items(), key=str)}


def plot_entropy(records: list[dict], paths: list[Path]) -> list[Path]:
    curves = entropy_curves(records)
    fig = _new_figure()
    ax = fig.subplots()
    if not curves:
        _empty(ax, "no measured records of kind 'entropy' with extra.mean_entropy_per_step")
        return _save(fig, paths)
    for (system, suite), values in curves.items():
        ax.plot(range(1, len(values) + 1), values, marker=".", label=f"{system}{f' ({suite})' if suite else ''}")
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("denoising step")
    ax.set_ylabel("mean entropy of still-masked positions")
    ax.set_title("uncertainty per denoising step: base vs +ORL")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, paths)


def write_figures(records: list[dict], table2: pd.DataFrame, out_dir: str | Path) -> list[Path]:
    """All three figures as PNG + PDF under <out_dir>/figures/; returns the paths written."""
    paths = figure_paths(out_dir)
    written = plot_accuracy_vs_tpf(records, paths["accuracy_vs_tpf"])
    written += plot_tokens_per_s(table2, paths["tokens_per_s"])
    written += plot_entropy(records, paths["entropy_per_step"])
    return written
