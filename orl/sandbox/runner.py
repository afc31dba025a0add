"""Running one sample: a test process and a candidate process, each in its own sandbox.

The candidate process (orl/sandbox/candidate.py) runs prompt + completion and answers
calls; the test process (orl/sandbox/judge.py) runs the prompt's helpers and the tests,
calls the candidate through a proxy that carries only plain data (orl/sandbox/wire.py),
and writes the verdict to a pipe only it holds, as one length-prefixed wire frame that
this module decodes (_parse_verdict): never split into lines, so no character the
candidate put in a message can end a line early and forge "passed". The candidate can
reach neither that pipe, nor the tests, nor the test process's memory: the two run in separate PID
namespaces, and as root under separate uids. Whatever the candidate does to its own
interpreter (patched builtins, a fake `math`, an object equal to everything, frames,
gc, exit codes, printing "passed") changes only the values it sends back. (The weak
fallback without root cannot promise that: there the candidate runs as the harness's
user, who may ptrace the harness; the test process is at least made non-dumpable.)

Isolation, as the caller asks for it:
    "bwrap"     the default, and required: SandboxUnavailable when bwrap cannot run here
    "fallback"  accepted only when asked for by name (orl eval-quality / check-samples
                --isolation fallback, orl.isolation in an ORL training config)
    "auto"      bwrap when its self-test passes, else the fallback with a warning
and as results name what ran: "bwrap"; "fallback+ns" (the fallback as root where
unshare(2) works: the same namespaces and filesystem view as bwrap, built by
confine.py); "fallback" (the weak one: no namespaces, the real filesystem and /tmp,
and a private uid only as root). The view: orl/sandbox/isolation.py. The limits:
SandboxLimits; memory per run: orl/sandbox/memory.py and orl/sandbox/seccomp.py; what
crosses and how exceptions and iterators are rebuilt: orl/sandbox/judge.py and
orl/sandbox/candidate.py; cleanup: orl/sandbox/cleanup.py.
"""

from __future__ import annotations

import functools
import marshal
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass

from orl.errors import InputError
from orl.sandbox import cleanup, memory, seccomp, wire
from orl.sandbox.isolation import (
    ISOLATION_CHOICES,
    SANDBOX_PATH,
    SandboxUnavailable,
    bwrap_command,
    bwrap_path,
    interpreter,
    is_root,
    sandbox_view,
)
from orl.sandbox.limits import ExecutionResult, SandboxLimits
from orl.sandbox.stub import launch

TICK_S = 0.02  # how often the memory of a run is measured
DRAIN_S = 0.1  # how long output is still read after the verdict
VERDICT_CAP = (
    4 + 4096 + 1
)  # bytes kept from the verdict pipe: one frame of judge.VERDICT_BYTES, and one byte to see more
CONFINE_MODES = {"bwrap": "bwrap", "fallback+ns": "namespaces", "fallback": "plain"}


@functools.lru_cache(maxsize=1)
def bwrap_problem() -> str | None:
    """None when bwrap runs a passing sample here; otherwise why not."""
    if bwrap_path() is None:
        return "bwrap is not installed (apt-get install -y bubblewrap)"
    probe = _self_test("bwrap")
    if probe.passed:
        return None
    return f"bwrap self-test did not pass ({probe.result}; output: {probe.stdout_tail.strip()[-300:]!r})"


@functools.lru_cache(maxsize=1)
def fallback_label() -> str:
    """The fallback this machine allows: "fallback+ns" when namespaces work (root), else "fallback"."""
    return "fallback+ns" if is_root() and _self_test("fallback+ns").passed else "fallback"


@functools.lru_cache(maxsize=1)
def weak_fallback_problem() -> str | None:
    """None when the weak fallback runs a passing sample here; otherwise why not (e.g. its private
    uid cannot read a Python installed in a home folder)."""
    probe = _self_test("fallback")
    if probe.passed:
        return None
    hint = (f" (as root each side runs under a private uid, which must be able to read the Python "
            f"installation in {sys.base_prefix})") if is_root() else ""  # fmt: skip
    return f"self-test did not pass: {probe.result}{hint}; output: {probe.stdout_tail.strip()[-300:]!r}"


def _self_test(label: str) -> ExecutionResult:
    """A passing sample whose both sides import a module from disk after dropping privileges."""
    return _run_sample("import fractions\ndef f():\n    return 1\n",
                       "import fractions\ndef check(c):\n    assert c() == 1\n", "f", "",
                       f"{label}-self-test", SandboxLimits(timeout_s=20), label)  # fmt: skip


@functools.lru_cache(maxsize=4)
def _warn_fallback(reason: str, label: str) -> None:
    warnings.warn(f"sandbox: {reason}; running model-generated code in the fallback sandbox ({label})",
                  RuntimeWarning, stacklevel=4)  # fmt: skip


def resolve_isolation(requested: str = "bwrap") -> str:
    """The label of the isolation to run for a request (see the module docstring)."""
    if requested in ("bwrap", "auto"):
        problem = bwrap_problem()
        if problem is None:
            return "bwrap"
        if requested == "bwrap":
            raise SandboxUnavailable(
                f"sandbox: isolation 'bwrap' is required but cannot run here: {problem}. Install bubblewrap, "
                "or accept the weaker fallback sandbox by name (--isolation fallback; orl.isolation: "
                "fallback)"
            )
        label = resolve_isolation("fallback")
        _warn_fallback(problem, label)
        return label
    if requested == "fallback":
        label = fallback_label()
        if label == "fallback" and weak_fallback_problem() is not None:
            raise SandboxUnavailable(
                f"sandbox: the fallback sandbox cannot run here either: {weak_fallback_problem()}"
            )
        return label
    if requested == "fallback+ns" and fallback_label() == "fallback+ns":
        return requested
    raise InputError(f"sandbox: isolation: expected one of {', '.join(ISOLATION_CHOICES)}, got {requested!r}")


def run_program(
    code: str,
    test: str = "",
    entry_point: str | None = None,
    *,
    helpers: str = "",
    task_id: str = "program",
    limits: SandboxLimits | None = None,
    isolation: str = "bwrap",
) -> ExecutionResult:
    """Run `code` (untrusted) in the candidate process and `helpers` + `test` (trusted) in the test
    process, then `check(<entry_point>)` there with a proxy of the candidate's function.

    Without an entry point the run passes when both code and test run to their end.
    """
    return _run_sample(code, test, entry_point, helpers, task_id, limits or SandboxLimits(),
                       resolve_isolation(isolation))  # fmt: skip


@dataclass
class _Side:
    """One of the two sandboxes of a run."""

    proc: subprocess.Popen
    uid: int | None
    workdir: str | None
    sync_w: int | None  # cgroup mode: the go signal, written once the processes are in the cgroup


def _spawn(role: str, job: dict, fds: tuple[int, ...], out_w: int, label: str, limits: SandboxLimits,
           run_id: str, wait_for_go: bool) -> _Side:  # fmt: skip
    mode = CONFINE_MODES[label]
    # A fresh uid per side (root only): nothing else runs under it, so RLIMIT_NPROC counts
    # only this side's processes and "kill every process of this uid" is exact.
    uid = secrets.choice(cleanup.FRESH_UIDS) if is_root() else None
    workdir = None
    if mode == "plain":
        workdir = tempfile.mkdtemp(prefix=f"{cleanup.PREFIX}{cleanup.owner_tag()}-")
        if uid is not None:
            os.chown(workdir, uid, uid)
    cwd = workdir or "/tmp"
    env = {"PATH": SANDBOX_PATH, "HOME": cwd, "TMPDIR": cwd, "LANG": "C.UTF-8", "ORL_SANDBOX_RUN": run_id,
           "ORL_SANDBOX_OWNER": cleanup.owner_tag()}  # fmt: skip
    sync_r, sync_w = os.pipe() if wait_for_go else (None, None)
    view = sandbox_view(limits.tmpfs_mb << 20)
    nproc = limits.max_processes
    if uid is None:  # RLIMIT_NPROC counts every process of the harness's user
        nproc += sum(cleanup.owner_uid(pid) == os.getuid() for pid in cleanup.processes())
    job["confine"] = {
        "mode": mode,
        "uid": uid,
        "cwd": cwd,
        "harness_pid": os.getpid(),
        "sync_fd": sync_r,
        "view": view if mode == "namespaces" else None,
        "rlimits": {
            "RLIMIT_CPU": limits.cpu_s or int(limits.timeout_s) + 1,
            "RLIMIT_AS": limits.memory_mb << 20,
            "RLIMIT_FSIZE": limits.file_size_mb << 20,
            "RLIMIT_NPROC": nproc,
            "RLIMIT_CORE": 0,
            "RLIMIT_NOFILE": limits.max_open_files,
        },
        "seccomp": seccomp.program() if mode != "bwrap" else None,
    }
    bootstrap, code_fd = launch(role)
    argv = [interpreter(), "-I", "-S", "-u", "-c", *bootstrap]
    stdin = _memfd("orl-sandbox-job", marshal.dumps(job))  # the job, read once by the sandbox's trusted code
    filter_fd = None
    try:
        if mode == "bwrap":  # bwrap reads the seccomp filter from an fd
            filter_fd = _memfd("orl-sandbox-seccomp", seccomp.program())
            seccomp_args = ["--seccomp", str(filter_fd)] if filter_fd is not None else []
            argv = [*bwrap_command(view, env), *seccomp_args, "--", *argv]
        try:
            extra = tuple(fd for fd in (code_fd, sync_r, filter_fd) if fd is not None)
            proc = subprocess.Popen(
                argv,
                stdin=stdin,
                stdout=out_w,
                stderr=subprocess.STDOUT,
                pass_fds=fds + extra,
                start_new_session=True,
                env=env,
                cwd=workdir or "/",
            )
        except BaseException:
            if workdir:
                shutil.rmtree(workdir, ignore_errors=True)
            raise
        finally:
            if sync_r is not None:
                os.close(sync_r)
    finally:
        os.close(stdin)
        if filter_fd is not None:
            os.close(filter_fd)
    return _Side(proc, uid, workdir, sync_w)


def _memfd(name: str, data: bytes | None) -> int | None:
    """A memfd holding `data`, read from its start by the sandbox (None for None)."""
    if data is None:
        return None
    fd = os.memfd_create(name)
    with open(fd, "wb", closefd=False) as handle:
        handle.write(data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _run_sample(
    code: str,
    test: str,
    entry_point: str | None,
    helpers: str,
    task_id: str,
    limits: SandboxLimits,
    label: str,
) -> ExecutionResult:
    cleanup.clean_stale()
    run_id = secrets.token_hex(8)
    parent = memory.cgroup_parent()
    bound = (
        memory.CgroupBound(parent, f"{cleanup.PREFIX}{cleanup.owner_tag()}-{run_id}", limits.memory_mb << 20)
        if parent is not None
        else None
    )
    verdict_r, verdict_w = os.pipe()
    request_r, request_w = os.pipe()
    reply_r, reply_w = os.pipe()
    out_r, out_w = os.pipe()
    wire = {"entry_point": entry_point, "wire_bytes": limits.wire_bytes}
    sides: list[_Side] = []
    start = time.monotonic()
    try:
        judge_job = {
            **wire,
            "helpers": helpers,
            "test": test,
            "verdict_fd": verdict_w,
            "request_fd": request_w,
            "reply_fd": reply_r,
            "call_timeout_s": limits.call_timeout_s,
        }
        sides.append(_spawn("judge", judge_job, (verdict_w, request_w, reply_r), out_w, label, limits, run_id,
                            bound is not None))  # fmt: skip
        candidate_job = {**wire, "code": code, "request_fd": request_r, "reply_fd": reply_w}
        sides.append(_spawn("candidate", candidate_job, (request_r, reply_w), out_w, label, limits, run_id,
                            bound is not None))  # fmt: skip
    except BaseException:
        _teardown(sides, label, run_id, bound)
        os.close(out_r)
        os.close(verdict_r)
        raise
    finally:
        for fd in (verdict_w, request_r, request_w, reply_r, reply_w, out_w):  # the sandboxes hold them now
            os.close(fd)
    try:
        roots = [side.proc.pid for side in sides]
        if bound is not None:
            bound.adopt(roots)
            for side in sides:
                os.write(side.sync_w, b"g")
        guard = bound or memory.TreeWatchdog(
            limits.memory_mb << 20,
            roots,
            _weak_members(label, sides, run_id),
            tmpfs_bytes=limits.tmpfs_mb << 20
            if label != "fallback" and seccomp.program() is not None
            else None,
        )
        output, verdict_bytes, outcome = _collect(
            out_r, verdict_r, start + limits.timeout_s, limits.output_bytes, guard
        )
        verdict = _parse_verdict(verdict_bytes)
        if verdict is not None and verdict.get("candidate_ended"):
            try:  # let the candidate's sandbox report how its process ended
                sides[1].proc.wait(timeout=DRAIN_S)
            except subprocess.TimeoutExpired:
                pass
        returncodes = [side.proc.poll() for side in sides]
    finally:
        os.close(out_r)
        os.close(verdict_r)
        _teardown(sides, label, run_id, bound)
    passed, result = _verdict(verdict, outcome, returncodes, limits)
    return ExecutionResult(
        task_id=task_id, passed=passed, result=result, isolation=label, duration_s=time.monotonic() - start,
        stdout_tail=output.decode("utf-8", "replace"), returncode=returncodes[1], run_id=run_id,
        memory_bound=guard.kind, peak_memory_mb=round(guard.peak / 2**20, 1),
    )  # fmt: skip


def _weak_members(label: str, sides: list[_Side], run_id: str):
    """In the weak fallback, processes can leave the launched trees (setsid + double fork):
    they are found by the run's uids (root) or by the run's marker in their environment."""
    if label != "fallback":
        return None
    uids = {side.uid for side in sides}
    marker = f"ORL_SANDBOX_RUN={run_id}".encode()
    if None not in uids:
        return lambda: {pid for pid in cleanup.processes() if cleanup.owner_uid(pid) in uids}
    return lambda: {pid for pid in cleanup.processes() if marker in cleanup.environment_of(pid)}


def _collect(out_fd: int, verdict_fd: int, deadline: float, cap: int, guard) -> tuple[bytes, bytes, str]:
    """Read the output (keeping its last `cap` bytes) and the verdict until the test process is done.

    Returns (output tail, verdict bytes, outcome): "done", "timed out" or "memory". The memory
    of the run is measured every tick and once more when the verdict is complete.
    """
    selector = selectors.DefaultSelector()
    selector.register(out_fd, selectors.EVENT_READ, "out")
    selector.register(verdict_fd, selectors.EVENT_READ, "verdict")
    output, verdict = bytearray(), bytearray()
    verdict_at = None
    next_check = 0.0
    try:
        while True:
            now = time.monotonic()
            if verdict_at is not None and (now - verdict_at > DRAIN_S or len(selector.get_map()) == 0):
                return bytes(output), bytes(verdict), "done"
            if now >= deadline:
                return bytes(output), bytes(verdict), "timed out"
            if now >= next_check:
                if guard.over():
                    return bytes(output), bytes(verdict), "memory"
                next_check = now + TICK_S
            for key, _ in selector.select(timeout=max(0.001, min(TICK_S, deadline - now))):
                data = os.read(key.fd, 1 << 16)
                if not data:
                    selector.unregister(key.fd)
                    if key.data == "verdict":
                        verdict_at = time.monotonic()
                        if guard.over():  # the tree as it stands when the tests have returned
                            return bytes(output), bytes(verdict), "memory"
                elif key.data == "out":
                    output += data
                    del output[:-cap]
                elif len(verdict) < VERDICT_CAP:
                    verdict += data[: VERDICT_CAP - len(verdict)]
    finally:
        selector.close()


def _teardown(sides: list[_Side], label: str, run_id: str, bound) -> None:
    """Whatever happened, nothing of the run survives this. Killing a side's process group kills
    bwrap (or confine.py's outer process), whose PID namespace then dies with it."""
    for side in sides:
        try:
            os.killpg(side.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if side.sync_w is not None:
            os.close(side.sync_w)
            side.sync_w = None
    if label == "fallback":
        for side in sides:
            if side.uid is not None:
                cleanup.kill_uid(side.uid)
        if any(side.uid is None for side in sides):
            cleanup.kill_marked(f"ORL_SANDBOX_RUN={run_id}")
    if bound is not None:
        bound.release()
    for side in sides:
        side.proc.wait()
        if side.workdir is not None:
            shutil.rmtree(side.workdir, ignore_errors=True)
            if side.uid is not None:
                cleanup.remove_files_of_uid(side.uid)


def _parse_verdict(data: bytes) -> dict | None:
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


def _verdict(
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
