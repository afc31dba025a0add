"""Building the isolation of one run: the bwrap command line, or the fallback's unshare prefix."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

from orl.sandbox.limits import SandboxLimits

SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"


def is_root() -> bool:
    return os.geteuid() == 0


def _interpreter_dirs() -> list[str]:
    """Directories the sandboxed interpreter needs (venv and base installation), outermost first."""
    candidates = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                  os.path.dirname(os.path.realpath(sys.executable))}  # fmt: skip
    paths = sorted({os.path.realpath(p) for p in candidates if p})
    # Drop paths nested in another one of the list.
    return [p for p in paths if not any(p != q and p.startswith(q + os.sep) for q in paths)]


def expose_interpreter() -> tuple[list[str], list[str]]:
    """(dirs to hide behind an empty tmpfs, interpreter dirs to bind back inside them).

    Home directories are hidden from the program; when the interpreter lives
    under one (pyenv in /root, a venv in /home/...) it is bound back read-only,
    which also lets a dropped, unprivileged uid reach it through a 0700 home.
    """
    hide = [d for d in ("/root", "/home") if os.path.isdir(d)]
    expose = [p for p in _interpreter_dirs() if any(p == h or p.startswith(h + os.sep) for h in hide)]
    return hide, expose


def bwrap_command(limits: SandboxLimits, env: dict[str, str]) -> list[str]:
    """The bwrap command line (everything before `--`), see the module docstring."""
    cmd = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    tmpfs = str(limits.tmpfs_mb << 20)
    cmd += ["--perms", "1777", "--size", tmpfs, "--tmpfs", "/tmp"]
    cmd += ["--size", tmpfs, "--tmpfs", "/dev/shm"]
    hide, expose = expose_interpreter()
    for hidden in hide:
        cmd += ["--perms", "0755", "--tmpfs", hidden]
    for path in expose:
        # bwrap creates missing parents with mode 0700; make each one traversable first.
        root = next(h for h in hide if path == h or path.startswith(h + os.sep))
        parents = Path(path).relative_to(root).parts[:-1]
        for depth in range(1, len(parents) + 1):
            cmd += ["--perms", "0755", "--dir", os.path.join(root, *parents[:depth])]
        cmd += ["--ro-bind", path, path]
    if is_root():
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
def unshare_works() -> bool:
    """Whether `unshare --net --mount` can run here (root, and the container allows it)."""
    if not is_root() or shutil.which("unshare") is None:
        return False
    try:
        proc = subprocess.run(["unshare", "--net", "--mount", "--", "true"], capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return proc.returncode == 0


def fallback_label() -> str:
    return "fallback+netns" if unshare_works() else "fallback"
