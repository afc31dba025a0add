"""The seccomp filter of every sandbox process: memory that no process maps cannot be made.

The watchdog (orl/sandbox/memory.py) measures what the run's processes map (Pss) and
what the run's private tmpfs folders hold. Three kinds of kernel memory are neither:
a memfd kept open but not mapped, a SysV shared-memory segment that is detached, a
SysV message queue's messages. This filter refuses the calls that create them, with
EPERM, as it does io_uring (its buffers are pinned outside any mapping) and
memfd_secret:

    shmget  msgget  memfd_create  memfd_secret  io_uring_setup

and every call made through another ABI than the machine's own (i386 int 0x80 and
x32 on x86_64), so that none of these can be reached by another number. POSIX shared
memory (shm_open) is a file on the run's private /dev/shm, which is counted; SysV
semaphores (tiny) stay allowed. Nothing the standard library does at import or in
multiprocessing (sem_open, shared_memory) needs the refused calls.

bwrap loads the program from an fd (--seccomp); the fallback's confine.py loads it
with prctl(PR_SET_SECCOMP) after no_new_privs. On a machine other than x86_64 and
aarch64 there is no filter (`program()` is None) and results say so: their memory
bound is "watchdog", not "watchdog+tmpfs".
"""

from __future__ import annotations

import errno
import functools
import os
import struct

AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
REFUSED = {  # syscall numbers of each architecture
    "x86_64": {"shmget": 29, "msgget": 68, "memfd_create": 319, "io_uring_setup": 425, "memfd_secret": 447},
    "aarch64": {
        "shmget": 194,
        "msgget": 186,
        "memfd_create": 279,
        "io_uring_setup": 425,
        "memfd_secret": 447,
    },
}
X32_SYSCALL_BIT = 0x40000000
# Classic BPF opcodes and seccomp return values (linux/filter.h, linux/seccomp.h).
LOAD_WORD = 0x20  # BPF_LD | BPF_W | BPF_ABS
JUMP_EQUAL = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
JUMP_AT_LEAST = 0x35  # BPF_JMP | BPF_JGE | BPF_K
RETURN = 0x06  # BPF_RET | BPF_K
ALLOW = 0x7FFF0000
REFUSE = 0x00050000 | errno.EPERM  # SECCOMP_RET_ERRNO
NR_OFFSET, ARCH_OFFSET = 0, 4  # in struct seccomp_data


@functools.lru_cache(maxsize=1)
def program() -> bytes | None:
    """The filter as an array of struct sock_filter (what bwrap --seccomp reads), or None here."""
    machine = os.uname().machine
    if machine not in AUDIT_ARCH:
        return None
    checks: list[tuple[int, int]] = []  # (opcode, constant) of the jumps to REFUSE
    if machine == "x86_64":
        checks.append((JUMP_AT_LEAST, X32_SYSCALL_BIT))
    checks += [(JUMP_EQUAL, number) for number in sorted(REFUSED[machine].values())]
    refuse_at = 3 + len(checks) + 1  # after: load arch, check arch, load nr, the checks, allow
    code = [(LOAD_WORD, 0, 0, ARCH_OFFSET), (JUMP_EQUAL, 0, refuse_at - 2, AUDIT_ARCH[machine]),
            (LOAD_WORD, 0, 0, NR_OFFSET)]  # fmt: skip
    for opcode, constant in checks:
        code.append((opcode, refuse_at - len(code) - 1, 0, constant))
    code += [(RETURN, 0, 0, ALLOW), (RETURN, 0, 0, REFUSE)]
    return b"".join(struct.pack("=HBBI", *instruction) for instruction in code)
