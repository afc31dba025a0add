"""Build an engine by name: the one place that maps a table row's `engine` to code.

GPU engines (vllm, sglang) are imported lazily; when they cannot run here the
factory raises EngineUnavailable with the reason a table prints as "not run".
"""

from __future__ import annotations

from pathlib import Path

import torch

from orl.decoding import Policy
from orl.engines.base import Engine
from orl.errors import InputError

ENGINE_NAMES = (
    "dlmrt", "dlmrt-eager", "reference", "ar-compiled", "hf", "hf-assisted", "dflash", "vllm", "sglang",
)


def build_engine(
    name: str, ckpt_dir: str | Path, *, policy: Policy | None = None, draft_dir: str | Path | None = None,
    device: str = "cpu", dtype: torch.dtype | None = None, residual: bool = True, log_steps: bool = False,
    ignore_eos: bool = False,
) -> Engine:
    """Load the checkpoint and wrap it in the named engine; dtype None keeps the checkpoint's own.

    `ignore_eos` (speed runs only, METHOD.md §4) makes every engine generate to the budget.
    """
    from orl.model.checkpoint import load_checkpoint

    if name not in ENGINE_NAMES:
        raise InputError(f"--engine: unknown engine {name!r}; expected one of {', '.join(ENGINE_NAMES)}")
    policy = policy or Policy("fixed", 1)
    if name in ("vllm", "sglang"):
        from orl.engines.serving import build_serving_engine

        return build_serving_engine(name, ckpt_dir, draft_dir=draft_dir, policy=policy)
    if name in ("hf", "hf-assisted"):
        from orl.engines.hf import load_hf_engine

        return load_hf_engine(ckpt_dir, draft_dir=draft_dir if name == "hf-assisted" else None, device=device,
                              dtype=dtype or torch.float32, ignore_eos=ignore_eos)
    if name == "dflash":
        from orl.engines.dflash import DFlashEngine

        return DFlashEngine(target_dir=ckpt_dir, drafter_dir=draft_dir, device=device, dtype=dtype,
                            ignore_eos=ignore_eos)
    return engine_for_checkpoint(name, load_checkpoint(ckpt_dir, device=device, dtype=dtype), policy=policy,
                                 residual=residual, log_steps=log_steps, ignore_eos=ignore_eos)


def engine_for_checkpoint(
    name: str, ckpt, *, policy: Policy, residual: bool = True, log_steps: bool = False, ignore_eos: bool = False,
) -> Engine:
    """One of the engines that run our own model code (reference, ar-compiled, dlmrt, dlmrt-eager) on a
    loaded checkpoint.

    A sweep builds one per policy on the same checkpoint, loaded once.
    """
    if name == "reference":
        from orl.engines.reference import ReferenceAR, ReferenceDiffusion

        if ckpt.is_diffusion:
            return ReferenceDiffusion(ckpt, policy, residual=residual, log_steps=log_steps, ignore_eos=ignore_eos)
        return ReferenceAR(ckpt, ignore_eos=ignore_eos)
    if name == "ar-compiled":
        from orl.engines.ar import CompiledAR

        return CompiledAR(ckpt, ignore_eos=ignore_eos)
    if name not in ("dlmrt", "dlmrt-eager"):
        raise InputError(f"--engine: {name!r} does not run on a loaded checkpoint; expected reference, ar-compiled, "
                         "dlmrt or dlmrt-eager")
    from orl.engines.dlmrt import DlmrtEngine

    return DlmrtEngine(ckpt, policy, compiled=name == "dlmrt", residual=residual, log_steps=log_steps,
                       ignore_eos=ignore_eos)
