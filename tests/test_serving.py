"""vLLM / SGLang rows: configuration built and outputs parsed, without importing either package."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from orl.decoding import Policy
from orl.engines import serving
from orl.engines.base import EngineUnavailable
from orl.errors import CheckpointError, InputError

AR = {"architectures": ["Qwen3ForCausalLM"]}
DLM = {"architectures": ["OrlBlockDiffusionLM"], "block_size": 8}
DRAFT = {"architectures": ["Qwen3ForCausalLM"]}
EAGLE3 = {"architectures": ["Eagle3LlamaForCausalLM"]}


def test_unavailable_reason_names_what_is_missing():
    assert serving.unavailable_reason("vllm", cuda=False, installed=False) == "needs CUDA and vllm"
    assert serving.unavailable_reason("vllm", cuda=True, installed=False).startswith("needs vllm")
    assert serving.unavailable_reason("sglang", cuda=False, installed=True).startswith("needs CUDA")
    assert serving.unavailable_reason("sglang", cuda=True, installed=True) is None


@pytest.mark.parametrize(
    ("engine", "config", "draft", "expected"),
    [
        ("vllm", AR, None, "ar"),
        ("vllm", AR, DRAFT, "draft_model"),
        ("vllm", AR, EAGLE3, "eagle3"),
        ("sglang", AR, None, "ar"),
        ("sglang", AR, EAGLE3, "eagle3"),
        ("sglang", DLM, None, "dllm"),
    ],
)
def test_serving_method_from_configs(engine, config, draft, expected):
    assert serving.serving_method(engine, config, draft) == expected


def test_serving_method_rejects_rows_a_server_cannot_run():
    with pytest.raises(InputError, match="cannot run 'dllm'"):
        serving.serving_method("vllm", DLM, None)
    with pytest.raises(InputError, match="cannot run 'draft_model'"):
        serving.serving_method("sglang", AR, DRAFT)
    with pytest.raises(CheckpointError, match="does not apply"):
        serving.serving_method("sglang", AR, None, method="dllm")
    with pytest.raises(InputError, match="needs a draft"):
        serving.serving_method("vllm", AR, None, method="eagle3")


def test_vllm_kwargs_plain_and_speculative():
    plain = serving.vllm_llm_kwargs("/m/ar")
    assert plain["model"] == "/m/ar" and plain["max_num_seqs"] == 1 and plain["skip_tokenizer_init"] is True
    assert plain["enable_prefix_caching"] is False and plain["disable_log_stats"] is False
    assert "speculative_config" not in plain
    spec = serving.vllm_llm_kwargs("/m/ar", method="draft_model", draft_dir="/m/draft", num_speculative_tokens=4,
                                   max_model_len=256)
    assert spec["speculative_config"] == {"method": "draft_model", "model": "/m/draft", "num_speculative_tokens": 4}
    assert spec["max_model_len"] == 256
    eagle = serving.vllm_llm_kwargs("/m/ar", method="eagle3", draft_dir="/m/eagle")
    assert eagle["speculative_config"]["method"] == "eagle3"
    assert eagle["speculative_config"]["num_speculative_tokens"] == serving.DEFAULT_SPECULATIVE_TOKENS
    with pytest.raises(InputError, match="--draft"):
        serving.vllm_llm_kwargs("/m/ar", method="eagle3")
    with pytest.raises(InputError, match="num_speculative_tokens"):
        serving.vllm_llm_kwargs("/m/ar", method="draft_model", draft_dir="/d", num_speculative_tokens=0)
    assert serving.vllm_sampling_kwargs(32, 1) == {"temperature": 0.0, "max_tokens": 32, "stop_token_ids": [1],
                                                   "detokenize": False}


def test_sglang_kwargs_and_dllm_settings():
    ar = serving.sglang_engine_kwargs("/m/ar")
    assert ar["model_path"] == "/m/ar" and ar["max_running_requests"] == 1 and ar["disable_radix_cache"]
    assert "speculative_algorithm" not in ar and "dllm_algorithm" not in ar
    eagle = serving.sglang_engine_kwargs("/m/ar", method="eagle3", draft_dir="/m/e", num_speculative_tokens=3)
    assert eagle["speculative_algorithm"] == "EAGLE3" and eagle["speculative_draft_model_path"] == "/m/e"
    assert eagle["speculative_num_steps"] == 3 and eagle["speculative_num_draft_tokens"] == 4
    dllm = serving.sglang_engine_kwargs("/m/dlm", method="dllm", dllm_config_path="/tmp/c.yaml")
    assert dllm["dllm_algorithm"] == "LowConfidence" and dllm["dllm_algorithm_config"] == "/tmp/c.yaml"
    with pytest.raises(InputError):
        serving.sglang_engine_kwargs("/m/dlm", method="dllm")
    assert serving.sglang_dllm_algorithm_config(Policy.parse("threshold:0.8"), 16) == {"threshold": 0.8,
                                                                                       "block_size": 16}
    with pytest.raises(InputError, match="threshold"):
        serving.sglang_dllm_algorithm_config(Policy.parse("fixed:2"), 16)


def test_parse_vllm_spec_counters_and_acceptance_length():
    metrics = [
        SimpleNamespace(name="vllm:spec_decode_num_drafts", value=10),
        SimpleNamespace(name="vllm:spec_decode_num_draft_tokens", value=50),
        SimpleNamespace(name="vllm:spec_decode_num_accepted_tokens", value=20),
        SimpleNamespace(name="vllm:spec_decode_num_accepted_tokens", value=5),  # a second engine: summed
        SimpleNamespace(name="vllm:prompt_tokens", value=999),
        {"name": "vllm:spec_decode_num_drafts", "value": 2},
    ]
    counters = serving.parse_vllm_spec_counters(metrics)
    assert counters == serving.SpecCounters(num_drafts=12, num_draft_tokens=50, num_accepted_tokens=25)
    assert counters.acceptance_length == pytest.approx(1 + 25 / 12)
    delta = counters - serving.SpecCounters(2, 10, 5)
    assert delta == serving.SpecCounters(10, 40, 20) and delta.acceptance_length == 3.0
    assert serving.SpecCounters().acceptance_length is None
    with pytest.raises(InputError, match="spec_decode_num_drafts"):
        serving.parse_vllm_spec_counters([SimpleNamespace(name="vllm:spec_decode_num_drafts", value=-1)])


def _decode(ids):
    return " ".join(map(str, ids))


def test_generation_from_vllm():
    ar = serving.generation_from_vllm([5, 6, 1, 7], finish_reason="stop", stop_reason=1, eos_id=1, decode=_decode,
                                      wall_s=0.5, spec=None)
    assert ar.token_ids == [5, 6, 1] and ar.nfe == 3 and ar.tpf == 1.0
    # a server that drops the stop token: it is put back so token counts include <eos>
    dropped = serving.generation_from_vllm([5, 6], finish_reason="stop", stop_reason=1, eos_id=1, decode=_decode,
                                           wall_s=0.5, spec=None)
    assert dropped.token_ids == [5, 6, 1]
    length = serving.generation_from_vllm([5, 6], finish_reason="length", stop_reason=None, eos_id=1,
                                          decode=_decode, wall_s=0.5, spec=None)
    assert length.token_ids == [5, 6]
    spec = serving.generation_from_vllm(list(range(2, 12)), finish_reason="length", stop_reason=None, eos_id=1,
                                        decode=_decode, wall_s=0.5, spec=serving.SpecCounters(3, 15, 6))
    assert spec.nfe == 4 and spec.num_tokens == 10  # prefill + 3 verification steps
    assert spec.extra["acceptance_length"] == 3.0 and spec.extra["spec_num_draft_tokens"] == 15


def test_generation_from_sglang():
    meta = {"completion_tokens": 4, "finish_reason": {"type": "stop", "matched": 1}, "e2e_latency": 0.2}
    ar = serving.generation_from_sglang({"output_ids": [4, 5, 6], "meta_info": meta}, method="ar", eos_id=1,
                                        decode=_decode, wall_s=0.3)
    assert ar.token_ids == [4, 5, 6, 1] and ar.nfe == 4
    eagle = serving.generation_from_sglang(
        {"output_ids": [4, 5, 6, 7, 8, 9], "meta_info": {"completion_tokens": 6, "spec_verify_ct": 2}},
        method="eagle3", eos_id=1, decode=_decode, wall_s=0.3)
    assert eagle.nfe == 3 and eagle.extra["acceptance_length"] == 3.0
    dllm = serving.generation_from_sglang({"output_ids": [4, 1], "meta_info": {}}, method="dllm", eos_id=1,
                                          decode=_decode, wall_s=0.3)
    assert dllm.nfe == 0 and "no per-request forward count" in dllm.extra["nfe_unavailable"]
    with pytest.raises(InputError, match="output_ids"):
        serving.generation_from_sglang({"text": "x"}, method="ar", eos_id=1, decode=_decode, wall_s=0.1)
    with pytest.raises(InputError, match="spec_verify_ct"):
        serving.generation_from_sglang({"output_ids": [4], "meta_info": {}}, method="eagle3", eos_id=1,
                                       decode=_decode, wall_s=0.1)


def test_build_serving_engine_reports_the_reason_without_importing(ar_ckpt_dir, monkeypatch):
    import importlib.util

    import torch

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in ("vllm", "sglang") else real_find_spec(name, *a))
    from orl.engines.registry import build_engine

    with pytest.raises(EngineUnavailable, match="^needs CUDA and vllm$"):
        build_engine("vllm", ar_ckpt_dir)
    with pytest.raises(EngineUnavailable, match="^needs CUDA and sglang$"):
        serving.build_serving_engine("sglang", ar_ckpt_dir)
    assert "vllm" not in sys.modules and "sglang" not in sys.modules
    # Without CUDA the environment is the reason, even for a row whose draft does not exist here...
    with pytest.raises(EngineUnavailable, match="^needs CUDA and vllm$"):
        serving.build_serving_engine("vllm", ar_ckpt_dir, draft_dir=ar_ckpt_dir / "missing")
    # ...and where the engine could run, a bad checkpoint path is an input error naming the file.
    monkeypatch.setattr(serving, "_environment_reason", lambda name: None)
    with pytest.raises(CheckpointError, match="config.json"):
        serving.build_serving_engine("vllm", ar_ckpt_dir, draft_dir=ar_ckpt_dir / "missing")
