"""Nothing of a run outlives it, even when the harness itself is killed.

In bwrap and in the fallback with namespaces every process of a run lives in a PID
namespace whose init dies with the harness (bwrap --die-with-parent; confine.py's
death signals), and files live on the namespace's tmpfs. The weak fallback has
neither: there the run's trusted supervisor cleans up when the harness dies
(confine.py), and as a last resort `clean_stale()` runs at the first sandboxed run of
every harness process: it kills processes and removes working folders and cgroups
left by harness processes that no longer exist.

Every sandbox process carries ORL_SANDBOX_OWNER=<owner tag> in its environment, and
working folders and cgroups are named orl-sandbox-<owner tag>-...; the tag is the
harness's pid and its start time (a pid alone may be reused).
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from orl.sandbox.isolation import SANDBOX_PATH
from orl.sandbox.memory import cgroup_parent, remove_cgroup

PREFIX = "orl-sandbox-"
FRESH_UIDS = range(1_000_000_000, 2_000_000_000)  # the runs' private uids (root only)
SHARED_TMP = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")


def _start_time(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # field 22, counted after the command name


@functools.lru_cache(maxsize=1)
def owner_tag() -> str:
    return f"{os.getpid()}.{_start_time(os.getpid())}"


def _alive(tag: str) -> bool:
    pid, _, start = tag.partition(".")
    return pid.isdigit() and _start_time(int(pid)) == start


def _tag_of(name: str) -> str | None:
    """The owner tag in 'orl-sandbox-<pid>.<start>-...'; None for other names."""
    if not name.startswith(PREFIX):
        return None
    tag = name[len(PREFIX) :].split("-", 1)[0]
    return tag if tag.count(".") == 1 and tag.replace(".", "").isdigit() else None


def processes() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def environment_of(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return []


def kill_marked(marker: str) -> None:
    """SIGKILL every process whose initial environment holds `marker` ("NAME=value")."""
    needle = marker.encode()
    for pid in processes():
        if needle in environment_of(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def kill_uid(uid: int) -> None:
    """SIGKILL every process of `uid`: kill(-1) sent from a process running as that uid."""
    kill = shutil.which("kill", path=SANDBOX_PATH) or "kill"
    for _ in range(3):  # a fork bomb may fork between rounds; RLIMIT_NPROC keeps the rounds short
        subprocess.run(
            [kill, "-KILL", "-1"],
            user=uid,
            group=uid,
            extra_groups=[],
            env={"PATH": SANDBOX_PATH},
            capture_output=True,
            check=False,
        )
        if not any(owner_uid(pid) == uid for pid in processes()):
            return


def owner_uid(pid: int) -> int | None:
    """The uid a process runs as (None once it is gone)."""
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def remove_files_of_uid(uid: int) -> None:
    """Delete what a private uid left in the machine's shared temporary folders."""
    for folder in SHARED_TMP:
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


@functools.lru_cache(maxsize=1)
def clean_stale() -> None:
    """Remove what dead harness processes left behind (see the module docstring). Once per process."""
    for pid in processes():
        for entry in environment_of(pid):
            if entry.startswith(b"ORL_SANDBOX_OWNER="):
                tag = entry.split(b"=", 1)[1].decode("ascii", "replace")
                if not _alive(tag):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
    folders = [Path(tempfile.gettempdir())]
    parent = cgroup_parent()
    for folder in folders + ([parent] if parent else []):
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            tag = _tag_of(name)
            if tag is None or _alive(tag):
                continue
            path = folder / name
            if parent is not None and folder == parent:
                remove_cgroup(path)
                continue
            uid = path.lstat().st_uid
            if os.geteuid() == 0 and uid in FRESH_UIDS:
                kill_uid(uid)
                remove_files_of_uid(uid)
            shutil.rmtree(path, ignore_errors=True)
