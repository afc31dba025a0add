"""The regression gate's file (orl/report/gate.py): built from the committed tiny records, it passes
against the committed tiny baseline, and a system that slowed down relative to its run fails."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from orl import rows
from orl.errors import InputError
from orl.records import load_records
from orl.records.regress import compare_runs
from orl.report.gate import gate_records, write_gate

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "results" / "tiny"
BASELINE = REPO / "results" / "gate" / "tiny-baseline.jsonl"


def _key(record: dict) -> str:
    return json.dumps(
        [
            record["kind"],
            record["system"],
            record["engine"],
            record.get("suite"),
            record["policy"],
            record["created"],
        ]
    )


def gate_files() -> list[Path]:
    """The record files the DAG's gate rule reads (RECORD_FILES in workflows/rules/report.smk): every
    suite's latency and engine records, of the primary training seed only (seed 0 in the tiny config:
    the other seeds' records share their keys), without the fixed-length runs (engine/length)."""
    latency = [p for p in (TINY / "latency").glob("*/*.jsonl") if not re.search(r"_seed[1-9][0-9]*$", p.stem)]
    engine = [p for p in (TINY / "engine").glob("*/*.jsonl") if p.parent.name != "length"]
    return sorted(latency + engine)


@pytest.fixture(scope="module")
def fresh():
    return gate_records([record for path in gate_files() for record in load_records(path)])


def test_the_committed_baseline_is_the_gate_file_of_the_committed_records(fresh):
    assert sorted(fresh, key=_key) == sorted(load_records(BASELINE), key=_key)
    kinds = {record["kind"] for record in fresh}
    assert kinds == set(rows.GATE_KINDS)
    (reference,) = [r for r in fresh if r["system"] == "reference timing"]
    source = rows.ROW[rows.GATE_REFERENCE].system
    assert reference["extra"]["reference_of"]["system"] == source
    assert set(reference["metrics"]) == {"latency_median_s"}


def test_the_gate_passes_on_the_same_run_and_normalises_by_the_reference(fresh):
    report = compare_runs(load_records(BASELINE), fresh)
    assert not report.failed(strict=True) and report.compared > 50
    assert "reference timing 'reference timing' (latency_median_s)" in report.text()


def test_a_machine_twice_as_slow_passes_a_system_twice_as_slow_fails(fresh):
    slower_machine = copy.deepcopy(fresh)
    for record in slower_machine:
        for metric, value in record["metrics"].items():
            if metric.endswith("_s") and metric != "train_wall_s":
                record["metrics"][metric] = value * 2
            elif metric.endswith("tokens_per_s"):
                record["metrics"][metric] = value / 2
    assert not compare_runs(fresh, slower_machine).failed()

    orl = rows.ROW[rows.TRAINED].system
    slower_system = copy.deepcopy(fresh)
    for record in slower_system:
        if record["kind"] == "latency" and record["system"] == orl:
            record["metrics"]["latency_median_s"] *= 2
    report = compare_runs(fresh, slower_system)
    assert report.failed() and f"latency | {orl} | dlmrt" in report.text() and "2x slower" in report.text()


def test_write_gate_needs_the_reference_row(tmp_path):
    records = [
        r
        for r in load_records(BASELINE)
        if r["system"] not in ("reference timing", rows.ROW[rows.GATE_REFERENCE].system)
    ]
    source = tmp_path / "latency.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in records))
    with pytest.raises(InputError, match="orl.rows.GATE_REFERENCE"):
        write_gate([source], tmp_path / "gate.jsonl")
    assert not (tmp_path / "gate.jsonl").exists()
