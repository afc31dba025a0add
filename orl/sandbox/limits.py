"""What one sandboxed run may use, and what it returns."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one run (the test process and the candidate process together).

    cpu_s defaults to the wall-clock timeout rounded up, plus 1.
    """

    timeout_s: float = 3.0  # wall clock for the whole run
    call_timeout_s: float | None = None  # one call of the candidate; None: only timeout_s applies
    cpu_s: int | None = None  # RLIMIT_CPU of each process
    memory_mb: int = 1024  # every process of the run together (orl/sandbox/memory.py), and RLIMIT_AS of each
    file_size_mb: int = 16  # RLIMIT_FSIZE: largest file a process may write
    max_processes: int = 8  # RLIMIT_NPROC: processes (threads count too) of each side
    max_open_files: int = 1024  # RLIMIT_NOFILE of each process: pipes and sockets hold kernel memory
    tmpfs_mb: int = 64  # size of each private /tmp and /dev/shm
    output_bytes: int = 8192  # tail of stdout+stderr kept in the result
    wire_bytes: int = 4 << 20  # largest message between the two processes (arguments or a returned value)


@dataclass
class ExecutionResult:
    """The verdict of one run. result is "passed", "failed: <reason>" or "timed out"."""

    task_id: str
    passed: bool
    result: str
    isolation: str  # "bwrap", "fallback+ns" or "fallback" (orl/sandbox/isolation.py)
    duration_s: float
    stdout_tail: str = ""
    returncode: int | None = None  # of the candidate's sandbox
    run_id: str = ""  # the ORL_SANDBOX_RUN marker in the programs' environment
    memory_bound: str = ""  # "cgroup", "watchdog+tmpfs" or "watchdog" (orl/sandbox/memory.py)
    peak_memory_mb: float = 0.0  # the most the run's processes held together, as last measured

    def to_record(self) -> dict:
        """The per_problem entry of a quality record (orl/records/schema.py)."""
        return {
            "task_id": self.task_id,
            "passed": self.passed,
            "result": self.result,
            "isolation": self.isolation,
            "memory_bound": self.memory_bound,
            "duration_s": round(self.duration_s, 4),
        }
