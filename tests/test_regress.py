"""`orl regress`: fails on a planted TPF drop and a planted 2x slowdown, passes on the same results."""

from __future__ import annotations

import copy

import pytest

from orl.cli import main
from orl.errors import ConfigError
from orl.records import make_record, write_records
from orl.records.regress import compare_runs, parse_tolerances

MODEL = {"name": "tiny-qwendlm", "precision": "float32"}


def run(machine_factor: float = 1.0) -> list[dict]:
    """One run's records; every wall time scaled by `machine_factor` (a slower machine)."""
    threshold = {"name": "threshold", "params": {"tau": 0.9}}
    records = [
        make_record(
            "kernel_bench",
            system="reference timing",
            engine="torch",
            model=MODEL,
            metrics={"wall_s": 0.25 * machine_factor},
        ),
        make_record(
            "quality",
            system="dLLM + ORL",
            engine="dlmrt",
            model=MODEL,
            policy=threshold,
            suite="tinycode",
            n_problems=164,
            split="test",
            metrics={"pass_at_1": 0.42, "tpf": 3.75, "nfe_mean": 12.0, "tokens": 7380},
        ),
        make_record(
            "latency",
            system="dLLM + ORL",
            engine="dlmrt",
            model=MODEL,
            policy=threshold,
            suite="tinycode",
            n_problems=164,
            metrics={
                "tpf": 3.75,
                "latency_median_s": 0.5 * machine_factor,
                "latency_p90_s": 0.7 * machine_factor,
                "tokens_per_s": 90.0 / machine_factor,
            },
        ),
        make_record(
            "latency",
            system="AR (hf)",
            engine="hf",
            model={"name": "tiny-ar", "precision": "float32"},
            suite="tinycode",
            n_problems=164,
            metrics={
                "tpf": 1.0,
                "latency_median_s": 1.5 * machine_factor,
                "latency_p90_s": 2.0 * machine_factor,
                "tokens_per_s": 30.0 / machine_factor,
            },
        ),
        make_record(
            "engine_bench",
            system="dLLM + ORL",
            engine="dlmrt",
            model=MODEL,
            suite="tinycode",
            metrics={"speedup_vs_eager": 2.4, "tokens_per_s": 95.0 / machine_factor},
        ),
    ]
    return records


def find(records, kind, system):
    return next(r for r in records if r["kind"] == kind and r["system"] == system)


def test_same_results_pass():
    report = compare_runs(run(), copy.deepcopy(run()))
    assert not report.failed() and report.regressions == 0 and report.compared > 10
    assert "PASS" in report.text()


def test_planted_tpf_drop_fails():
    current = run()
    find(current, "quality", "dLLM + ORL")["metrics"]["tpf"] = 3.5
    report = compare_runs(run(), current)
    assert report.failed() and report.regressions == 1
    assert "REGRESSION" in report.text() and "tpf 3.75 -> 3.5" in report.text()


def test_planted_2x_slowdown_fails_but_a_uniformly_slower_machine_passes():
    current = run()
    latency = find(current, "latency", "dLLM + ORL")["metrics"]
    latency["latency_median_s"] *= 2
    latency["latency_p90_s"] *= 2
    latency["tokens_per_s"] /= 2
    report = compare_runs(run(), current)
    assert report.failed() and report.regressions == 3
    assert "2x slower relative to the reference timing" in report.text()
    # Everything, the reference included, 2x slower: the machine, not the code.
    assert not compare_runs(run(), run(machine_factor=2.0)).failed()


def test_without_a_reference_timing_is_not_compared():
    baseline = [r for r in run() if r["system"] != "reference timing"]
    current = [r for r in run(machine_factor=3.0) if r["system"] != "reference timing"]
    report = compare_runs(baseline, current)
    assert not report.failed()
    assert "timing was not compared: no 'reference timing' record in baseline and current" in report.text()
    # In-run speedups are compared even without a reference.
    find(current, "engine_bench", "dLLM + ORL")["metrics"]["speedup_vs_eager"] = 1.2
    assert compare_runs(baseline, current).failed()


def test_tolerance_missing_records_and_improvements():
    current = run()
    find(current, "quality", "dLLM + ORL")["metrics"]["pass_at_1"] = 0.41
    assert compare_runs(run(), current).failed()
    assert not compare_runs(run(), current, tolerances={"pass_at_1": 0.01}).failed()
    # A record that stopped running, or vanished, is a regression.
    assert compare_runs(run(), run()[:-1]).failed()
    # A better TPF is a change: reported, fails only when strict.
    better = run()
    find(better, "quality", "dLLM + ORL")["metrics"]["tpf"] = 4.0
    report = compare_runs(run(), better)
    assert not report.failed() and report.failed(strict=True) and "CHANGED" in report.text()


def test_parse_tolerances():
    assert parse_tolerances(["0.001", "pass_at_1=0.02"]) == (0.001, {"pass_at_1": 0.02})
    for bad in (["abc"], ["latency_median_s=0.1"], ["-1"]):
        with pytest.raises(ConfigError):
            parse_tolerances(bad)


def test_cli(tmp_path, capsys):
    base, same, slow = tmp_path / "base.jsonl", tmp_path / "same.jsonl", tmp_path / "slow.jsonl"
    write_records(base, run())
    write_records(same, run())
    records = run()
    find(records, "latency", "AR (hf)")["metrics"]["latency_median_s"] *= 2
    find(records, "latency", "AR (hf)")["metrics"]["latency_p90_s"] *= 2
    write_records(slow, records)
    assert main(["regress", "--baseline", str(base), "--current", str(same)]) == 0
    assert "PASS" in capsys.readouterr().out
    assert main(["regress", "--baseline", str(base), "--current", str(slow)]) == 1
    assert "REGRESSION" in capsys.readouterr().out
    assert (
        main(["regress", "--baseline", str(base), "--current", str(slow), "--timing-threshold", "2.5"]) == 0
    )
    assert main(["regress", "--baseline", str(base), "--current", str(tmp_path / "absent.jsonl")]) == 2
