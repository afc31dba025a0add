"""The sandbox for model-generated code: one program per subprocess, contained whatever it does.

A problem is run as: the candidate module (prompt + completion), then the task's
test code (which defines `check`), then `check(<entry_point>)`. Each run gets its
own subprocess, confined in one of two isolation modes:

``bwrap`` (preferred; Debian package ``bubblewrap``)
    read-only bind of ``/``, a private size-limited tmpfs as working directory
    (``/tmp``), fresh ``/dev`` and ``/proc``, home directories hidden, new
    network / PID / IPC / UTS namespaces (no network at all), ``--die-with-parent``
    and ``--new-session``. Killing bwrap tears the whole PID namespace down, so
    no process of the program outlives the run.

``fallback`` (when bwrap is missing or fails its self-test; a warning is issued)
    a new process group, ``unshare --net --mount`` when root (no network; the
    mount namespace only serves to make the interpreter readable, see
    `_expose_interpreter`), a scrubbed environment and a throwaway working
    directory. Leftover processes are killed by process group and, when root,
    by the run's private uid. Weaker: the program sees the real filesystem
    (protected only by file permissions) and, without root, the network and
    the harness's own processes.

In both modes, when the harness runs as root the program runs under a fresh
random uid (so file permissions protect the machine, and RLIMIT_NPROC, which
root ignores, bounds a fork bomb), with no capabilities and ``no_new_privs``,
and with RLIMIT_CPU, RLIMIT_AS, RLIMIT_FSIZE, RLIMIT_NPROC and RLIMIT_CORE set.
A wall-clock timeout kills the whole process tree. stdout and stderr are
captured together, keeping only the last `SandboxLimits.output_bytes`.

The verdict cannot be forged by an exit code. The parent draws a random nonce
and puts it in a pipe that the trusted stub reads only *after* `check(...)` has
returned; the stub then writes ``passed <nonce>`` to a second pipe through a
reference to ``os.write`` it saved before the candidate ran, and exits with
``os._exit``. ``sys.exit(0)``, ``os._exit(0)``, exceptions, a patched ``print``
or ``sys.stdout``, and printing anything at all before or instead of the tests
therefore never count as passed: the nonce is not in the process until the
tests have returned. (A deliberately malicious program that searches its open
file descriptors for the nonce pipe is out of scope: that is an attack on the
verdict, not code a model writes by accident, and it still cannot escape.)
"""

from __future__ import annotations

import functools
import json
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

from orl.errors import InputError
from orl.sandbox.isolation import (
    SANDBOX_PATH,
    bwrap_command,
    expose_interpreter,
    fallback_label,
    is_root,
    unshare_works,
)
from orl.sandbox.limits import ExecutionResult, SandboxLimits
from orl.sandbox.stub import _STUB

ISOLATION_MODES = ("bwrap", "fallback")
_REPORT_CAP = 4096  # bytes read from the verdict pipe; a verdict line is ~40 bytes


@functools.lru_cache(maxsize=1)
def _bwrap_self_test() -> str | None:
    """None when bwrap runs a trivial passing program here; otherwise why not."""
    if shutil.which("bwrap") is None:
        return "bwrap is not installed (apt-get install -y bubblewrap)"
    probe = run_program(
        "def f():\n    return 1\n", "def check(c):\n    assert c() == 1\n", "f",
        task_id="bwrap-self-test", isolation="bwrap", limits=SandboxLimits(timeout_s=20),
    )  # fmt: skip
    if probe.passed:
        return None
    return f"bwrap self-test did not pass ({probe.result}; output: {probe.stdout_tail.strip()[-200:]!r})"


def isolation_mode() -> str:
    """The isolation `run_program` uses by default: "bwrap", or the fallback (with a warning)."""
    problem = _bwrap_self_test()
    if problem is None:
        return "bwrap"
    _warn_fallback(problem)
    return "fallback"


@functools.lru_cache(maxsize=1)
def _warn_fallback(reason: str) -> None:
    warnings.warn(
        f"sandbox: {reason}; running model-generated code in the weaker fallback sandbox "
        f"({fallback_label()}: process group, rlimits, scrubbed environment, no filesystem isolation)",
        RuntimeWarning,
        stacklevel=3,
    )


def _processes_of_uid(uid: int) -> int:
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    count += 1
            except OSError:
                pass
    return count


def _kill_uid(uid: int) -> None:
    """SIGKILL every process of `uid`: kill(-1) sent from a process running as that uid."""
    for _ in range(3):  # a fork bomb may fork between rounds; NPROC keeps the rounds short
        subprocess.run(["kill", "-KILL", "-1"], user=uid, group=uid, extra_groups=[], env={"PATH": SANDBOX_PATH},
                       capture_output=True, check=False)  # fmt: skip
        if _processes_of_uid(uid) == 0:
            return


def _kill_marked(marker: str) -> None:
    """SIGKILL processes whose initial environment carries the run's marker (non-root fallback)."""
    needle = marker.encode()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as handle:
                if needle in handle.read().split(b"\0"):
                    os.kill(int(entry.name), signal.SIGKILL)
        except (OSError, ValueError):
            pass


def _remove_files_of_uid(uid: int) -> None:
    """Fallback as root: delete what the run's uid left in the shared temporary folders."""
    for folder in ("/tmp", "/var/tmp", "/dev/shm"):
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.stat(follow_symlinks=False).st_uid != uid:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.unlink(entry.path)
            except OSError:
                pass


def _describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "failed: no exit status"
    if returncode < 0 or returncode > 128:
        number = -returncode if returncode < 0 else returncode - 128
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        why = {"SIGXCPU": " (CPU time limit)", "SIGKILL": " (killed)", "SIGXFSZ": " (file size limit)"}
        return f"failed: killed by {name}{why.get(name, '')} before the tests finished"
    return f"failed: exited with status {returncode} before the tests finished"


def run_program(
    code: str,
    test: str = "",
    entry_point: str | None = None,
    *,
    task_id: str = "program",
    limits: SandboxLimits | None = None,
    isolation: str | None = None,
) -> ExecutionResult:
    """Run `code`, then `test`, then `check(<entry_point>)` in one sandboxed subprocess.

    Without an entry point the program passes when code and test run to their end.
    `isolation` forces "bwrap" or "fallback"; None picks `isolation_mode()`.
    """
    limits = limits or SandboxLimits()
    mode = isolation or isolation_mode()
    if mode not in ISOLATION_MODES:
        raise InputError(f"sandbox: isolation: expected one of {', '.join(ISOLATION_MODES)}, got {mode!r}")
    if mode == "bwrap" and shutil.which("bwrap") is None:
        raise InputError("sandbox: isolation 'bwrap' requested but bwrap is not installed")
    label = "bwrap" if mode == "bwrap" else fallback_label()

    run_id = secrets.token_hex(8)
    nonce = secrets.token_hex(16)
    # A fresh uid per run (root only): nothing else runs under it, so RLIMIT_NPROC counts
    # only this program's processes and "kill every process of this uid" is exact.
    uid = 1_000_000_000 + secrets.randbelow(1_000_000_000) if is_root() else None
    nproc = limits.max_processes + (0 if uid is not None else _processes_of_uid(os.getuid()))
    cpu_s = limits.cpu_s or int(limits.timeout_s) + 1

    workdir = None
    hide: list[str] = []
    expose: list[str] = []
    if mode == "bwrap":
        cwd = "/tmp"
    else:
        workdir = tempfile.mkdtemp(prefix="orl-sandbox-")
        if uid is not None:
            os.chown(workdir, uid, uid)
            if unshare_works():
                hide, expose = expose_interpreter()
        cwd = workdir
    env = {"PATH": SANDBOX_PATH, "HOME": cwd, "TMPDIR": cwd, "LANG": "C.UTF-8", "ORL_SANDBOX_RUN": run_id}

    job = {
        "code": code, "test": test, "entry_point": entry_point, "uid": uid, "cwd": cwd,
        "hide": hide, "expose": expose,
        "limits": {"cpu_s": cpu_s, "as_bytes": limits.memory_mb << 20, "fsize_bytes": limits.file_size_mb << 20,
                   "nproc": nproc},
    }  # fmt: skip
    python = [sys.executable, "-I", "-u", "-c", _STUB]
    if mode == "bwrap":
        prefix = [*bwrap_command(limits, env), "--"]
    else:
        prefix = ["unshare", "--net", "--mount", "--"] if unshare_works() else []

    nonce_r, nonce_w = os.pipe()
    os.write(nonce_w, nonce.encode())
    os.close(nonce_w)
    report_r, report_w = os.pipe()
    stdin = tempfile.TemporaryFile()
    stdin.write(json.dumps(job).encode("utf-8"))
    stdin.seek(0)

    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            [*prefix, *python, str(report_w), str(nonce_r)],
            stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, pass_fds=(nonce_r, report_w),
            start_new_session=True, env=env, cwd=cwd,
        )  # fmt: skip
    finally:
        os.close(nonce_r)
        os.close(report_w)
        stdin.close()

    try:
        output, report, timed_out = _collect(proc, report_r, start + limits.timeout_s, limits.output_bytes)
    finally:
        # Whatever happened, nothing of the program survives this point. In bwrap mode
        # killing the group kills bwrap, whose PID namespace then dies with it.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if uid is not None:
            _kill_uid(uid)
        elif mode == "fallback":
            _kill_marked(f"ORL_SANDBOX_RUN={run_id}")
        returncode = proc.wait()
        duration = time.monotonic() - start
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
            if uid is not None:
                _remove_files_of_uid(uid)

    lines = report.decode("utf-8", "replace").splitlines()
    if lines and lines[-1] == f"passed {nonce}":
        passed, result = True, "passed"
    elif timed_out:
        passed, result = False, "timed out"
    else:
        failures = [line for line in lines if line.startswith("failed: ")]
        passed, result = False, (failures[0] if failures else _describe_exit(returncode))
    return ExecutionResult(
        task_id=task_id,
        passed=passed,
        result=result,
        isolation=label,
        duration_s=duration,
        stdout_tail=output.decode("utf-8", "replace"),
        returncode=returncode,
        run_id=run_id,
    )


def _collect(proc: subprocess.Popen, report_fd: int, deadline: float, cap: int) -> tuple[bytes, bytes, bool]:
    """Drain stdout (keeping the last `cap` bytes) and the verdict pipe until the program ends.

    Returns (output tail, verdict bytes, timed out). After the main process exits, a
    background process could keep the pipes open; we stop waiting shortly after.
    """
    selector = selectors.DefaultSelector()
    stdout_fd = proc.stdout.fileno()
    selector.register(stdout_fd, selectors.EVENT_READ, "out")
    selector.register(report_fd, selectors.EVENT_READ, "report")
    output, report = bytearray(), bytearray()
    exited_at = None
    timed_out = False
    try:
        while selector.get_map():
            now = time.monotonic()
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > 0.2:
                break
            if exited_at is None and now >= deadline:
                timed_out = True
                break
            for key, _ in selector.select(timeout=min(0.05, max(deadline - now, 0.001))):
                data = os.read(key.fd, 1 << 16)
                if not data:
                    selector.unregister(key.fd)
                elif key.data == "out":
                    output += data
                    if len(output) > cap:
                        del output[:-cap]
                elif len(report) < _REPORT_CAP:
                    report += data[: _REPORT_CAP - len(report)]
    finally:
        selector.close()
        proc.stdout.close()
        os.close(report_fd)
    return bytes(output), bytes(report), timed_out


