"""Killing `orl check-samples` (SIGKILL or SIGTERM) while it runs samples leaves nothing behind:
no process of any run, and no orl-sandbox-* folder of that harness process."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from orl.sandbox import runner
from orl.sandbox.cleanup import PREFIX
from tests.sandbox_attacks import ADD, body

BWRAP_PROBLEM = runner.bwrap_problem()
MODES = [
    pytest.param(
        "bwrap", marks=pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=f"bwrap: {BWRAP_PROBLEM}")
    ),
    "fallback",
]


def _owned_by(pid: int) -> list[int]:
    """Processes whose environment names harness `pid` as their owner."""
    needle = f"ORL_SANDBOX_OWNER={pid}.".encode()
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if any(
                    entry.startswith(needle)
                    for entry in Path(f"/proc/{name}/environ").read_bytes().split(b"\0")
                ):
                    found.append(int(name))
            except OSError:
                continue
    return found


def _with_cmdline(needle: bytes) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if needle in Path(f"/proc/{name}/cmdline").read_bytes():
                    found.append(int(name))
            except OSError:
                continue
    return found


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
@pytest.mark.parametrize("mode", MODES)
def test_killing_check_samples_leaves_nothing_running_or_written(tmp_path, mode, sig):
    marker = f"{secrets.randbelow(50) + 40}.{secrets.randbelow(10**9):09d}"
    hang = body(f"""
import os, subprocess, time
subprocess.Popen(['sleep', '{marker}'], start_new_session=True)
if os.fork() == 0:
    os.setsid()
    os.execvp('sleep', ['sleep', '{marker}'])
time.sleep(60)""")
    problems = tmp_path / "problems.jsonl"
    problems.write_text(json.dumps(ADD) + "\n")
    samples = tmp_path / "samples.jsonl"
    samples.write_text(
        # Four distinct programs (check_many runs identical ones once), two running at a time.
        "".join(
            json.dumps({"task_id": ADD["task_id"], "completion": f"{hang}\n# sample {i}\n"}) + "\n"
            for i in range(4)
        )
    )
    harness = subprocess.Popen(
        [sys.executable, "-m", "orl.cli", "check-samples", str(samples), "--problems", str(problems),
         "--isolation", mode, "--timeout", "60", "--workers", "2", "--no-progress"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while len(_with_cmdline(marker.encode())) < 4 and time.monotonic() < deadline:  # both runs are going
            time.sleep(0.05)
        assert len(_with_cmdline(marker.encode())) >= 4, "the samples did not start"
        assert _owned_by(harness.pid)
        harness.send_signal(sig)
        harness.wait(timeout=30)
        deadline = time.monotonic() + 5  # the kernel delivers the death signals; give it a moment
        while (_owned_by(harness.pid) or _with_cmdline(marker.encode())) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _owned_by(harness.pid) == [] and _with_cmdline(marker.encode()) == []
        assert [p for p in os.listdir(tempfile.gettempdir()) if p.startswith(f"{PREFIX}{harness.pid}.")] == []
        assert not Path(f"{samples}_results.jsonl").exists()  # and no partial results file
    finally:
        harness.kill()
        for pid in _with_cmdline(marker.encode()):
            os.kill(pid, signal.SIGKILL)
