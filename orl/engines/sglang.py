"""SGLang behind the Engine interface: Table 2's AR, STANDALONE, EAGLE3 and DFLASH rows and
Table 3's dLLM row (GPU).

Pure functions build the call (`sglang_call`: the `sglang.Engine(...)` keyword arguments,
the dLLM YAML and the per-request `sampling_params`) and turn a result into a Generation
(`generation_from_sglang`); SGLangEngine, which needs CUDA and sglang, wires them together
and shuts its server processes down when closed. Checked against sglang 0.5.23.

The dLLM row. SGLang's dLLM backend loads only the architectures of DLLM_MASK_IDS, each with
a mask token id hard-coded in sglang/srt/dllm/config.py: an `OrlBlockDiffusionLM` directory
fails with "Unknown diffusion LLM", so Table 3's row serves the SDAR export of the ORL
checkpoint (`orl export CKPT --format sdar`). Its LowConfidence algorithm commits every
masked position with confidence > τ (at least the most confident one): our
`strict-threshold:τ`, which Table 3's rows decode with, so the commit rule is identical.
It cannot apply ORL's residual context; the row says so (ServingCall.notes).

Relaxed verification (Table 2's SGLang relaxed lines). SGLang's nearest rule to ours
(orl/decoding/verify.py: accept x when p(x) >= δ · max p) is its pair of server arguments
`speculative_accept_threshold_single` (accept a draft token whose target probability is at least
this) and `speculative_accept_threshold_acc` (accept with probability min(1, p / this) otherwise):
`relaxed_arguments` passes δ as the single threshold and 1.0 (SGLang's default) as the other. That
is not our rule: an absolute p(x) >= δ implies p(x) >= δ · max p, so SGLang accepts a subset of what
ours does deterministically, plus a coin flip with probability p. And SGLang reads them only in its
sampled verification (tree_speculative_sampling_target_only): at temperature 0 verify_tree_greedy
ignores them. A relaxed SGLang line therefore samples at temperature 1 (RELAXED_TEMPERATURE), and its
notes say so.

How forwards are counted. The prefill forward samples the first token; each later forward of
a speculative run verifies one draft (`meta_info["spec_verify_ct"]`), so nfe_prefill = 1 and
nfe = verify steps (an AR row's n tokens: n - 1; orl/engines/forwards.py). SGLang's
`spec_accept_length` is completion tokens / verify steps, which counts the prefill's token; the
acceptance length of orl/engines/serving.py leaves it out. The dLLM
backend reports no per-request forward count: nfe stays 0 and `extra["nfe_unavailable"]`
says why, so no TPF is printed rather than a made-up one.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from orl.decoding import Policy, plan_request
from orl.decoding.verify import STRICT, Verification
from orl.engines.base import EngineInfo, EngineUnavailable, Generation
from orl.engines.forwards import decode_forwards
from orl.engines.serving import (
    ServingCall,
    cut_at_eos,
    package_version,
    serving_dtype,
    speculative_extra,
    speculative_tokens,
    write_dllm_config,
)
from orl.errors import CheckpointError, InputError
from orl.model.provenance import model_name

# The architectures SGLang's dLLM backend loads, with the mask id it hard-codes for each
# (DiffusionGemma runs only its own Gemma4Renoise algorithm, not LowConfidence).
DLLM_MASK_IDS = {"SDARForCausalLM": 151669, "SDARMoeForCausalLM": 151669, "LLaDA2MoeModelLM": 156895}
SPECULATIVE_ALGORITHMS = {"standalone": "STANDALONE", "eagle3": "EAGLE3", "dflash": "DFLASH"}
NO_RESIDUAL = "SGLang's LowConfidence cannot apply ORL's residual context: this row decodes without it"
RELAXED_TEMPERATURE = 1.0  # SGLang applies its acceptance thresholds in sampled verification only
RELAXED_NOTE = (
    "relaxed: SGLang's thresholds (single = delta, acc = 1.0), which it applies only when "
    "sampling: temperature 1, not greedy; an absolute threshold, not ours (docs/metrics.md)"
)


def relaxed_arguments(verification: Verification) -> dict[str, float]:
    """SGLang's server arguments for a relaxed line (module docstring); {} for strict verification."""
    if not verification.relaxed:
        return {}
    return {
        "speculative_accept_threshold_single": verification.delta,
        "speculative_accept_threshold_acc": 1.0,
    }


def dllm_algorithm_config(policy: Policy | None, config: dict, where: str = "--ckpt") -> dict[str, Any]:
    """LowConfidence's settings (the YAML of --dllm-algorithm-config) for our policy and the target."""
    arch = config["architectures"][0]
    if arch not in DLLM_MASK_IDS:
        export = (
            " (export ours with `orl export CKPT --format sdar --out DIR`)"
            if arch == "OrlBlockDiffusionLM"
            else ""
        )
        raise CheckpointError(
            f"{where}: sglang's dLLM backend (LowConfidence) loads {', '.join(DLLM_MASK_IDS)}; "
            f"got {arch}{export}"
        )
    mask = config.get("mask_token_id")
    if mask is not None and mask != DLLM_MASK_IDS[arch]:
        raise CheckpointError(
            f"{where}: mask_token_id: sglang hard-codes {DLLM_MASK_IDS[arch]} for {arch}, this "
            f"checkpoint masks with {mask}: it would decode with the wrong mask token"
        )
    block = config.get("block_size")
    if not isinstance(block, int) or block <= 0:
        raise CheckpointError(
            f"{where}: block_size: expected a positive integer in config.json, got {block!r}"
        )
    if policy is None or policy.name != "strict-threshold":
        raise InputError(
            f"--policy: sglang's LowConfidence commits confidence > τ: give strict-threshold:τ (got {policy})"
        )
    return {"threshold": float(policy.value), "block_size": block}


def sglang_call(
    ckpt_dir: str | Path,
    method: str,
    *,
    config: dict,
    eos_ids,
    draft_dir: str | Path | None = None,
    policy: Policy | None = None,
    dtype="auto",
    num_speculative_tokens: int | None = None,
    ignore_eos: bool = False,
    dllm_config_path: str | Path | None = None,
    seed: int = 0,
    verification: Verification = STRICT,
) -> ServingCall:
    """The `sglang.Engine(**kwargs)` call, dLLM settings and sampling arguments of one row, batch 1."""
    kwargs: dict[str, Any] = {
        "model_path": str(ckpt_dir),
        "skip_tokenizer_init": True,  # token ids in and out: our tokenizer
        "dtype": serving_dtype(dtype),
        "random_seed": seed,
        "max_running_requests": 1,  # batch 1
        "disable_radix_cache": True,  # no prefix reuse between the suite's requests
    }
    dllm, notes = None, ()
    if verification.relaxed and method not in SPECULATIVE_ALGORITHMS:
        raise InputError(
            f"--verification {verification}: sglang method {method!r} drafts nothing to verify "
            f"(relaxed applies to {', '.join(SPECULATIVE_ALGORITHMS)})"
        )
    if method in SPECULATIVE_ALGORITHMS:
        k = speculative_tokens(method, num_speculative_tokens)
        kwargs.update(
            speculative_algorithm=SPECULATIVE_ALGORITHMS[method],
            speculative_draft_model_path=str(draft_dir),
            speculative_num_draft_tokens=k + 1,
        )  # the verified block: k drafts after the anchor token
        if method != "dflash":  # DFLASH drafts its block in one step; the others draft a chain (top-1)
            kwargs.update(speculative_num_steps=k, speculative_eagle_topk=1)
        kwargs.update(relaxed_arguments(verification))
        if verification.relaxed:
            notes = (RELAXED_NOTE,)
    elif method == "dllm":
        if dllm_config_path is None:
            raise InputError("sglang dllm: the dLLM settings need a file to be written to (dllm_config_path)")
        dllm = dllm_algorithm_config(policy, config)
        kwargs.update(dllm_algorithm="LowConfidence", dllm_algorithm_config=str(dllm_config_path))
        notes = (NO_RESIDUAL,)
    sampling: dict[str, Any] = {"temperature": RELAXED_TEMPERATURE if verification.relaxed else 0.0}
    sampling.update({"ignore_eos": True} if ignore_eos else {"stop_token_ids": [int(i) for i in eos_ids]})
    return ServingCall("sglang", method, "sglang.Engine", kwargs, sampling, "max_new_tokens", dllm, notes)


def generation_from_sglang(output: dict, *, method: str, eos_ids, decode, wall_s: float) -> Generation:
    """A Generation from one `sglang.Engine.generate` result ({"output_ids", "meta_info"})."""
    if not isinstance(output, dict) or "output_ids" not in output or "meta_info" not in output:
        raise InputError(
            f"sglang output: expected a dict with output_ids and meta_info, got {str(output)[:200]}"
        )
    meta = output["meta_info"]
    finish = meta.get("finish_reason") or {}
    stopped = isinstance(finish, dict) and finish.get("type") == "stop" and finish.get("matched") in eos_ids
    tokens = cut_at_eos(output["output_ids"], eos_ids, stopped)
    extra: dict[str, Any] = {"finish_reason": finish, "server_latency_s": meta.get("e2e_latency")}
    forwards = len(tokens)  # the prefill's token, then one per decode forward
    prefill = 1 if tokens else 0
    if method == "dllm":
        forwards = prefill  # nfe 0: unknown
        extra["nfe_unavailable"] = "sglang's dLLM backend reports no per-request forward count"
    elif method in SPECULATIVE_ALGORITHMS:
        # SGLang writes the spec_* keys only once a verify step ran: none after a prefill-only request.
        verify = meta.get("spec_verify_ct", 0 if len(tokens) <= 1 else None)
        if not isinstance(verify, int) or verify < 0:
            raise InputError(
                f"sglang output: meta_info.spec_verify_ct: expected a non-negative integer, got {verify!r}"
            )
        forwards = 1 + verify if tokens else 0
        extra.update(
            speculative_extra(
                verify_forwards=verify,
                drafted=meta.get("spec_num_proposed_drafts", 0),
                accepted=meta.get("spec_num_correct_drafts", 0),
                server_acceptance_length=meta.get("spec_accept_length"),
            )
        )
    return Generation(
        token_ids=tokens,
        text=decode(tokens),
        nfe=decode_forwards(forwards, prefill),
        nfe_prefill=prefill,
        wall_time_s=wall_s,
        extra=extra,
    )


class SGLangEngine:
    """One sglang.Engine serving one row; close() (or `with`) shuts its processes down."""

    name = "sglang"

    def __init__(
        self,
        call: ServingCall,
        config: dict,
        tokenizer,
        policy: Policy | None = None,
        workdir: tempfile.TemporaryDirectory | None = None,
    ):
        import sglang

        self.call, self.config, self.tokenizer, self.policy = call, config, tokenizer, policy
        self.device = torch.device("cuda")
        self.ckpt_dir = Path(call.kwargs["model_path"])
        self.max_positions = int(config["max_position_embeddings"])
        self._workdir = workdir  # holds the dLLM YAML until the engine is closed
        if call.dllm_config is not None:
            write_dllm_config(call)
        try:
            self.engine = sglang.Engine(**call.kwargs)
        except Exception as exc:  # e.g. "Unknown diffusion LLM: ...", an unsupported draft
            self.close()
            raise EngineUnavailable(
                f"sglang cannot serve {self.ckpt_dir} ({call.method}): {type(exc).__name__}: {exc}"
            ) from exc
        self.precision = self._served_dtype()

    def _served_dtype(self) -> str:
        """The dtype the server resolved (dtype "auto" becomes the checkpoint's or bf16/fp16)."""
        model_config = getattr(getattr(self.engine, "tokenizer_manager", None), "model_config", None)
        dtype = getattr(model_config, "dtype", None)
        if dtype is not None:
            return str(dtype).removeprefix("torch.")
        asked = self.call.kwargs["dtype"]
        return asked if asked != "auto" else "unknown (sglang resolved dtype auto)"

    def describe(self) -> EngineInfo:
        if self.call.method == "dllm":
            policy = self.policy.to_record()
        elif self.call.method in SPECULATIVE_ALGORITHMS:
            single = self.call.kwargs.get("speculative_accept_threshold_single")
            rule = "greedy" if single is None else f"relaxed:{single:g}"
            policy = {
                "name": f"sglang-{self.call.method}",
                "params": {
                    "num_draft_tokens": self.call.kwargs["speculative_num_draft_tokens"],
                    "verification": rule,
                },
            }
        else:
            policy = None
        settings = {
            "method": self.call.method,
            "sglang_version": package_version("sglang"),
            "serving_kwargs": self.call.kwargs,
            "dllm_algorithm_config": self.call.dllm_config,
            "notes": list(self.call.notes),
        }
        return EngineInfo(
            self.name,
            model_name(self.config, self.ckpt_dir),
            str(self.ckpt_dir),
            self.precision,
            str(self.device),
            policy,
            settings,
            speculative=self.call.method in SPECULATIVE_ALGORITHMS,
            counts_draft_forwards=False,
        )

    def compile_key(self, prompt: str, max_new_tokens: int) -> None:
        return None  # SGLang captures its own graphs at start-up

    def generate(self, prompt: str, max_new_tokens: int) -> Generation:
        ids = self.tokenizer.encode(prompt)
        plan_request(len(ids), max_new_tokens, self.max_positions)
        start = time.perf_counter()
        out = self.engine.generate(input_ids=ids, sampling_params=self.call.sampling_for(max_new_tokens))
        wall = time.perf_counter() - start
        return generation_from_sglang(
            out,
            method=self.call.method,
            eos_ids=self.tokenizer.eos_ids,
            decode=self.tokenizer.decode_completion,
            wall_s=wall,
        )

    def close(self) -> None:
        """Shut the server processes down (their GPU memory with them) and remove the YAML (idempotent)."""
        engine, self.engine = getattr(self, "engine", None), None
        if engine is not None:
            engine.shutdown()
        if self._workdir is not None:
            self._workdir.cleanup()
            self._workdir = None

    def __enter__(self) -> SGLangEngine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
