"""A Triton kernel module of orl.kernels, with its kernels interpreted (CPU) or compiled (GPU).

triton.jit picks the interpreter when a kernel is defined, so TRITON_INTERPRET is set (or unset) around
the import, and the module reloaded when another test file left the other kind in sys.modules; the
variable is restored afterwards so that it does not leak into other test files.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType


def kernel_module(name: str, *, interpreted: bool, reload: bool = False) -> ModuleType:
    """orl.kernels.<name> (which defines kernel_is_interpreted()) with kernels of the asked kind; `reload`
    runs the module again even when it already has them (its custom operators registered anew)."""
    previous = os.environ.pop("TRITON_INTERPRET", None)
    if interpreted:
        os.environ["TRITON_INTERPRET"] = "1"
    try:
        module = importlib.import_module(f"orl.kernels.{name}")
        if reload or module.kernel_is_interpreted() != interpreted:
            module = importlib.reload(module)
        assert module.kernel_is_interpreted() == interpreted
        return module
    finally:
        os.environ.pop("TRITON_INTERPRET", None)
        if previous is not None:
            os.environ["TRITON_INTERPRET"] = previous


def private_compiled_copy(name: str) -> ModuleType:
    """A private copy of orl/kernels/<name>.py with its kernels defined for the compiler, for ahead-of-time
    compile tests: reloading the shared module would swap the kernels under other test files' feet.

    Running the copy registers its custom operators (orl::...) again, over the shared module's: the
    shared module, where imported, is then run again with its own kind of kernels, so that the operators
    call its kernels, not the copy's."""
    shared = sys.modules.get(f"orl.kernels.{name}")
    previous = os.environ.pop("TRITON_INTERPRET", None)
    try:
        path = Path(__file__).resolve().parents[1] / "orl" / "kernels" / f"{name}.py"
        spec = importlib.util.spec_from_file_location(f"_{name}_for_compile", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        if previous is not None:
            os.environ["TRITON_INTERPRET"] = previous
    if shared is not None:
        kernel_module(name, interpreted=shared.kernel_is_interpreted(), reload=True)
    return module
