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

import dataclasses
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
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from orl.errors import InputError

ISOLATION_MODES = ("bwrap", "fallback")
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
_REPORT_CAP = 4096  # bytes read from the verdict pipe; a verdict line is ~40 bytes


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


# --------------------------------------------------------------------------------------
# The stub: trusted code that runs first inside the sandbox, then runs the program.
# It is passed to `python -I -u -c`; its arguments are the verdict and nonce fds.
# --------------------------------------------------------------------------------------

_STUB = r'''
def _orl_main():
    import builtins, ctypes, json, os, resource, sys
    # References taken before the candidate runs: patching os/sys later cannot touch them.
    _write, _read, _exit, _dup2, _open = os.write, os.read, os._exit, os.dup2, os.open
    _str, _type = str, type
    report_fd, nonce_fd = int(sys.argv[1]), int(sys.argv[2])
    chunks = []
    while True:
        chunk = os.read(0, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    job = json.loads(b"".join(chunks))
    _dup2(_open("/dev/null", os.O_RDONLY), 0)  # input() sees end of file
    libc = ctypes.CDLL(None, use_errno=True)

    def fail(message):
        try:
            _write(report_fd, ("failed: " + message.replace("\n", " ")[:300] + "\n").encode("utf-8", "replace"))
        except OSError:
            pass
        _exit(1)

    # Fallback mode as root, in its own mount namespace: hide the home directories behind
    # empty tmpfs mounts and bind the interpreter back, readable by the sandbox uid. The
    # interpreter dirs are opened first: once hidden, only these handles still reach them.
    handles = [os.open(path, os.O_PATH | os.O_DIRECTORY) for path in job["expose"]]
    for hidden in job["hide"]:
        if libc.mount(b"tmpfs", hidden.encode(), b"tmpfs", 0, b"mode=0755,size=1m") != 0:
            fail("sandbox setup: cannot mount tmpfs on %s (errno %d)" % (hidden, ctypes.get_errno()))
    for path, handle in zip(job["expose"], handles):
        os.makedirs(path, mode=0o755, exist_ok=True)
        source = ("/proc/self/fd/%d" % handle).encode()
        if libc.mount(source, path.encode(), None, 0x1000 | 0x4000, None) != 0:  # MS_BIND | MS_REC
            fail("sandbox setup: cannot bind %s (errno %d)" % (path, ctypes.get_errno()))
        os.close(handle)
    if job["uid"] is not None:
        os.setgroups([])
        os.setresgid(job["uid"], job["uid"], job["uid"])
        os.setresuid(job["uid"], job["uid"], job["uid"])
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS: no setuid binaries from here on
    limits = job["limits"]
    for name, value in (("RLIMIT_CPU", limits["cpu_s"]), ("RLIMIT_AS", limits["as_bytes"]),
                        ("RLIMIT_FSIZE", limits["fsize_bytes"]), ("RLIMIT_NPROC", limits["nproc"]),
                        ("RLIMIT_CORE", 0)):
        kind = getattr(resource, name)
        ceiling = resource.getrlimit(kind)[1]  # an unprivileged process cannot raise its hard limit
        if ceiling != resource.RLIM_INFINITY:
            value = min(value, ceiling)
        hard = value + 1 if name == "RLIMIT_CPU" and ceiling == resource.RLIM_INFINITY else value
        resource.setrlimit(kind, (value, hard))  # for CPU: SIGXCPU at the soft limit, SIGKILL a second later
    os.chdir(job["cwd"])

    namespace = {"__name__": "__orl_candidate__", "__builtins__": builtins}
    try:
        exec(compile(job["code"], "<candidate>", "exec"), namespace)
        if job["test"]:
            exec(compile(job["test"], "<test>", "exec"), namespace)
        if job["entry_point"] is not None:
            namespace["check"](namespace[job["entry_point"]])
    except BaseException as exc:  # SystemExit and KeyboardInterrupt included: the tests did not finish
        try:
            text = _type(exc).__name__ + ": " + _str(exc)
        except BaseException:
            text = "exception with an unprintable message"
        fail(text)
    # The tests returned: only now fetch the nonce and report it.
    try:
        nonce = _read(nonce_fd, 64)
        _write(report_fd, b"passed " + nonce.strip() + b"\n")
    except BaseException:
        _exit(1)
    _exit(0)


_orl_main()
'''


# --------------------------------------------------------------------------------------
# Choosing and building the isolation
# --------------------------------------------------------------------------------------


def _is_root() -> bool:
    return os.geteuid() == 0


def _interpreter_dirs() -> list[str]:
    """Directories the sandboxed interpreter needs (venv and base installation), outermost first."""
    candidates = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                  os.path.dirname(os.path.realpath(sys.executable))}  # fmt: skip
    paths = sorted({os.path.realpath(p) for p in candidates if p})
    # Drop paths nested in another one of the list.
    return [p for p in paths if not any(p != q and p.startswith(q + os.sep) for q in paths)]


def _expose_interpreter() -> tuple[list[str], list[str]]:
    """(dirs to hide behind an empty tmpfs, interpreter dirs to bind back inside them).

    Home directories are hidden from the program; when the interpreter lives
    under one (pyenv in /root, a venv in /home/...) it is bound back read-only,
    which also lets a dropped, unprivileged uid reach it through a 0700 home.
    """
    hide = [d for d in ("/root", "/home") if os.path.isdir(d)]
    expose = [p for p in _interpreter_dirs() if any(p == h or p.startswith(h + os.sep) for h in hide)]
    return hide, expose


def _bwrap_command(limits: SandboxLimits, env: dict[str, str]) -> list[str]:
    """The bwrap command line (everything before `--`), see the module docstring."""
    cmd = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    tmpfs = str(limits.tmpfs_mb << 20)
    cmd += ["--perms", "1777", "--size", tmpfs, "--tmpfs", "/tmp"]
    cmd += ["--size", tmpfs, "--tmpfs", "/dev/shm"]
    hide, expose = _expose_interpreter()
    for hidden in hide:
        cmd += ["--perms", "0755", "--tmpfs", hidden]
    for path in expose:
        # bwrap creates missing parents with mode 0700; make each one traversable first.
        root = next(h for h in hide if path == h or path.startswith(h + os.sep))
        parents = Path(path).relative_to(root).parts[:-1]
        for depth in range(1, len(parents) + 1):
            cmd += ["--perms", "0755", "--dir", os.path.join(root, *parents[:depth])]
        cmd += ["--ro-bind", path, path]
    if _is_root():
        # --unshare-all would add a user namespace mapping only uid 0, and the stub could
        # then not drop to its unprivileged uid; list the other namespaces instead.
        cmd += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
        # The stub needs only these two capabilities, to drop to its own uid (which clears them).
        cmd += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        cmd += ["--unshare-all"]
    cmd += ["--die-with-parent", "--new-session", "--chdir", "/tmp", "--clearenv"]
    for key, value in env.items():
        cmd += ["--setenv", key, value]
    return cmd


@functools.lru_cache(maxsize=1)
def _unshare_works() -> bool:
    """Whether `unshare --net --mount` can run here (root, and the container allows it)."""
    if not _is_root() or shutil.which("unshare") is None:
        return False
    try:
        proc = subprocess.run(["unshare", "--net", "--mount", "--", "true"], capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return proc.returncode == 0


def _fallback_label() -> str:
    return "fallback+netns" if _unshare_works() else "fallback"


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
        f"({_fallback_label()}: process group, rlimits, scrubbed environment, no filesystem isolation)",
        RuntimeWarning,
        stacklevel=3,
    )


# --------------------------------------------------------------------------------------
# Running one program
# --------------------------------------------------------------------------------------


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
    label = "bwrap" if mode == "bwrap" else _fallback_label()

    run_id = secrets.token_hex(8)
    nonce = secrets.token_hex(16)
    # A fresh uid per run (root only): nothing else runs under it, so RLIMIT_NPROC counts
    # only this program's processes and "kill every process of this uid" is exact.
    uid = 1_000_000_000 + secrets.randbelow(1_000_000_000) if _is_root() else None
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
            if _unshare_works():
                hide, expose = _expose_interpreter()
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
        prefix = [*_bwrap_command(limits, env), "--"]
    else:
        prefix = ["unshare", "--net", "--mount", "--"] if _unshare_works() else []

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


# --------------------------------------------------------------------------------------
# Problems (HumanEval format) and batches
# --------------------------------------------------------------------------------------


def check_completion(
    problem: dict,
    completion: str,
    timeout_s: float = 3.0,
    *,
    isolation: str | None = None,
    limits: SandboxLimits | None = None,
) -> ExecutionResult:
    """Run a HumanEval-format problem's tests on prompt + completion."""
    missing = [key for key in ("task_id", "prompt", "test", "entry_point") if key not in problem]
    if missing:
        raise InputError(f"problem {problem.get('task_id', '?')}: missing field {missing[0]!r}")
    limits = dataclasses.replace(limits or SandboxLimits(), timeout_s=timeout_s)
    return run_program(
        problem["prompt"] + completion,
        problem["test"],
        problem["entry_point"],
        task_id=str(problem["task_id"]),
        limits=limits,
        isolation=isolation,
    )


def check_many(
    problems: Sequence[dict],
    completions: Sequence[str],
    workers: int | None = None,
    progress: bool = True,
    *,
    timeout_s: float = 3.0,
    isolation: str | None = None,
    limits: SandboxLimits | None = None,
) -> list[ExecutionResult]:
    """Check completions[i] against problems[i], several subprocesses at once; results in input order."""
    if len(problems) != len(completions):
        raise InputError(f"check_many: {len(problems)} problems but {len(completions)} completions")
    if not problems:
        return []
    isolation = isolation or isolation_mode()  # self-test once, before the threads start
    workers = max(1, min(workers or os.cpu_count() or 1, len(problems)))
    from tqdm.auto import tqdm

    results: list[ExecutionResult | None] = [None] * len(problems)
    # Threads suffice: each one only waits on its subprocess.
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {
            pool.submit(check_completion, problem, completion, timeout_s, isolation=isolation, limits=limits): i
            for i, (problem, completion) in enumerate(zip(problems, completions, strict=True))
        }
        bar = tqdm(total=len(futures), desc="sandbox", unit="prog", disable=not progress, leave=False)
        passed = 0
        for future in as_completed(futures):
            result = future.result()
            results[futures[future]] = result
            passed += result.passed
            bar.update(1)
            bar.set_postfix(passed=passed)
        bar.close()
    return results  # type: ignore[return-value]
