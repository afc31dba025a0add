"""Confinement of one sandbox process, done by trusted code before any untrusted code runs.

Runs inside the sandbox (joined into the in-sandbox programs by orl/sandbox/stub.py):
standard library only. The harness describes what to do in the job's "confine" spec
(orl/sandbox/sides.py builds it):

``mode = "bwrap"``
    bwrap already made the namespaces and the filesystem view; only the privilege drop
    and the limits below remain.
``mode = "namespaces"`` (the fallback as root, when unshare(2) works)
    this process arms PR_SET_PDEATHSIG, creates new mount, PID, network, IPC and UTS
    namespaces and forks the namespace's init. The init builds the same filesystem view
    as bwrap (read-only binds of the system and interpreter folders on an empty tmpfs,
    private /tmp, /dev and /dev/shm, a fresh /proc), chroots into it and forks the process
    that runs the role. The harness kills this process; the kernel then kills the init
    (its death signal) and with it every process of the namespace.
``mode = "plain"`` (the weak fallback: no namespaces)
    this process stays as a trusted supervisor (death signal SIGUSR1: it kills the run's
    processes and removes the working folder when the harness dies) and forks the role.

Then, in the role process: a fresh uid when the harness is root (so RLIMIT_NPROC counts
only this run and file permissions protect the machine), no capabilities, no_new_privs,
not dumpable (a same-uid process can neither ptrace it nor read its memory or fds), the
seccomp filter of orl/sandbox/seccomp.py (no memfds, SysV shared memory or message
queues: memory no process maps; bwrap loads it itself), and RLIMIT_CPU, RLIMIT_AS,
RLIMIT_FSIZE, RLIMIT_NPROC, RLIMIT_NOFILE (pipes and sockets hold kernel memory too) and
RLIMIT_CORE.
"""

import _signal as signal  # the builtin core of `signal`, whose wrapper imports enum: 30 ms per sandbox start
import marshal
import os
import resource
import select

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 0x1, 0x2, 0x4, 0x8, 0x20
MS_BIND, MS_REC, MS_PRIVATE = 0x1000, 0x4000, 0x40000
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_SECCOMP, PR_SET_NO_NEW_PRIVS = 1, 4, 22, 38
SECCOMP_MODE_FILTER = 2
NEW_ROOT = "/tmp"  # mount point of the new root inside the private mount namespace
DEVICES = ("null", "zero", "full", "random", "urandom")

_LIBC = []


def _libc():
    """libc through ctypes, loaded on first use: bwrap mode never needs it (bwrap sets no_new_privs,
    and dropping from root to a uid makes a process non-dumpable), and importing ctypes costs
    every sandbox start a few milliseconds."""
    if not _LIBC:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.mount.argtypes = [
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.c_ulong,
            ctypes.c_char_p,
        ]
        _LIBC.append((libc, ctypes.get_errno))
    return _LIBC[0][0]


class SetupError(Exception):
    """The sandbox could not be set up (reported as such, never as a verdict on the code)."""


def _call(result: int, what: str) -> None:
    if result != 0:
        errno = _LIBC[0][1]()
        raise SetupError(f"{what}: {os.strerror(errno)} (errno {errno})")


def _bytes(text: str | None) -> bytes | None:
    return text.encode() if text is not None else None


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _call(
        _libc().mount(_bytes(source), _bytes(target), _bytes(fstype), flags, _bytes(data)), f"mount {target}"
    )


def read_job() -> dict:
    """The job the harness wrote to stdin (marshalled: it is trusted data); stdin is then /dev/null
    (input() sees end of file)."""
    chunks = []
    while True:
        chunk = os.read(0, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    os.dup2(os.open("/dev/null", os.O_RDONLY), 0)
    return marshal.loads(b"".join(chunks))


def _die_with(parent_pid: int, sig: int) -> None:
    _libc().prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before the death signal was armed
        os._exit(1)


def _close_fds(keep: tuple = ()) -> None:
    """Close every inherited fd above stderr except `keep`: a trusted helper process must not
    hold the ends of the wire, or the other side would never see the end of the stream."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2 and fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def _exit_like(status: int) -> None:
    """Exit as the waited-for process did (a signal as 128 + its number, like a shell)."""
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


def _remount_read_only(targets: list[str]) -> None:
    """Read-only remount of the binds and of every mount below them (a recursive bind keeps those
    writable)."""
    with open("/proc/self/mountinfo") as handle:
        points = [line.split()[4].replace("\\040", " ") for line in handle]
    for point in points:
        if any(point == target or point.startswith(target + "/") for target in targets):
            _mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _build_root(view: dict) -> None:
    """The filesystem view of bwrap_command (orl/sandbox/isolation.py), built by hand, then chroot."""
    os.umask(0o022)
    # Open the sources first: the new root is mounted over /tmp, where one of them may live.
    handles = [(path, kind, os.open(path, os.O_PATH)) for path, kind in view["binds"]]
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing below propagates to the machine
    _mount("tmpfs", NEW_ROOT, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
    for path, target in view["symlinks"]:
        os.makedirs(os.path.dirname(NEW_ROOT + path), mode=0o755, exist_ok=True)
        os.symlink(target, NEW_ROOT + path)
    tmp_size = f"mode=1777,size={view['tmp_bytes']}"
    os.makedirs(NEW_ROOT + "/tmp", mode=0o755)
    _mount("tmpfs", NEW_ROOT + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, tmp_size)
    for path, kind, handle in handles:  # after /tmp: an interpreter under /tmp is bound over it
        target = NEW_ROOT + path
        os.makedirs(target if kind == "dir" else os.path.dirname(target), mode=0o755, exist_ok=True)
        if kind != "dir":
            os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o644))
        _mount(f"/proc/self/fd/{handle}", target, None, MS_BIND | MS_REC)
        os.close(handle)
    _remount_read_only([NEW_ROOT + path for path, _, _ in handles])
    for path in view["masks"]:
        if os.path.isdir(NEW_ROOT + path):
            _mount("tmpfs", NEW_ROOT + path, "tmpfs", MS_NOSUID | MS_NODEV | MS_RDONLY, "mode=0755,size=4k")
    dev = NEW_ROOT + "/dev"
    os.makedirs(dev, mode=0o755)
    _mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k")
    for name in DEVICES:
        os.close(os.open(f"{dev}/{name}", os.O_CREAT | os.O_WRONLY, 0o666))
        _mount(f"/dev/{name}", f"{dev}/{name}", None, MS_BIND)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):  # fmt: skip
        os.symlink(target, f"{dev}/{name}")
    os.makedirs(dev + "/shm")
    _mount("tmpfs", dev + "/shm", "tmpfs", MS_NOSUID | MS_NODEV, tmp_size)
    os.makedirs(NEW_ROOT + "/proc", mode=0o555)
    _mount("proc", NEW_ROOT + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _mount(None, NEW_ROOT, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, "mode=0755")
    os.chroot(NEW_ROOT)
    os.chdir("/")


def _enter_namespaces(spec: dict) -> None:
    """Fallback as root: new namespaces and view; returns in the role process (see the docstring)."""
    alive_r, alive_w = os.pipe()  # the init sees end of file here if this process is already gone
    flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS
    _call(_libc().unshare(flags), "unshare")
    init = os.fork()
    if init:
        _close_fds(keep=(alive_w,))
        _, status = os.waitpid(init, 0)
        _exit_like(status)
    os.close(alive_w)
    _libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if select.select([alive_r], [], [], 0)[0]:
        os._exit(1)
    os.close(alive_r)
    _build_root(spec["view"])
    role = os.fork()
    if role == 0:
        return
    _close_fds()
    while True:  # PID 1 of the namespace: reap orphans until the role ends, which ends the namespace
        pid, status = os.wait()
        if pid == role:
            _exit_like(status)


def _supervise(spec: dict) -> None:
    """Weak fallback: fork the role; this trusted parent cleans up if the harness dies first."""

    def harness_died(signum, frame) -> None:
        if spec["uid"] is not None:  # every process of the run's private uid, daemons included
            killer = os.fork()
            if killer == 0:
                os.setresuid(spec["uid"], spec["uid"], spec["uid"])
                os.kill(-1, signal.SIGKILL)
                os._exit(0)
            os.waitpid(killer, 0)
        import shutil  # only here: importing it costs every sandbox start a few milliseconds

        shutil.rmtree(spec["cwd"], ignore_errors=True)
        os.killpg(0, signal.SIGKILL)  # the role and its children (this process included)

    signal.signal(signal.SIGUSR1, harness_died)
    _die_with(spec["harness_pid"], signal.SIGUSR1)
    role = os.fork()
    if role == 0:
        signal.signal(signal.SIGUSR1, signal.SIG_DFL)
        return
    _close_fds()
    _, status = os.waitpid(role, 0)
    _exit_like(status)


def _load_seccomp(program: bytes) -> None:
    """Install the filter of orl/sandbox/seccomp.py (an array of struct sock_filter)."""
    import ctypes

    class Program(ctypes.Structure):  # struct sock_fprog
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]

    _call(
        _libc().prctl(
            PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(Program(len(program) // 8, program)), 0, 0
        ),
        "seccomp",
    )


def _drop_privileges(spec: dict) -> None:
    uid = spec["uid"]
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)  # all uids non-zero: the capabilities are cleared too
    if spec["mode"] != "bwrap":  # bwrap has done these (see _libc; it loads the filter from --seccomp)
        _libc().prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)  # no setuid binaries from here on
        _libc().prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        if spec.get("seccomp"):
            _load_seccomp(spec["seccomp"])
    for name, value in spec["rlimits"].items():
        kind = getattr(resource, name)
        ceiling = resource.getrlimit(kind)[1]  # an unprivileged process cannot raise its hard limit
        if ceiling != resource.RLIM_INFINITY:
            value = min(value, ceiling)
        # CPU: SIGXCPU at the soft limit, SIGKILL a second later.
        hard = value + 1 if name == "RLIMIT_CPU" and ceiling == resource.RLIM_INFINITY else value
        resource.setrlimit(kind, (value, hard))
    os.chdir(spec["cwd"])


def enter(spec: dict) -> None:
    """Confine this process as `spec` says; returns in the process that is to run the role."""
    if spec.get("sync_fd") is not None:  # cgroup mode: wait until the harness has moved us in
        os.read(spec["sync_fd"], 1)
        os.close(spec["sync_fd"])
    if spec["mode"] == "namespaces":
        _die_with(spec["harness_pid"], signal.SIGKILL)
        _enter_namespaces(spec)
    elif spec["mode"] == "plain":
        _supervise(spec)
    _drop_privileges(spec)
