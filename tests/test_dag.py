"""The reproduction DAG: dry runs, configuration checks, and the smoke profile end to end."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile")]


def snakemake(*args: str, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run([*SNAKEMAKE, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


def test_dry_run_lists_the_whole_chain_for_table2(tmp_path):
    run = snakemake("-n", "reproduce_table2", cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    for rule in ("train_ar", "train_draft", "convert", "train_orl", "quantize_nvfp4", "sweep", "operating_point",
                 "latency", "quality_row", "render_table"):
        assert f"{rule} " in run.stdout or f"rule {rule}:" in run.stdout, rule


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--config", "profile=smoke", "colour=blue"], "colour"),
        (["--config", "profile=smoke", "latency_limit=many"], "latency_limit"),
        (["--config", "profile=paper"], "checkpoints.ar"),
    ],
)
def test_bad_config_stops_before_any_job(tmp_path, args, message):
    run = snakemake("-n", "reproduce_table2", *args, cwd=tmp_path)
    assert run.returncode != 0
    assert message in run.stdout + run.stderr
    assert not (tmp_path / "results").exists()


@pytest.mark.slow
def test_smoke_profile_reproduces_everything(tmp_path):
    run = snakemake("-c2", "reproduce_all", "--config", "profile=smoke", cwd=tmp_path, timeout=900)
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    reports = tmp_path / "reports" / "smoke"
    for n in range(1, 6):
        for ext in ("md", "tex", "csv"):
            assert (reports / f"table{n}.{ext}").is_file()
        with open(reports / f"table{n}.csv", newline="") as handle:
            rows = list(csv.DictReader(handle))
        assert rows, f"table {n} has no rows"
        for row in rows:
            assert row["status"] == "measured" or row["status"].startswith("not run: "), row
    for fig in ("accuracy_vs_tpf", "tokens_per_s", "entropy_per_step"):
        for ext in ("png", "pdf"):
            assert (reports / "figures" / f"{fig}.{ext}").stat().st_size > 0
    assert (reports / "index.md").is_file()
    # Measured rows exist where this machine can measure them: the CPU rows of Table 2.
    with open(reports / "table2.csv", newline="") as handle:
        statuses = {row["system"]: row["status"] for row in csv.DictReader(handle)}
    assert statuses["dLLM + ORL"] == "measured" and statuses["AR (hf)"] == "measured"
    assert statuses["AR + EAGLE3 (vLLM)"].startswith("not run: ")
    # A second run has nothing left to do.
    again = snakemake("-c2", "-n", "reproduce_all", "--config", "profile=smoke", cwd=tmp_path)
    assert "Nothing to be done" in again.stdout + again.stderr
