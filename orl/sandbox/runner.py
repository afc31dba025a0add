"""Running one sample: a test process and a candidate process, each in its own sandbox.

The candidate process (orl/sandbox/candidate.py) runs prompt + completion and answers
calls; the test process (orl/sandbox/judge.py) runs the prompt's helpers and the tests,
calls the candidate through a proxy that carries only plain data (orl/sandbox/wire.py),
and writes the verdict to a pipe only it holds, as one length-prefixed wire frame that
orl/sandbox/verdict.py decodes (parse_verdict): never split into lines, so no character the
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
import os
import secrets
import subprocess
import sys
import time
import warnings

from orl.errors import InputError
from orl.sandbox import cleanup, memory, seccomp
from orl.sandbox.isolation import ISOLATION_CHOICES, SandboxUnavailable, bwrap_path, is_root
from orl.sandbox.limits import ExecutionResult, SandboxLimits
from orl.sandbox.sides import DRAIN_S, Side, collect, spawn, teardown, weak_members
from orl.sandbox.verdict import parse_verdict, run_verdict


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
    sides: list[Side] = []
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
        sides.append(spawn("judge", judge_job, (verdict_w, request_w, reply_r), out_w, label, limits, run_id,
                            bound is not None))  # fmt: skip
        candidate_job = {**wire, "code": code, "request_fd": request_r, "reply_fd": reply_w}
        sides.append(spawn("candidate", candidate_job, (request_r, reply_w), out_w, label, limits, run_id,
                            bound is not None))  # fmt: skip
    except BaseException:
        teardown(sides, label, run_id, bound)
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
            weak_members(label, sides, run_id),
            tmpfs_bytes=limits.tmpfs_mb << 20
            if label != "fallback" and seccomp.program() is not None
            else None,
        )
        output, verdict_bytes, outcome = collect(
            out_r, verdict_r, start + limits.timeout_s, limits.output_bytes, guard
        )
        verdict = parse_verdict(verdict_bytes)
        if verdict is not None and verdict.get("candidate_ended"):
            try:  # let the candidate's sandbox report how its process ended
                sides[1].proc.wait(timeout=DRAIN_S)
            except subprocess.TimeoutExpired:
                pass
        returncodes = [side.proc.poll() for side in sides]
    finally:
        os.close(out_r)
        os.close(verdict_r)
        teardown(sides, label, run_id, bound)
    passed, result = run_verdict(verdict, outcome, returncodes, limits)
    return ExecutionResult(
        task_id=task_id, passed=passed, result=result, isolation=label, duration_s=time.monotonic() - start,
        stdout_tail=output.decode("utf-8", "replace"), returncode=returncodes[1], run_id=run_id,
        memory_bound=guard.kind, peak_memory_mb=round(guard.peak / 2**20, 1),
    )  # fmt: skip
