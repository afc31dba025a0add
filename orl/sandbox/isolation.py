"""What a sandbox process sees: the filesystem view, and the bwrap command line that builds it.

The view is a whitelist, the same in bwrap and in the fallback with namespaces
(orl/sandbox/confine.py builds it by hand there): an empty read-only root holding
read-only binds of the system folders (/usr, /lib*, /bin, /sbin, /etc) and of the
Python installation the sandbox runs (the base interpreter, never a virtual
environment: the programs need only the standard library), a private size-limited
/tmp and /dev/shm (mode 1777, so multiprocessing's semaphores work), a minimal /dev
and a fresh /proc. Every site-packages or dist-packages folder inside the view is
covered by an empty tmpfs. Homes, /work, /var, /run, /mnt, the harness checkout, the
samples and problems files: none of it is there.

The interpreter's folders are bound after /tmp is mounted, so an interpreter that
lives under /tmp (a venv there, or a Python built there) still runs.
"""

from __future__ import annotations

import functools
import glob
import os
import shutil
import sys
import sysconfig

from orl.errors import InputError

SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
ISOLATION_CHOICES = ("bwrap", "fallback", "auto")  # what a caller may ask for
ISOLATION_LABELS = ("bwrap", "fallback+ns", "fallback")  # what ran, as results and records name it


class SandboxUnavailable(InputError):
    """The isolation that was asked for cannot run on this machine."""


def is_root() -> bool:
    return os.geteuid() == 0


@functools.lru_cache(maxsize=1)
def bwrap_path() -> str | None:
    """bwrap found on the harness's PATH, as an absolute path (the sandbox's PATH is fixed)."""
    found = shutil.which("bwrap")
    return os.path.realpath(found) if found else None


@functools.lru_cache(maxsize=1)
def interpreter() -> str:
    """The base Python executable (a venv's python is a link to it or a copy of it)."""
    base = getattr(sys, "_base_executable", None) or sys.executable
    return os.path.realpath(base if os.path.exists(base) else sys.executable)


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _interpreter_dirs(system: list[str]) -> list[str]:
    """Folders of the Python installation not already inside a system folder, outermost only."""
    candidates = {sys.base_prefix, sys.base_exec_prefix, os.path.dirname(interpreter()),
                  sysconfig.get_config_var("LIBDIR") or ""}  # fmt: skip
    paths = sorted({os.path.realpath(p) for p in candidates if p and os.path.isdir(p)})
    paths = [p for p in paths if not any(_inside(p, s) for s in system)]
    return [p for p in paths if not any(p != q and _inside(p, q) for q in paths)]


@functools.lru_cache(maxsize=4)
def sandbox_view(tmp_bytes: int) -> dict:
    """The filesystem view (see the module docstring) as plain data, for bwrap and for confine.py."""
    symlinks, system = [], []
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            symlinks.append([path, os.readlink(path)])
        elif os.path.isdir(path):
            system.append(path)
    resolved_system = [os.path.realpath(p) for p in system]
    python_dirs = _interpreter_dirs(resolved_system)
    masks = set()
    for folder in [*resolved_system, *python_dirs]:
        for pattern in (
            "lib/python3*/site-packages",
            "lib/python3*/dist-packages",
            "lib/python3/dist-packages",
            "local/lib/python3*/site-packages",
            "local/lib/python3*/dist-packages",
        ):
            masks.update(p for p in glob.glob(os.path.join(folder, pattern)) if os.path.isdir(p))
    return {
        "symlinks": symlinks,
        "system": system,  # bound before /tmp
        "binds": [[p, "dir"] for p in system + python_dirs],
        "python": python_dirs,  # bound after /tmp
        "masks": sorted(masks),
        "tmp_bytes": tmp_bytes,
    }


def _parents(path: str) -> list[str]:
    """/a/b/c -> ["/a", "/a/b"]: folders bwrap must create (traversable) before binding /a/b/c."""
    parts = path.strip("/").split("/")[:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def bwrap_command(view: dict, env: dict[str, str]) -> list[str]:
    """The bwrap command line (everything before `--`) that builds `view`."""
    binary = bwrap_path()
    if binary is None:
        raise SandboxUnavailable("sandbox: bwrap is not installed (apt-get install -y bubblewrap)")
    tmp = str(view["tmp_bytes"])
    cmd = [binary]
    for path, target in view["symlinks"]:
        cmd += ["--symlink", target, path]
    for path in view["system"]:
        cmd += ["--ro-bind", path, path]
    cmd += ["--perms", "1777", "--size", tmp, "--tmpfs", "/tmp"]
    created = {"/tmp", *view["system"]}
    for path in view["python"]:
        for parent in _parents(path):  # bwrap would create them with mode 0700
            if parent not in created:
                cmd += ["--perms", "0755", "--dir", parent]
                created.add(parent)
        cmd += ["--ro-bind", path, path]
    for path in view["masks"]:
        cmd += ["--perms", "0555", "--tmpfs", path]
    cmd += ["--dev", "/dev", "--perms", "1777", "--size", tmp, "--tmpfs", "/dev/shm", "--proc", "/proc"]
    if is_root():
        # --unshare-all would add a user namespace mapping only uid 0, and the stub could
        # then not drop to its unprivileged uid; list the other namespaces instead.
        cmd += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
        # The stub needs only these two capabilities, to drop to its own uid (which clears them).
        cmd += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        cmd += ["--unshare-all"]
    cmd += ["--remount-ro", "/", "--die-with-parent", "--new-session", "--chdir", "/tmp", "--clearenv"]
    for key, value in env.items():
        cmd += ["--setenv", key, value]
    return cmd
