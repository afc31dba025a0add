"""A Triton kernel module of orl.kernels, with its kernels interpreted (CPU) or compiled (GPU).

triton.jit picks the interpreter when a kernel is defined, so TRITON_INTERPRET is set (or unset) around
the import, and the module reloaded when another test file left the other kind in sys.modules; the
variable is restored afterwards so that it does not leak into other test files.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType


def kernel_module(name: str, *, interpreted: bool) -> ModuleType:
    """orl.kernels.<name> (which defines kernel_is_interpreted()) with kernels of the asked kind."""
    previous = os.environ.pop("TRITON_INTERPRET", None)
    if interpreted:
        os.environ["TRITON_INTERPRET"] = "1"
    try:
        module = importlib.import_module(f"orl.kernels.{name}")
        if module.kernel_is_interpreted() != interpreted:
            module = importlib.reload(module)
        assert module.kernel_is_interpreted() == interpreted
        return module
    finally:
        os.environ.pop("TRITON_INTERPRET", None)
        if previous is not None:
            os.environ["TRITON_INTERPRET"] = previous
