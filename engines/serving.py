"""vLLM and SGLang behind the Engine interface (GPU rows of Tables 2 and 3).

Neither package is imported at module level: they need CUDA and take seconds
to import. Everything that can be decided without them is a pure function
here and is what the tests cover:

- which method a row runs (`serving_method`): plain AR, draft-model speculative,
  EAGLE3, or SGLang's dLLM backend;
- the constructor arguments (`vllm_llm_kwargs`, `sglang_engine_kwargs`) and the
  per-request sampling arguments (greedy, stop at <eos>, token ids in and out);
- parsing what comes back into Generation fields (`parse_vllm_spec_counters`,
  `generation_from_vllm`, `generation_from_sglang`).

Prompts are tokenized by our tokenizer and passed as token ids (both servers
run with `skip_tokenizer_init`), so every engine sees exactly the same tokens.

How forwards are counted (the convention of engines/reference.py and hf.py:
the forward that processes the prompt also yields the first token and counts):
- AR: nfe = generated tokens.
- vLLM speculative: vLLM counts, per verification step, one draft
  (`vllm:spec_decode_num_drafts`), the drafted tokens and the accepted ones; the
  request's target forwards are its prefill plus one per verification step, so
  nfe = 1 + Δnum_drafts, and vLLM's own mean acceptance length
  1 + Δaccepted / Δdrafts goes to `extra["acceptance_length"]`.
- SGLang speculative: `meta_info["spec_verify_ct"]` verification forwards, nfe = 1 + that.
- SGLang dLLM: its per-request output carries no forward count, so nfe is left at 0
  and `extra["nfe_unavailable"]` says why; bench-latency then omits TPF rather
  than printing a made-up one.

`build_serving_engine` raises EngineUnavailable with the precise reason (no CUDA,
package missing, architecture the server cannot load); bench-latency turns that
into a "not run: <reason>" record.
"""

from __future__ import annotations

import importlib.util
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from orl.decoding import Policy, plan_request
from orl.engines.base import EngineInfo, EngineUnavailable, Generation
from orl.errors import CheckpointError, InputError

SERVING_ENGINES = ("vllm", "sglang")
# Rows each server can run: vLLM serves the AR model alone or with speculation;
# SGLang serves it alone, with EAGLE3, or (Table 3) a dLLM through its dLLM backend.
METHODS = {"vllm": ("ar", "draft_model", "eagle3"), "sglang": ("ar", "eagle3", "dllm")}
DEFAULT_SPECULATIVE_TOKENS = 5


# --------------------------------------------------------------------------------------
# Can it run here?
# --------------------------------------------------------------------------------------


def unavailable_reason(package: str, *, cuda: bool, installed: bool) -> str | None:
    """The "not run" reason for a serving engine, None when both CUDA and the package are there."""
    if not cuda and not installed:
        return f"needs CUDA and {package}"
    if not installed:
        return f"needs {package} (not installed; pip install 'orl-harness[gpu]')"
    if not cuda:
        return f"needs CUDA ({package} is installed but torch sees no GPU)"
    return None


def _environment_reason(package: str) -> str | None:
    import torch

    installed = importlib.util.find_spec(package) is not None
    return unavailable_reason(package, cuda=torch.cuda.is_available(), installed=installed)


# --------------------------------------------------------------------------------------
# Configuration (pure)
# --------------------------------------------------------------------------------------


def serving_method(engine: str, config: dict, draft_config: dict | None, method: str | None = None) -> str:
    """Which row this is, from the checkpoint configs (or `method` when given explicitly).

    A block-diffusion target means SGLang's dLLM backend; a draft whose architecture
    names EAGLE3 means EAGLE3; any other draft is draft-model speculation.
    """
    if engine not in SERVING_ENGINES:
        raise InputError(f"--engine: {engine!r} is not a serving engine ({', '.join(SERVING_ENGINES)})")
    diffusion = config["architectures"][0] == "OrlBlockDiffusionLM"
    if method is None:
        if diffusion:
            method = "dllm"
        elif draft_config is None:
            method = "ar"
        else:
            archs = " ".join(str(a) for a in draft_config.get("architectures") or [])
            method = "eagle3" if "eagle3" in archs.lower() else "draft_model"
    if method not in METHODS[engine]:
        raise InputError(f"{engine}: cannot run {method!r}; it runs {', '.join(METHODS[engine])}")
    if diffusion != (method == "dllm"):
        what = "a block-diffusion checkpoint" if diffusion else "an AR checkpoint"
        raise CheckpointError(f"--ckpt: {engine} method {method!r} does not apply to {what}")
    if method in ("draft_model", "eagle3") and draft_config is None:
        raise InputError(f"--draft: {engine} method {method!r} needs a draft checkpoint")
    return method


def read_draft_config(draft_dir: str | Path) -> dict:
    """A draft's config.json, any architecture (an EAGLE3 head is not one of our checkpoints)."""
    from orl.model.checkpoint import read_json_config

    return read_json_config(Path(draft_dir) / "config.json", "the draft checkpoint needs a config.json")


def vllm_llm_kwargs(
    ckpt_dir: str | Path, *, method: str = "ar", draft_dir: str | Path | None = None,
    num_speculative_tokens: int = DEFAULT_SPECULATIVE_TOKENS, max_model_len: int | None = None,
    dtype: str = "auto", seed: int = 0, gpu_memory_utilization: float = 0.8, enforce_eager: bool = False,
) -> dict[str, Any]:
    """Keyword arguments of `vllm.LLM(...)` for one Table 2 row, batch-1 latency settings."""
    if method not in METHODS["vllm"]:
        raise InputError(f"vllm: unknown method {method!r}; expected one of {', '.join(METHODS['vllm'])}")
    kwargs: dict[str, Any] = {
        "model": str(ckpt_dir),
        "skip_tokenizer_init": True,  # token ids in and out: our tokenizer, as for every engine
        "dtype": dtype,
        "seed": seed,
        "max_num_seqs": 1,  # batch 1: the latency protocol of METHOD.md §4
        "enable_prefix_caching": False,  # every request pays its prefill, as in the other engines
        "disable_log_stats": False,  # LLM.get_metrics() (spec-decode counters) needs stats on
        "gpu_memory_utilization": gpu_memory_utilization,
        "enforce_eager": enforce_eager,
    }
    if max_model_len is not None:
        kwargs["max_model_len"] = max_model_len
    if method != "ar":
        if draft_dir is None:
            raise InputError(f"--draft: vllm method {method!r} needs a draft checkpoint")
        if num_speculative_tokens < 1:
            raise InputError(f"num_speculative_tokens: expected a positive integer, got {num_speculative_tokens}")
        kwargs["speculative_config"] = {
            "method": method,
            "model": str(draft_dir),
            "num_speculative_tokens": num_speculative_tokens,
        }
    return kwargs


def vllm_sampling_kwargs(max_new_tokens: int, eos_id: int) -> dict[str, Any]:
    """Keyword arguments of `vllm.SamplingParams(...)`: greedy, stop at <eos>, no detokenization."""
    return {"temperature": 0.0, "max_tokens": max_new_tokens, "stop_token_ids": [eos_id], "detokenize": False}


def sglang_dllm_algorithm_config(policy: Policy, block_size: int) -> dict[str, Any]:
    """SGLang's LowConfidence dLLM settings matching our policy (the YAML of --dllm-algorithm-config).

    LowConfidence commits every masked position whose confidence clears a threshold
    (at least one per step): our `threshold:τ` policy. Other policies have no
    SGLang equivalent, and Table 3 compares identical settings only.
    """
    if policy.name != "threshold":
        raise InputError(f"--policy: sglang's dLLM backend (LowConfidence) runs threshold:<τ> only, got {policy}")
    return {"threshold": float(policy.value), "block_size": int(block_size)}


def sglang_engine_kwargs(
    ckpt_dir: str | Path, *, method: str = "ar", draft_dir: str | Path | None = None,
    num_speculative_tokens: int = DEFAULT_SPECULATIVE_TOKENS, dllm_config_path: str | Path | None = None,
    dtype: str = "auto", seed: int = 0,
) -> dict[str, Any]:
    """Keyword arguments of `sglang.Engine(...)` for one Table 2/3 row."""
    if method not in METHODS["sglang"]:
        raise InputError(f"sglang: unknown method {method!r}; expected one of {', '.join(METHODS['sglang'])}")
    kwargs: dict[str, Any] = {
        "model_path": str(ckpt_dir),
        "skip_tokenizer_init": True,
        "dtype": dtype,
        "random_seed": seed,
        "max_running_requests": 1,
        "disable_radix_cache": True,  # no prefix reuse between the suite's requests
    }
    if method == "eagle3":
        if draft_dir is None:
            raise InputError("--draft: sglang method 'eagle3' needs a draft checkpoint")
        kwargs.update(
            speculative_algorithm="EAGLE3", speculative_draft_model_path=str(draft_dir),
            speculative_num_steps=num_speculative_tokens, speculative_eagle_topk=1,  # a chain, as greedy verification
            speculative_num_draft_tokens=num_speculative_tokens + 1,
        )
    elif method == "dllm":
        if dllm_config_path is None:
            raise InputError("sglang method 'dllm' needs the LowConfidence config file (dllm_config_path)")
        kwargs.update(dllm_algorithm="LowConfidence", dllm_algorithm_config=str(dllm_config_path))
    return kwargs


def sglang_sampling_params(max_new_tokens: int, eos_id: int) -> dict[str, Any]:
    return {"temperature": 0.0, "max_new_tokens": max_new_tokens, "stop_token_ids": [eos_id]}


# --------------------------------------------------------------------------------------
# Parsing what comes back (pure)
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SpecCounters:
    """vLLM's cumulative speculative-decoding counters."""

    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0

    def __sub__(self, other: SpecCounters) -> SpecCounters:
        return SpecCounters(self.num_drafts - other.num_drafts, self.num_draft_tokens - other.num_draft_tokens,
                            self.num_accepted_tokens - other.num_accepted_tokens)

    @property
    def acceptance_length(self) -> float | None:
        """Mean tokens per verification step, the bonus token included (vLLM's definition)."""
        return 1.0 + self.num_accepted_tokens / self.num_drafts if self.num_drafts else None


VLLM_SPEC_METRICS = {
    "vllm:spec_decode_num_drafts": "num_drafts",
    "vllm:spec_decode_num_draft_tokens": "num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens": "num_accepted_tokens",
}


def parse_vllm_spec_counters(metrics) -> SpecCounters:
    """Sum vLLM's spec-decode counters from `LLM.get_metrics()` (objects or dicts with name and value).

    A counter can appear once per engine / label set, so values of one name are summed.
    """
    totals = dict.fromkeys(VLLM_SPEC_METRICS.values(), 0)
    for metric in metrics:
        name = metric.get("name") if isinstance(metric, dict) else getattr(metric, "name", None)
        if name not in VLLM_SPEC_METRICS:
            continue
        value = metric.get("value") if isinstance(metric, dict) else getattr(metric, "value", None)
        if not isinstance(value, (int, float)) or value < 0:
            raise InputError(f"vllm metrics: {name}: expected a non-negative counter value, got {value!r}")
        totals[VLLM_SPEC_METRICS[name]] += int(value)
    return SpecCounters(**totals)


def _cut_at_eos(token_ids: list[int], eos_id: int, stopped_on_eos: bool) -> list[int]:
    """Tokens up to and including the first <eos>; servers that drop the stop token get it back."""
    token_ids = list(token_ids)
    if eos_id in token_ids:
        return token_ids[: token_ids.index(eos_id) + 1]
    if stopped_on_eos:
        token_ids.append(eos_id)
    return token_ids


def generation_from_vllm(
    token_ids: list[int], *, finish_reason: str | None, stop_reason, eos_id: int, decode, wall_s: float,
    spec: SpecCounters | None,
) -> Generation:
    """A Generation from one vLLM CompletionOutput's fields and the request's counter deltas (None for AR)."""
    tokens = _cut_at_eos(token_ids, eos_id, finish_reason == "stop" and stop_reason == eos_id)
    extra: dict[str, Any] = {"finish_reason": finish_reason}
    if spec is None:
        nfe = len(tokens)
    else:
        nfe = 1 + spec.num_drafts if tokens else 0
        extra.update(spec_num_drafts=spec.num_drafts, spec_num_draft_tokens=spec.num_draft_tokens,
                     spec_num_accepted_tokens=spec.num_accepted_tokens, acceptance_length=spec.acceptance_length)
    return Generation(token_ids=tokens, text=decode(tokens), nfe=nfe, prefill_forwards=1 if tokens else 0,
                      wall_time_s=wall_s, extra=extra)


def generation_from_sglang(output: dict, *, method: str, eos_id: int, decode, wall_s: float) -> Generation:
    """A Generation from one `sglang.Engine.generate` result ({"output_ids", "meta_info"})."""
    if not isinstance(output, dict) or "output_ids" not in output or "meta_info" not in output:
        raise InputError(f"sglang output: expected a dict with output_ids and meta_info, got {str(output)[:200]}")
    meta = output["meta_info"]
    finish = meta.get("finish_reason") or {}
    stopped_on_eos = isinstance(finish, dict) and finish.get("type") == "stop" and finish.get("matched") == eos_id
    tokens = _cut_at_eos(output["output_ids"], eos_id, stopped_on_eos)
    extra: dict[str, Any] = {"finish_reason": finish, "server_latency_s": meta.get("e2e_latency")}
    if method == "ar":
        nfe = len(tokens)
    elif method == "dllm":
        nfe = 0
        extra["nfe_unavailable"] = "sglang's dLLM backend reports no per-request forward count"
    else:
        verify = meta.get("spec_verify_ct")
        if not isinstance(verify, int) or verify < 0:
            raise InputError(f"sglang output: meta_info.spec_verify_ct: expected a non-negative integer, got {verify!r}")
        nfe = 1 + verify if tokens else 0
        completion = meta.get("completion_tokens", len(tokens))
        extra.update(spec_verify_ct=verify, acceptance_length=completion / verify if verify else None)
    return Generation(token_ids=tokens, text=decode(tokens), nfe=nfe, prefill_forwards=1 if tokens else 0,
                      wall_time_s=wall_s, extra=extra)


# --------------------------------------------------------------------------------------
# The engines (need CUDA and the package; never imported by the tests)
# --------------------------------------------------------------------------------------


class VLLMEngine:
    """One vllm.LLM serving one row; batch-1 greedy requests with token ids in and out."""

    name = "vllm"

    def __init__(self, ckpt_dir: Path, config: dict, *, method: str, draft_dir: Path | None, **llm_options):
        from vllm import LLM

        from orl.tokenizer import load_tokenizer

        self.method, self.device = method, torch.device("cuda")
        self.ckpt_dir, self.config = ckpt_dir, config
        self.tokenizer = load_tokenizer(ckpt_dir)
        self.max_positions = int(config["max_position_embeddings"])
        self.precision = str(config.get("dtype") or config.get("torch_dtype") or "auto")
        self.llm = LLM(**vllm_llm_kwargs(ckpt_dir, method=method, draft_dir=draft_dir, **llm_options))

    def describe(self) -> EngineInfo:
        policy = None if self.method == "ar" else {"name": f"vllm-{self.method}", "params": {}}
        return EngineInfo(self.name, self.config.get("orl_model_name") or self.ckpt_dir.name, str(self.ckpt_dir),
                          self.precision, str(self.device), policy, {"method": self.method})

    def compile_key(self, prompt: str, max_new_tokens: int) -> None:
        return None  # vLLM captures its own graphs at start-up

    def _counters(self) -> SpecCounters | None:
        return None if self.method == "ar" else parse_vllm_spec_counters(self.llm.get_metrics())

    def generate(self, prompt: str, max_new_tokens: int) -> Generation:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        ids = self.tokenizer.encode(prompt)
        plan_request(len(ids), max_new_tokens, self.max_positions)
        before = self._counters()
        start = time.perf_counter()
        out = self.llm.generate([TokensPrompt(prompt_token_ids=ids)],
                                SamplingParams(**vllm_sampling_kwargs(max_new_tokens, self.tokenizer.eos_id)),
                                use_tqdm=False)[0].outputs[0]
        wall = time.perf_counter() - start
        after = self._counters()
        return generation_from_vllm(
            list(out.token_ids), finish_reason=out.finish_reason, stop_reason=out.stop_reason,
            eos_id=self.tokenizer.eos_id, decode=self.tokenizer.decode_completion, wall_s=wall,
            spec=None if before is None else after - before,
        )


class SGLangEngine:
    """One sglang.Engine serving one row (AR, EAGLE3 or its dLLM backend)."""

    name = "sglang"

    def __init__(self, ckpt_dir: Path, config: dict, *, method: str, draft_dir: Path | None,
                 policy: Policy | None, **engine_options):
        import sglang

        from orl.io import atomic_write_text
        from orl.tokenizer import load_tokenizer

        self.method, self.device = method, torch.device("cuda")
        self.ckpt_dir, self.config = ckpt_dir, config
        self.tokenizer = load_tokenizer(ckpt_dir)
        self.max_positions = int(config["max_position_embeddings"])
        self.precision = str(config.get("dtype") or config.get("torch_dtype") or "auto")
        self.policy = policy
        dllm_path = None
        if method == "dllm":
            import yaml

            settings = sglang_dllm_algorithm_config(policy or Policy("threshold", 0.9), int(config["block_size"]))
            self._tmp = tempfile.TemporaryDirectory(prefix="orl-sglang-")
            dllm_path = Path(self._tmp.name) / "dllm_algorithm.yaml"
            atomic_write_text(dllm_path, yaml.safe_dump(settings))
        kwargs = sglang_engine_kwargs(ckpt_dir, method=method, draft_dir=draft_dir, dllm_config_path=dllm_path,
                                      **engine_options)
        try:
            self.engine = sglang.Engine(**kwargs)
        except Exception as exc:  # e.g. "Unknown diffusion LLM: OrlBlockDiffusionLM"
            raise EngineUnavailable(f"sglang cannot serve {ckpt_dir} ({method}): {exc}") from exc

    def describe(self) -> EngineInfo:
        if self.method == "dllm":
            policy = (self.policy or Policy("threshold", 0.9)).to_record()
        else:
            policy = None if self.method == "ar" else {"name": f"sglang-{self.method}", "params": {}}
        return EngineInfo(self.name, self.config.get("orl_model_name") or self.ckpt_dir.name, str(self.ckpt_dir),
                          self.precision, str(self.device), policy, {"method": self.method})

    def compile_key(self, prompt: str, max_new_tokens: int) -> None:
        return None

    def generate(self, prompt: str, max_new_tokens: int) -> Generation:
        ids = self.tokenizer.encode(prompt)
        plan_request(len(ids), max_new_tokens, self.max_positions)
        start = time.perf_counter()
        out = self.engine.generate(input_ids=ids,
                                   sampling_params=sglang_sampling_params(max_new_tokens, self.tokenizer.eos_id))
        wall = time.perf_counter() - start
        return generation_from_sglang(out, method=self.method, eos_id=self.tokenizer.eos_id,
                                      decode=self.tokenizer.decode_completion, wall_s=wall)


def build_serving_engine(
    name: str, ckpt_dir: str | Path, *, draft_dir: str | Path | None = None, policy: Policy | None = None,
    method: str | None = None, **options,
):
    """The vllm / sglang engine for a row, or EngineUnavailable with the reason it cannot run here.

    CUDA and the package are checked first, then the checkpoints, and only then is the
    package imported.
    """
    from orl.model.checkpoint import read_config

    if name not in SERVING_ENGINES:
        raise InputError(f"--engine: {name!r} is not a serving engine ({', '.join(SERVING_ENGINES)})")
    # The environment first: on a machine without CUDA or the package the row cannot run whatever
    # the checkpoints are (the CPU profiles have no EAGLE3 head at all), and that is the reason to print.
    reason = _environment_reason(name)
    if reason is not None:
        raise EngineUnavailable(reason)
    ckpt_dir = Path(ckpt_dir)
    config = read_config(ckpt_dir)
    draft_config = read_draft_config(draft_dir) if draft_dir is not None else None
    method = serving_method(name, config, draft_config, method)
    draft = Path(draft_dir) if draft_dir is not None else None
    if name == "vllm":
        return VLLMEngine(ckpt_dir, config, method=method, draft_dir=draft, **options)
    return SGLangEngine(ckpt_dir, config, method=method, draft_dir=draft, policy=policy, **options)
