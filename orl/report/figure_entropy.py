"""The entropy_per_step figure (orl/report/figures.py): the mean entropy of the still-masked positions per
denoising step, base vs +ORL, from records of kind "entropy".
"""

from __future__ import annotations

from pathlib import Path

from orl.report.figure_draw import empty, new_figure, save


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
    fig = new_figure()
    ax = fig.subplots()
    if not curves:
        empty(ax, "no measured records of kind 'entropy' with extra.mean_entropy_per_step")
        return save(fig, paths)
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
    return save(fig, paths)
