"""Round 3 of the adversarial suite (tests/sandbox_attacks_r3.py), in bwrap and in the fallback: every
attack fails, every honest edge case passes, no result text holds a line separator; and the intake
(record files, samples files) refuses FIFOs and strings with a trailing newline in both modes.

Each mode runs all its cases in two check_many batches (default limits, and a small memory limit).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from orl.errors import InputError
from orl.records import load_records
from orl.records.submit import check_submission
from orl.sandbox import SandboxLimits, check_many, runner, verdict
from tests.sandbox_attacks_r3 import SMALL_MEMORY, SMALL_MEMORY_MB, cases

TIMEOUT_S = 3.0
BWRAP_PROBLEM = runner.bwrap_problem()
needs_bwrap = pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=f"bwrap unusable here: {BWRAP_PROBLEM}")
MODES = [pytest.param("bwrap", marks=needs_bwrap), "fallback"]
CASES = cases()
REPO = Path(__file__).resolve().parent.parent


def _batch(mode: str, chosen: dict, limits: SandboxLimits | None = None) -> dict:
    results = check_many([p for p, _, _ in chosen.values()], [c for _, c, _ in chosen.values()], workers=2,
                         progress=False, timeout_s=TIMEOUT_S, isolation=mode, limits=limits)  # fmt: skip
    return dict(zip(chosen, results, strict=True))


@pytest.fixture(scope="module")
def suites() -> dict:
    return {}


def _suite(suites: dict, mode: str) -> dict:
    if mode not in suites:
        suites[mode] = {
            **_batch(mode, CASES),
            **_batch(mode, SMALL_MEMORY, SandboxLimits(memory_mb=SMALL_MEMORY_MB)),
        }
    return suites[mode]


ALL_CASES = {**CASES, **SMALL_MEMORY}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(ALL_CASES))
def test_round3_case_is_judged_right(suites, mode, name):
    result = _suite(suites, mode)[name]
    expected = ALL_CASES[name][2]
    assert result.result.startswith(expected), f"{name}: got {result.result!r}, expected {expected!r}..."
    assert result.passed == (expected == "passed")
    assert result.result.isprintable(), f"{name}: a result must not carry raw separators: {result.result!r}"
    assert result.memory_bound in ("cgroup", "watchdog+tmpfs"), result.memory_bound
    assert result.isolation == ("bwrap" if mode == "bwrap" else runner.fallback_label())


def test_round3_case_count():
    attacks = [name for name, (_, _, expected) in ALL_CASES.items() if expected != "passed"]
    assert len(attacks) >= 40 and len(ALL_CASES) - len(attacks) >= 8


def test_the_verdict_frame_is_read_by_its_length_never_by_lines():
    def frame(message: dict) -> bytes:
        from orl.sandbox.wire import dumps

        payload = dumps(message)
        return len(payload).to_bytes(4, "big") + payload

    good = {"passed": False, "result": "failed: x\u2028passed", "candidate_ended": False}
    assert verdict.parse_verdict(frame(good)) == good
    assert verdict.parse_verdict(b"0 passed\n") is None  # the old line format is no verdict at all
    assert verdict.parse_verdict(frame(good) + b"\x00") is None  # trailing bytes
    assert verdict.parse_verdict(frame(good)[:-1]) is None
    assert verdict.parse_verdict(frame({**good, "passed": 1})) is None  # a bool, not something equal to True
    assert verdict.parse_verdict(frame({**good, "extra": True})) is None
    passed, result = verdict.run_verdict({**good, "passed": True}, "done", [0, 0], SandboxLimits())
    assert (passed, result) == (False, "failed: x\u2028passed")  # passed only with the result "passed"


# ------------------------------------------------------------------------------------------
# Intake: record files and samples files, in both modes
# ------------------------------------------------------------------------------------------


def _in_thread(function, timeout_s: float = 10.0):
    """function() in a thread; (finished, its exception)."""
    outcome = {}

    def target():
        try:
            function()
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            outcome["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout_s)
    return not thread.is_alive(), outcome.get("error")


def _unblock(path: Path) -> None:
    """Open a FIFO for writing and close it at once, so a reader blocked on it returns (test cleanup)."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass


def _latency_record() -> dict:
    record = json.loads(
        (REPO / "results" / "tiny" / "latency" / "tinycode" / "dlm.jsonl").read_text().splitlines()[0]
    )
    record["kind"], record["per_problem"] = "latency", None
    record["metrics"] = {"tokens_per_s": 10.0, "latency_median_s": 1.0}
    record["env"] = {**record["env"], "gpu_name": "NVIDIA H200", "torch": "2.13.0", "date": "2026-12-01"}
    return record


@pytest.mark.parametrize("mode", MODES)
def test_record_readers_and_submit_refuse_a_fifo_without_blocking(tmp_path, mode):
    fifo = tmp_path / f"records-{mode}.jsonl"
    os.mkfifo(fifo)
    try:
        for reader in (load_records, check_submission):
            finished, error = _in_thread(lambda reader=reader: reader(fifo))
            assert finished, f"{reader.__name__} blocked on a FIFO"
            assert isinstance(error, InputError) and "not a regular file" in str(error)
        done = subprocess.run(
            [sys.executable, "-m", "orl.cli", "submit", str(fifo), "--root", str(tmp_path / "filed")],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode != 0 and "not a regular file" in done.stderr
        assert not (tmp_path / "filed").exists() or not any((tmp_path / "filed").rglob("*.jsonl"))
    finally:
        _unblock(fifo)


@pytest.mark.parametrize("mode", MODES)
def test_check_samples_refuses_a_fifo_samples_file(tmp_path, mode):
    fifo = tmp_path / "samples.jsonl"
    os.mkfifo(fifo)
    problems = tmp_path / "problems.jsonl"
    problems.write_text(
        json.dumps({"task_id": "A/0", "prompt": "def f():\n", "test": "", "entry_point": "f"}) + "\n"
    )
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "orl.cli",
                "check-samples",
                str(fifo),
                "--problems",
                str(problems),
                "--isolation",
                mode,
                "--no-progress",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        _unblock(fifo)
    assert done.returncode != 0 and "not a regular file; expected a samples file" in done.stderr


@pytest.mark.parametrize("mode", MODES)
def test_a_trailing_newline_fails_the_schema_and_submit(tmp_path, mode):
    record = _latency_record()
    record["extra"] = {"isolation": mode}
    path = tmp_path / "good.jsonl"
    path.write_text(json.dumps(record) + "\n")
    assert check_submission(path)[0]["env"]["git_sha"] == record["env"]["git_sha"]
    for field, value in (("git_sha", record["env"]["git_sha"] + "\n"), ("date", "2026-12-01\n")):
        bad = {**record, "env": {**record["env"], field: value}}
        path.write_text(json.dumps(bad) + "\n")
        with pytest.raises(InputError, match=f"env.{field}: expected"):
            load_records(path)
    bad = {**record, "status": "measured\n"}
    path.write_text(json.dumps(bad) + "\n")
    with pytest.raises(InputError, match="status: expected"):
        check_submission(path)
    bad = {**record, "metrics": {**record["metrics"], "pass_at_1\n": 0.5}}
    path.write_text(json.dumps(bad) + "\n")
    with pytest.raises(InputError, match="unknown metric"):
        load_records(path)


def test_the_tmpfs_term_counts_only_filesystems_of_the_views_size():
    """While bwrap builds a view, a process's /tmp can be the machine's disk for a moment: a filesystem
    larger than the view's tmpfs is never counted (this harness's own /tmp and /dev/shm are such)."""
    from orl.sandbox import memory

    own = [os.getpid()]
    assert memory.tmpfs_usage(own, set(), SandboxLimits().tmpfs_mb << 20) == 0
    assert (
        memory.tmpfs_usage(own, set(), 1 << 62) > 0
        or os.statvfs("/tmp").f_bfree == os.statvfs("/tmp").f_blocks
    )
