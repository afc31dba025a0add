"""The two sandboxed processes of a run (orl/sandbox/runner.py): starting one side (its job, fds, uid,
rlimits, seccomp filter and, under bwrap, its bwrap command line), reading the run's output and verdict
pipes while its memory is watched, and tearing both sides down so that nothing of the run survives.
"""

from __future__ import annotations

import marshal
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass

from orl.sandbox import cleanup, seccomp
from orl.sandbox.isolation import SANDBOX_PATH, bwrap_command, interpreter, is_root, sandbox_view
from orl.sandbox.limits import SandboxLimits
from orl.sandbox.stub import launch
from orl.sandbox.verdict import VERDICT_CAP

TICK_S = 0.02  # how often the memory of a run is measured
DRAIN_S = 0.1  # how long output is still read after the verdict
CONFINE_MODES = {"bwrap": "bwrap", "fallback+ns": "namespaces", "fallback": "plain"}


@dataclass
class Side:
    """One of the two sandboxes of a run."""

    proc: subprocess.Popen
    uid: int | None
    workdir: str | None
    sync_w: int | None  # cgroup mode: the go signal, written once the processes are in the cgroup


def spawn(role: str, job: dict, fds: tuple[int, ...], out_w: int, label: str, limits: SandboxLimits,
           run_id: str, wait_for_go: bool) -> Side:  # fmt: skip
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
    stdin = memfd("orl-sandbox-job", marshal.dumps(job))  # the job, read once by the sandbox's trusted code
    filter_fd = None
    try:
        if mode == "bwrap":  # bwrap reads the seccomp filter from an fd
            filter_fd = memfd("orl-sandbox-seccomp", seccomp.program())
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
    return Side(proc, uid, workdir, sync_w)


def memfd(name: str, data: bytes | None) -> int | None:
    """A memfd holding `data`, read from its start by the sandbox (None for None)."""
    if data is None:
        return None
    fd = os.memfd_create(name)
    with open(fd, "wb", closefd=False) as handle:
        handle.write(data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def weak_members(label: str, sides: list[Side], run_id: str):
    """In the weak fallback, processes can leave the launched trees (setsid + double fork):
    they are found by the run's uids (root) or by the run's marker in their environment."""
    if label != "fallback":
        return None
    uids = {side.uid for side in sides}
    marker = f"ORL_SANDBOX_RUN={run_id}".encode()
    if None not in uids:
        return lambda: {pid for pid in cleanup.processes() if cleanup.owner_uid(pid) in uids}
    return lambda: {pid for pid in cleanup.processes() if marker in cleanup.environment_of(pid)}


def collect(out_fd: int, verdict_fd: int, deadline: float, cap: int, guard) -> tuple[bytes, bytes, str]:
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


def teardown(sides: list[Side], label: str, run_id: str, bound) -> None:
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
