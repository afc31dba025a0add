"""The test process's verdict, read by the harness: one length-prefixed wire frame on a pipe only the test
process holds (orl/sandbox/judge.py writes it), decoded as plain data, never split into lines, so no
character the candidate put in a message can end a line early and forge "passed"; and the (passed, result)
of a run from that verdict and how the run ended.
"""

from __future__ import annotations

import signal

from orl.sandbox import wire
from orl.sandbox.limits import SandboxLimits

# Bytes kept from the verdict pipe: one frame of judge.VERDICT_BYTES, and one byte to see more.
VERDICT_CAP = 4 + 4096 + 1


def parse_verdict(data: bytes) -> dict | None:
    """The test process's verdict frame (orl/sandbox/judge.py), or None without exactly one valid frame.

    The frame is read by its length prefix and decoded as plain data: its `passed` is a bool the
    test process set, and no character of the result text (which may quote the candidate) is read
    as a separator."""
    if len(data) < 4 or int.from_bytes(data[:4], "big") != len(data) - 4:
        return None
    try:
        verdict = wire.loads(data[4:])
    except wire.WireError:
        return None
    if not (type(verdict) is dict and set(verdict) == {"passed", "result", "candidate_ended"}
            and type(verdict["passed"]) is bool and type(verdict["result"]) is str
            and type(verdict["candidate_ended"]) is bool and verdict["result"]):  # fmt: skip
        return None
    return verdict


def describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "still running"
    if returncode < 0 or returncode > 128:
        number = -returncode if returncode < 0 else returncode - 128
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        why = {
            "SIGXCPU": ": CPU time limit",
            "SIGKILL": "",
            "SIGXFSZ": ": file size limit",
            "SIGSEGV": ": crashed",
        }
        return f"killed by {name}{why.get(name, '')}"
    return f"exited with status {returncode}"


def run_verdict(
    verdict: dict | None, outcome: str, returncodes: list, limits: SandboxLimits
) -> tuple[bool, str]:
    """(passed, result) of a run from the test process's verdict and how the run ended."""
    if outcome == "memory":
        return (
            False,
            f"failed: memory limit: the run's processes held more than {limits.memory_mb} MB together",
        )
    if outcome == "timed out":
        return False, "timed out"
    if verdict is None:
        return False, f"failed: the test process ended without a verdict ({describe_exit(returncodes[0])})"
    result = verdict["result"]
    if verdict["passed"] and result == "passed":
        return True, "passed"
    if not (result == "timed out" or result.startswith("failed: ")):
        result = "failed: " + result
    if verdict.get("candidate_ended"):
        result += f" ({describe_exit(returncodes[1])})"
    return False, result
