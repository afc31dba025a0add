"""scripts/stage_times.py: per-rule wall times read from a Snakemake log of the format Snakemake writes."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "stage_times.py"
spec = importlib.util.spec_from_file_location("stage_times", SCRIPT)
stage_times = importlib.util.module_from_spec(spec)
spec.loader.exec_module(stage_times)

LOG = """Building DAG of jobs...
[Sat Dec  5 16:37:22 2026]
localrule train_ablation:
    input: results/tiny/ckpt/dlm/config.json
    jobid: 17
    wildcards: ablation=no-aec, seed=0
[Sat Dec  5 16:37:22 2026]
rule sweep:
    jobid: 3
[Sat Dec  5 16:38:02 2026]
Finished jobid: 3 (Rule: sweep)
1 of 3 steps (33%) done
[Sat Dec  5 16:41:35 2026]
Finished jobid: 17 (Rule: train_ablation)
[Sat Dec  5 16:41:35 2026]
rule sweep:
    jobid: 4
"""


def test_jobs_are_timed_from_their_start_to_their_finished_line(tmp_path):
    log = tmp_path / "run.snakemake.log"
    log.write_text(LOG)
    summary = stage_times.stage_times([str(log)])
    assert summary["rules"]["train_ablation"] == {
        "jobs": 1,
        "total_s": 253.0,
        "max_s": 253.0,
        "mean_s": 253.0,
    }
    assert summary["rules"]["sweep"]["jobs"] == 1 and summary["rules"]["sweep"]["total_s"] == 40.0
    assert summary["unfinished"] == {"sweep": 1}  # jobid 4 never finished
    assert summary["runs"][0]["elapsed_s"] == 253.0
    out = tmp_path / "times.json"
    assert stage_times.main([str(log), "--out", str(out)]) == 0 and out.is_file()
