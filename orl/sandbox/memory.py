"""The memory bound of one sample: its whole process tree together, not each process alone.

Three ways, and every result says which one ran (ExecutionResult.memory_bound):

``cgroup``
    cgroup v2, when this process may create memory-limited cgroups: a child of the
    harness's own cgroup whose cgroup.subtree_control already enables the memory
    controller (e.g. the root cgroup of a VM), or the delegated folder named by the
    ORL_SANDBOX_CGROUP environment variable. Each sample gets its own cgroup with
    memory.max = the limit and no swap; the kernel enforces it, OOM-kills the group and
    the run fails. The sandbox processes wait on a pipe until they have been moved in.
    The cgroup is charged for shared memory, tmpfs files and memfds too.
``watchdog+tmpfs``
    everywhere else, in bwrap and in the fallback with namespaces: the harness sums, each
    tick and once more when the verdict arrives, the proportional set size (Pss: shared
    pages counted once) of every process of the sample and the bytes held by the sample's
    private /tmp and /dev/shm tmpfs (files, unlinked files kept open, POSIX shared memory
    from shm_open: memory no process needs to map), and kills the sample over the limit.
    Memory that is neither mapped nor in those files cannot be made: the seccomp filter
    (orl/sandbox/seccomp.py) refuses memfd_create, SysV shared memory and message queues,
    each side has its own IPC namespace, and RLIMIT_NOFILE bounds the pipes and sockets a
    process can hold. Between two ticks the tree can briefly hold more; RLIMIT_AS still
    caps each process at the limit, and RLIMIT_NPROC the number of processes.
``watchdog``
    the same without the tmpfs term: the weak fallback (no namespaces: /tmp and /dev/shm
    are the machine's, where only RLIMIT_FSIZE bounds each file), or a machine without
    the seccomp filter (neither x86_64 nor aarch64), where memfds are not refused.

Every kind is also bounded by the tmpfs sizes (SandboxLimits.tmpfs_mb each) where the
view has its own /tmp and /dev/shm.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path

PAGE = os.sysconf("SC_PAGE_SIZE")


def descendants(roots: Iterable[int]) -> set[int]:
    """The processes in the trees of `roots` (through /proc/<pid>/task/<tid>/children)."""
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as handle:
                    stack.extend(int(child) for child in handle.read().split())
            except OSError:
                pass
    return seen


def process_memory(pid: int) -> int:
    """Bytes a process holds: Pss from smaps_rollup, or the resident size where that is unreadable."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as handle:
            for line in handle:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    try:
        with open(f"/proc/{pid}/statm", "rb") as handle:
            return int(handle.read().split()[1]) * PAGE
    except (OSError, ValueError, IndexError):
        return 0


def _host_devices() -> set[int]:
    """The devices of the harness's own /, /tmp and /dev/shm: never a run's private tmpfs."""
    devices = set()
    for folder in ("/", "/tmp", "/dev/shm"):
        try:
            devices.add(os.stat(folder).st_dev)
        except OSError:
            pass
    return devices


def tmpfs_usage(pids: Iterable[int], skip: set[int], largest: int) -> int:
    """Bytes held by the private /tmp and /dev/shm tmpfs of the processes' filesystem views, each
    filesystem once (files, unlinked files still open, POSIX shared memory).

    Only filesystems of at most `largest` bytes count (the view's tmpfs size): while bwrap or
    confine.py build a view, a process's /tmp may still be the machine's disk; and devices in
    `skip` never count. Each folder is opened once and measured through that fd, so a view that
    changes in between (pivot_root) cannot pair one filesystem's device with another's usage."""
    seen, total = set(skip), 0
    for pid in pids:
        for folder in ("tmp", "dev/shm"):
            try:
                fd = os.open(f"/proc/{pid}/root/{folder}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                device = os.fstat(fd).st_dev
                info = os.fstatvfs(fd)
            except OSError:
                continue
            finally:
                os.close(fd)
            if device in seen or info.f_blocks * info.f_frsize > largest:
                continue
            seen.add(device)
            total += (info.f_blocks - info.f_bfree) * info.f_frsize
    return total


class TreeWatchdog:
    """Sums the memory of a sample's processes; `over()` when the total passes the limit.

    With `tmpfs_bytes` (their size), the run's private /tmp and /dev/shm count too (see the module
    docstring)."""

    def __init__(self, limit_bytes: int, roots: list[int], extra: Callable[[], set[int]] | None = None,
                 tmpfs_bytes: int | None = None) -> None:  # fmt: skip
        self.limit, self.roots, self.extra = limit_bytes, roots, extra
        self.skip = _host_devices() if tmpfs_bytes is not None else None
        self.tmpfs_bytes = tmpfs_bytes or 0
        self.peak = 0

    @property
    def kind(self) -> str:
        return "watchdog+tmpfs" if self.skip is not None else "watchdog"

    def over(self) -> bool:
        pids = descendants(self.roots) | (self.extra() if self.extra else set())
        total = sum(process_memory(pid) for pid in pids)
        if self.skip is not None:
            total += tmpfs_usage(pids, self.skip, self.tmpfs_bytes)
        self.peak = max(self.peak, total)
        return total > self.limit

    def release(self) -> None:
        pass


def _own_cgroup() -> Path | None:
    """The cgroup v2 folder of this process, or None without a unified hierarchy."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    own = next((line[3:] for line in lines if line.startswith("0::")), None)
    mount = next((line.split(" - ")[0].split()[4] for line in mounts if " - cgroup2 " in line), None)
    if own is None or mount is None:
        return None
    return Path(mount) / own.lstrip("/")


@functools.lru_cache(maxsize=1)
def cgroup_parent() -> Path | None:
    """Where per-sample memory cgroups can be made, or None (then the watchdog runs)."""
    named = os.environ.get("ORL_SANDBOX_CGROUP")
    parent = Path(named) if named else _own_cgroup()
    if parent is None:
        return None
    try:
        enabled = (parent / "cgroup.subtree_control").read_text().split()
    except OSError:
        return None
    if "memory" not in enabled or not os.access(parent, os.W_OK):
        return None
    # A real trial: make a cgroup and move a process into it (delegation rules may forbid it).
    probe = parent / f"orl-sandbox-probe-{os.getpid()}"
    sleeper = subprocess.Popen(["sleep", "10"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    try:
        probe.mkdir()
        (probe / "cgroup.procs").write_text(f"{sleeper.pid}\n")
        usable = (probe / "memory.max").is_file()
    except OSError:
        usable = False
    finally:
        sleeper.kill()
        sleeper.wait()
        remove_cgroup(probe)
    return parent if usable else None


class CgroupBound:
    """One sample's memory cgroup (see the module docstring)."""

    kind = "cgroup"

    def __init__(self, parent: Path, name: str, limit_bytes: int) -> None:
        self.path = parent / name
        self.path.mkdir()
        self.peak = 0
        (self.path / "memory.max").write_text(f"{limit_bytes}\n")
        for name, value in (("memory.swap.max", "0"), ("memory.oom.group", "1")):
            try:
                (self.path / name).write_text(value + "\n")
            except OSError:
                pass  # older kernels: no swap accounting or group OOM; memory.max still holds

    def adopt(self, roots: list[int]) -> None:
        """Move the (waiting) sandbox processes into the cgroup; their children are born in it."""
        for pid in descendants(roots):
            try:
                (self.path / "cgroup.procs").write_text(f"{pid}\n")
            except ProcessLookupError:
                pass  # it has already exited

    def _read(self, name: str) -> str:
        try:
            return (self.path / name).read_text()
        except OSError:
            return ""

    def over(self) -> bool:
        current = self._read("memory.current").strip()
        self.peak = max(self.peak, int(current) if current.isdigit() else 0)
        events = dict(
            line.split() for line in self._read("memory.events").splitlines() if line.count(" ") == 1
        )
        return int(events.get("oom_kill", "0")) > 0

    def release(self) -> None:
        remove_cgroup(self.path)


def remove_cgroup(path: Path) -> None:
    """Kill whatever is left in a cgroup and remove it."""

    def read(name: str) -> str:
        try:
            return (path / name).read_text()
        except OSError:
            return ""

    for _ in range(50):
        pids = [int(p) for p in read("cgroup.procs").split()]
        if not pids:
            break
        if (path / "cgroup.kill").exists():
            (path / "cgroup.kill").write_text("1\n")
        else:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        time.sleep(0.01)
    try:
        path.rmdir()
    except OSError:
        pass
