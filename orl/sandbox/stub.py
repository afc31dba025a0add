"""The two in-sandbox programs: the test process's ("judge") and the candidate process's.

The test process runs wire.py + confine.py + judge.py, the candidate process wire.py +
confine.py + candidate.py, joined into one source text: their relative imports are
dropped, since the names they import are then defined above them. These modules use
the standard library only, and `python -I -S` keeps site-packages (and with them this
harness) off the sandbox's import path; -I also ignores PYTHON* variables.

Each program is compiled once per harness process and handed to the sandbox as
marshalled code in a memfd, which a one-line bootstrap reads and runs: the sandbox
interpreter is the harness's own base interpreter, so the bytecode always matches,
and no sample pays for compiling the programs again.
"""

from __future__ import annotations

import functools
import marshal
import os
import re
from pathlib import Path

ROLES = {"judge": ("wire", "confine", "judge"), "candidate": ("wire", "confine", "candidate")}
_RELATIVE_IMPORT = re.compile(r"^from \.\w+ import [^\n]*\n", re.MULTILINE)


@functools.cache
def program(role: str) -> str:
    """The source text of the "judge" or the "candidate" program."""
    here = Path(__file__).parent
    parts = [
        _RELATIVE_IMPORT.sub("", (here / f"{name}.py").read_text(encoding="utf-8")) for name in ROLES[role]
    ]
    return "\n".join(parts) + "\nmain()\n"


@functools.cache
def _code_fd(role: str) -> tuple[int, int]:
    """(fd, size) of a memfd holding the marshalled program; kept open for the harness's lifetime."""
    data = marshal.dumps(compile(program(role), f"<orl-sandbox-{role}>", "exec", dont_inherit=True))
    fd = os.memfd_create(f"orl-sandbox-{role}", os.MFD_CLOEXEC)
    os.write(fd, data)
    return fd, len(data)


def launch(role: str) -> tuple[list[str], int]:
    """(the `-c` argument that runs the role's program, the fd the sandbox must inherit for it)."""
    fd, size = _code_fd(role)
    return [
        f"import marshal, os; code = os.pread({fd}, {size}, 0); os.close({fd}); exec(marshal.loads(code))"
    ], fd
