"""What one sandboxed run may use, and what it returns."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one run. cpu_s defaults to the wall-clock timeout rounded up, plus 1."""

    timeout_s: float = 3.0
    cpu_s: int | None = None
    memory_mb: int = 1024  # RLIMIT_AS per process
    file_size_mb: int = 16  # RLIMIT_FSIZE: largest file the program may write
    max_processes: int = 8  # RLIMIT_NPROC: processes (threads count too) the program may own
    tmpfs_mb: int = 64  # size of the private /tmp in bwrap mode
    output_bytes: int = 8192  # tail of stdout+stderr kept in the result


@dataclass
class ExecutionResult:
    """The verdict of one run. result is "passed", "failed: <reason>" or "timed out"."""

    task_id: str
    passed: bool
    result: str
    isolation: str
    duration_s: float
    stdout_tail: str = ""
    returncode: int | None = None
    run_id: str = ""  # the ORL_SANDBOX_RUN marker in the program's environment

    def to_record(self) -> dict:
        """The per_problem entry of a quality record (orl/records.py)."""
        return {
            "task_id": self.task_id,
            "passed": self.passed,
            "result": self.result,
            "isolation": self.isolation,
            "duration_s": round(self.duration_s, 4),
        }
