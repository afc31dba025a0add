"""scripts/gpu_check.sh as planned for one 15-minute device slot: two runs of at most 8 minutes each, a
preflight first in each, and a preflight that stops a run at once where there is no GPU."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu_check.sh"
LINE = re.compile(r"run=(?P<run>[12]) limit_s=(?P<limit>\d+) (?P<step>[a-z0-9_]+)")


def planned_steps() -> list[tuple[int, int, str]]:
    out = subprocess.run(["bash", str(SCRIPT), "--plan"], capture_output=True, text=True, check=True).stdout
    steps = []
    for line in out.splitlines():
        match = LINE.fullmatch(line)
        assert match, f"not a plan line: {line!r}"
        steps.append((int(match["run"]), int(match["limit"]), match["step"]))
    return steps


def test_two_runs_of_at_most_eight_minutes_each_preflight_first():
    steps = planned_steps()
    for run in (1, 2):
        mine = [(limit, step) for r, limit, step in steps if r == run]
        assert mine[0][1] == "preflight", f"run {run} does not start with its preflight"
        assert sum(limit for limit, _ in mine) <= 480, f"run {run} plans {sum(limit for limit, _ in mine)} s"
        assert len({step for _, step in mine}) == len(mine)
    assert "scale_qwen3_4b_b16" in [step for r, _, step in steps if r == 1], (
        "the most valuable row comes first"
    )


@pytest.mark.skipif(
    shutil.which("nvidia-smi") is not None, reason="this machine has a GPU: the preflight would pass"
)
def test_preflight_stops_the_run_where_there_is_no_gpu(tmp_path):
    run = subprocess.run(
        ["bash", str(SCRIPT), "--run", "1", str(tmp_path / "out")], capture_output=True, text=True, timeout=60
    )
    assert run.returncode != 0
    log = (tmp_path / "out" / "gpu_check.log").read_text()
    assert "preflight failed: run 1 stopped" in log and "scale_qwen3_4b_b16" not in log
