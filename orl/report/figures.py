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
rerun on the same records gives the same files (orl/report/figure_draw.py). Each figure is drawn by its
own module: figure_accuracy, figure_speed (tokens_per_s, speedup_vs_length), figure_entropy, figure_floor.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from orl.report.figure_accuracy import plot_accuracy_vs_tpf
from orl.report.figure_entropy import plot_entropy
from orl.report.figure_floor import plot_floor
from orl.report.figure_speed import plot_speedup_vs_length, plot_tokens_per_s

FIGURES = ("accuracy_vs_tpf", "tokens_per_s", "entropy_per_step", "speedup_vs_length", "floor")


def figure_paths(out_dir: str | Path) -> dict[str, list[Path]]:
    """{figure name: [png, pdf]} under <out_dir>/figures/."""
    base = Path(out_dir) / "figures"
    return {name: [base / f"{name}.png", base / f"{name}.pdf"] for name in FIGURES}


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
