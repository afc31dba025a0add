"""`make reproduce`'s comparison of a re-run's table with the table before it (orl/report/reproduced.py)."""

from __future__ import annotations

import io

import pandas as pd

from orl.report.reproduced import compare_tables, reproduction_lines
from orl.report.summary import summary

BEFORE = """system,engine,verification,suite,tpf,pass_at_1,aup,tokens_per_s,speedup_vs_ar,status
AR,hf,strict,tinycode,1.0,0.8354,,400.0,1.0,measured
dLLM + ORL,dlmrt,strict,tinycode,3.6198547215496366,0.926829268292683,85.1,900.0,2.25,measured
relaxed,dflash,relaxed δ=0.1,tinycode,,0.9878,,700.0,1.75,measured
vLLM,vllm,strict,tinycode,,,,,,not run: no vllm
"""
AFTER = """system,engine,verification,suite,tpf,pass_at_1,aup,tokens_per_s,speedup_vs_ar,status
AR,hf,strict,tinycode,1.0,0.8354,,300.0,1.0,measured
dLLM + ORL,dlmrt,strict,tinycode,3.6198547215496366,0.926829268292683,85.1,600.0,2.0,measured
relaxed,dflash,relaxed δ=0.025,tinycode,,0.9878,,560.0,1.87,measured
vLLM,vllm,strict,tinycode,1.0,0.8354,,350.0,1.17,measured
"""


def _table(text: str) -> pd.DataFrame:
    return pd.read_csv(io.StringIO(text), dtype=str)


def test_decoded_figures_compare_exactly_and_timed_ones_as_ratios():
    result = compare_tables(_table(BEFORE), _table(AFTER))
    # vLLM was not run before: not compared. The relaxed line's rule moved: not reproduced, and said so.
    assert (result.compared, result.exact) == (3, 2)
    assert result.differences == [
        "relaxed / dflash / tinycode: verification relaxed δ=0.1 -> relaxed δ=0.025"
    ]
    low, high = result.timed_ratios["tokens_per_s"]
    assert (round(low, 4), round(high, 4)) == (0.6667, 0.8)
    # One digit of pass@1 differs: the line is not reproduced.
    changed = _table(AFTER.replace("0.926829268292683", "0.926829268292684"))
    assert compare_tables(_table(BEFORE), changed).exact == 1
    printed = reproduction_lines(result, "before.csv")
    assert printed[0].startswith("Against before.csv: 2 of 3 lines") and "differs: relaxed" in printed[1]


def test_summary_compares_only_after_a_run_that_measured(tmp_path):
    reports, results = tmp_path / "reports" / "p", tmp_path / "results" / "p"
    reports.mkdir(parents=True)
    (results / "quality").mkdir(parents=True)
    (reports / "table2.csv").write_text(AFTER)
    before = tmp_path / "before.csv"
    before.write_text(BEFORE)
    record = results / "quality" / "row.jsonl"
    record.write_text("{}\n")
    wrote = summary("p", "2", since=0.0, root=tmp_path, against=before)
    assert any(line.startswith("Against the table before this run") for line in wrote)
    # Nothing written since the run started: the table is the committed one, nothing to compare.
    untouched = summary("p", "2", since=record.stat().st_mtime + 10, root=tmp_path, against=before)
    assert not any(line.startswith("Against") for line in untouched)
