"""Build an engine by name: the one place that maps a table row's `engine` to code.

The serving engines (vllm, sglang) import their packages only when built; where they
cannot run the factory raises EngineUnavailable with the reason a table prints as "not
run". `serving_call` is the one function that decides what a serving row passes to its
server: `orl serving-args` prints it and `build_serving_engine` runs it.
"""

from __future__ import annotations

import importlib
import os
import tempfile
from pathlib import Path
from typing import Protocol

import torch

from orl.decoding import Policy
from orl.decoding.rollout import RecomputeRollout, Rollout
from orl.decoding.verify import STRICT, Verification
from orl.engines import serving
from orl.engines.base import Engine, EngineUnavailable
from orl.engines.kinds import DIFFUSION_ENGINES, ENGINE_NAMES, ENGINES
from orl.engines.serving import (
    SERVING_ENGINES,
    VLLM_NO_RELAXED,
    ServingCall,
    check_method,
    read_target_config,
)
from orl.engines.sglang import SGLangEngine, sglang_call
from orl.engines.vllm import VLLMEngine, vllm_call
from orl.errors import InputError
from orl.tokenizer import load_tokenizer


class DirectoryBuild(Protocol):
    """An engine built from checkpoint directories (EngineKind.builder): the target's, and the draft's for
    an engine that takes one (None otherwise). Adding such an engine: its module with this function, its
    EngineKind in orl/engines/kinds.py, its rows in orl/rows.py; nothing here."""

    def __call__(
        self,
        ckpt_dir: str | Path,
        *,
        draft_dir: str | Path | None,
        device: str,
        dtype: torch.dtype | None,
        ignore_eos: bool,
        verification: Verification,
        num_speculative_tokens: int | None,
    ) -> Engine: ...


def build_engine(
    name: str,
    ckpt_dir: str | Path,
    *,
    policy: Policy | None = None,
    draft_dir: str | Path | None = None,
    device: str = "cpu",
    dtype: torch.dtype | None = None,
    residual: bool = True,
    log_steps: bool = False,
    ignore_eos: bool = False,
    method: str | None = None,
    num_speculative_tokens: int | None = None,
    verification: Verification = STRICT,
    block_size: int | None = None,
) -> Engine:
    """Load the checkpoint and wrap it in the named engine; dtype None keeps the checkpoint's own.

    `block_size`: a block-diffusion decoder's block size, if not the checkpoint's own (dLLM engines only).

    `ignore_eos` (speed runs only, docs/method.md §4) makes every engine generate to the budget.
    `method` is a serving row's method (vllm / sglang only; orl/engines/serving.py METHODS).
    `num_speculative_tokens`: drafted tokens per verification of a draft-model row (the serving
    methods', hf-assisted's); None: each one's default.
    `verification`: how a speculative engine accepts drafted tokens (orl/decoding/verify.py); relaxed
    applies to hf-assisted, dflash and SGLang's speculative methods (orl/engines/sglang.py), never to vLLM.
    """
    from orl.model.checkpoint import load_checkpoint

    if name not in ENGINE_NAMES:
        raise InputError(f"--engine: unknown engine {name!r}; expected one of {', '.join(ENGINE_NAMES)}")
    if verification.relaxed and not ENGINES[name].speculative and name not in SERVING_ENGINES:
        raise InputError(
            f"--verification {verification}: engine {name} drafts nothing to verify (relaxed "
            f"verification applies to {', '.join(n for n, k in ENGINES.items() if k.speculative)} and "
            "sglang's speculative methods)"
        )
    if name in SERVING_ENGINES:
        return build_serving_engine(
            name,
            ckpt_dir,
            method=method,
            draft_dir=draft_dir,
            policy=policy,
            device=device,
            dtype=dtype,
            ignore_eos=ignore_eos,
            num_speculative_tokens=num_speculative_tokens,
            verification=verification,
        )
    if method is not None:
        raise InputError(
            f"--method: {method!r} applies to the serving engines ({', '.join(SERVING_ENGINES)}) only"
        )
    policy = policy or Policy("fixed", 1)
    if block_size is not None and name not in DIFFUSION_ENGINES:
        raise InputError(
            f"--block-size applies to the block-diffusion decoders "
            f"({', '.join(DIFFUSION_ENGINES)}), not to {name}"
        )
    kind = ENGINES[name]
    if num_speculative_tokens is not None and not kind.drafted_tokens:
        takes = ", ".join(n for n, k in ENGINES.items() if k.drafted_tokens)
        raise InputError(
            f"--num-speculative-tokens applies to {takes} and the serving engines' draft methods, "
            f"not to {name}"
        )
    if kind.builder is not None:
        module, function = kind.builder.split(":")
        build: DirectoryBuild = getattr(importlib.import_module(module), function)
        return build(
            ckpt_dir,
            draft_dir=draft_dir if kind.draft else None,
            device=device,
            dtype=dtype,
            ignore_eos=ignore_eos,
            verification=verification,
            num_speculative_tokens=num_speculative_tokens,
        )
    return engine_for_checkpoint(
        name,
        load_checkpoint(ckpt_dir, device=device, dtype=dtype),
        policy=policy,
        residual=residual,
        log_steps=log_steps,
        ignore_eos=ignore_eos,
        block_size=block_size,
    )


def engine_for_checkpoint(
    name: str,
    ckpt,
    *,
    policy: Policy,
    residual: bool = True,
    log_steps: bool = False,
    ignore_eos: bool = False,
    block_size: int | None = None,
) -> Engine:
    """One of the engines that run our own model code (reference, ar-compiled, dlmrt, dlmrt-eager) on a
    loaded checkpoint.

    A sweep builds one per policy on the same checkpoint, loaded once.
    """
    if block_size is not None and not ckpt.is_diffusion:
        raise InputError(
            f"--block-size: {ckpt.path}: an AR checkpoint decodes one token per forward; "
            "block sizes apply to block-diffusion checkpoints"
        )
    if name == "reference" and not ckpt.is_diffusion:
        from orl.engines.reference import ReferenceAR

        return ReferenceAR(ckpt, ignore_eos=ignore_eos)
    if name == "ar-compiled":
        from orl.engines.ar import CompiledAR

        return CompiledAR(ckpt, ignore_eos=ignore_eos)
    if name not in DIFFUSION_ENGINES:
        raise InputError(
            f"--engine: {name!r} does not run on a loaded checkpoint; expected reference, ar-compiled, "
            "dlmrt or dlmrt-eager"
        )
    return diffusion_engine(
        name,
        ckpt,
        policy=policy,
        residual=residual,
        log_steps=log_steps,
        ignore_eos=ignore_eos,
        block_size=block_size,
    )


def hf_engine_for_model(model, tokenizer, *, model_name: str, ignore_eos: bool = False) -> Engine:
    """The hf engine (transformers' greedy AR decoding) on a transformers model already in memory, such as
    orl bench-scale's random-weight one of a real architecture's shapes."""
    from orl.engines.hf import HFEngine

    return HFEngine(model, tokenizer, model_name=model_name, ignore_eos=ignore_eos)


def diffusion_engine(
    name: str,
    ckpt,
    *,
    policy: Policy,
    residual: bool = True,
    log_steps: bool = False,
    ignore_eos: bool = False,
    dlmrt_config=None,
    observer=None,
    block_size: int | None = None,
) -> Engine:
    """A block-diffusion decoder on a loaded dLLM checkpoint: the reference decoder or dlmrt (compiled or
    eager); what the engine benchmarks and the parity check compare.

    `dlmrt_config`: dlmrt's DlmrtConfig (chunk mode, sync_every, CPU linears, a step observer);
    `observer`: the reference decoder's StepView observer. Each applies to its own engine only.
    `block_size`: blocks of that size instead of the checkpoint's own (orl.decoding.decode_rule).
    """
    if name not in DIFFUSION_ENGINES:
        raise InputError(
            f"--engines: {name!r} is not a block-diffusion decoder; expected one of "
            f"{', '.join(DIFFUSION_ENGINES)}"
        )
    if name == "reference":
        from orl.engines.reference import ReferenceDiffusion

        return ReferenceDiffusion(
            ckpt,
            policy,
            residual=residual,
            log_steps=log_steps,
            ignore_eos=ignore_eos,
            observer=observer,
            block_size=block_size,
        )
    from orl.engines.dlmrt import DlmrtEngine

    return DlmrtEngine(
        ckpt,
        policy,
        compiled=name == "dlmrt",
        residual=residual,
        log_steps=log_steps,
        ignore_eos=ignore_eos,
        config=dlmrt_config,
        block_size=block_size,
    )


# --------------------------------------------------------------------------------------
# Serving rows (vLLM, SGLang)
# --------------------------------------------------------------------------------------


def serving_call(
    name: str,
    method: str | None,
    ckpt_dir: str | Path,
    *,
    eos_ids,
    draft_dir: str | Path | None = None,
    policy: Policy | None = None,
    dtype="auto",
    num_speculative_tokens: int | None = None,
    ignore_eos: bool = False,
    dllm_config_path: str | Path | None = None,
    device: str = "cuda",
    verification: Verification = STRICT,
) -> ServingCall:
    """What a serving row passes to its server, checked against its checkpoints (no package imported)."""
    config = read_target_config(ckpt_dir)
    method = check_method(name, method, config, draft_dir)
    # Absolute paths of folders checked to exist: a server takes a path it cannot find for a hub model
    # name to download, which must never happen here.
    ckpt_dir = Path(ckpt_dir).resolve()
    draft_dir = Path(draft_dir).resolve() if draft_dir is not None else None
    common = {
        "eos_ids": eos_ids,
        "draft_dir": draft_dir,
        "dtype": dtype,
        "num_speculative_tokens": num_speculative_tokens,
        "ignore_eos": ignore_eos,
    }
    if name == "vllm":
        if verification.relaxed:
            raise InputError(f"--verification {verification}: {VLLM_NO_RELAXED}")
        return vllm_call(ckpt_dir, method, device=device, **common)
    return sglang_call(
        ckpt_dir,
        method,
        config=config,
        policy=policy,
        dllm_config_path=dllm_config_path,
        verification=verification,
        **common,
    )


def build_serving_engine(
    name: str,
    ckpt_dir: str | Path,
    *,
    method: str | None = None,
    draft_dir: str | Path | None = None,
    policy: Policy | None = None,
    device: str = "cuda",
    dtype=None,
    ignore_eos: bool = False,
    num_speculative_tokens: int | None = None,
    verification: Verification = STRICT,
) -> Engine:
    """The vllm / sglang engine of a row, or EngineUnavailable with the reason it cannot run here.

    The environment is checked first: without CUDA or the package the row cannot run whatever its
    checkpoints are (a CPU profile's vLLM rows without .venv-vllm), and that is the reason to print.
    """
    cpu = not str(device).startswith("cuda")
    reason = serving.environment_reason(name, "cpu" if cpu and name == "vllm" else "cuda")
    if reason is not None:
        raise EngineUnavailable(reason)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the servers read local folders only: nothing is downloaded
    if cpu and name != "vllm":
        raise InputError(f"--device {device}: {name} serves on CUDA only; pass --device cuda")
    config = read_target_config(ckpt_dir)
    if cpu and dtype is None:
        # --dtype auto on the CPU is the checkpoint's own dtype, as for our engines (vLLM's "auto" would
        # turn a float32 checkpoint into a half-precision one).
        dtype = config.get("torch_dtype") or config.get("dtype") or "auto"
    tokenizer = load_tokenizer(ckpt_dir)
    # SGLang reads its dLLM settings from a file; the engine removes it when closed (or the
    # TemporaryDirectory's finalizer does, should building the call fail).
    workdir = tempfile.TemporaryDirectory(prefix="orl-sglang-") if name == "sglang" else None
    call = serving_call(
        name,
        method,
        ckpt_dir,
        eos_ids=tokenizer.eos_ids,
        draft_dir=draft_dir,
        policy=policy,
        dtype=dtype,
        num_speculative_tokens=num_speculative_tokens,
        ignore_eos=ignore_eos,
        dllm_config_path=Path(workdir.name) / "dllm_algorithm.yaml" if workdir else None,
        device="cpu" if cpu else "cuda",
        verification=verification,
    )
    if name == "vllm":
        return VLLMEngine(call, config, tokenizer, device="cpu" if cpu else str(device))
    return SGLangEngine(call, config, tokenizer, policy=policy, workdir=workdir)


def rollout_decoder(engine: str, init) -> Rollout:
    """The ORL rollout decoder `--rollout-engine` names (ROLLOUT_ENGINES): the full-recompute default
    (orl.decoding.rollout), or dlmrt's (orl/engines/dlmrt/rollout.py) on the loaded init checkpoint."""
    if engine == "recompute":
        return RecomputeRollout()
    from orl.engines.dlmrt.rollout import DlmrtRollout

    return DlmrtRollout(
        init.tokenizer, mode="eager" if engine == "dlmrt-eager" else None, where=init.path / "config.json"
    )
