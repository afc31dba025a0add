"""vLLM / SGLang rows: the calls they make and what they parse, without either package.

The counter fixtures are values as each server reports them for one request (vLLM's
RequestSpecDecodeMetrics.to_dict(), SGLang's meta_info), with the converted values worked
out by hand below each one.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import types

import pytest
import yaml

from orl.decoding import Policy
from orl.engines import serving
from orl.engines.base import EngineUnavailable
from orl.engines.registry import build_engine, build_serving_engine, serving_call
from orl.engines.sglang import DLLM_MASK_IDS, NO_RESIDUAL, dllm_algorithm_config, generation_from_sglang
from orl.engines.vllm import generation_from_vllm, parse_spec_metrics, undrafted_forwards
from orl.errors import CheckpointError, InputError

AR = {"architectures": ["Qwen3ForCausalLM"]}
OURS = {"architectures": ["OrlBlockDiffusionLM"], "block_size": 8, "mask_token_id": 3}
SDAR = {"architectures": ["SDARForCausalLM"], "block_size": 4, "mask_token_id": 151669}
EOS = (1, 2)


def _decode(ids):
    return " ".join(map(str, ids))


@pytest.fixture
def folders(ar_ckpt_dir, tmp_path):
    """A served AR target (our tiny checkpoint), an SDAR-layout target, and draft folders (config.json
    only)."""
    sdar = tmp_path / "sdar"
    sdar.mkdir()
    shutil.copy(ar_ckpt_dir / "tokenizer.json", sdar / "tokenizer.json")
    (sdar / "config.json").write_text(json.dumps({**SDAR, "max_position_embeddings": 160}))
    out = {"ar": ar_ckpt_dir, "sdar": sdar}
    for name, arch in (
        ("draft", "Qwen3ForCausalLM"),
        ("eagle3", "LlamaForCausalLM"),
        ("dflash", "DFlashDraftModel"),
    ):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps({"architectures": [arch]}))
        out[name] = tmp_path / name
    return out


def test_unavailable_reason_names_what_is_missing():
    assert serving.unavailable_reason("vllm", cuda=False, installed=False) == "needs CUDA and vllm"
    assert serving.unavailable_reason("vllm", cuda=True, installed=False).startswith("needs vllm")
    assert serving.unavailable_reason("sglang", cuda=False, installed=True).startswith("needs CUDA")
    assert serving.unavailable_reason("sglang", cuda=True, installed=True) is None


@pytest.mark.parametrize(
    ("engine", "method", "config", "draft", "expected"),
    [
        ("vllm", None, AR, None, "ar"),
        ("vllm", "draft_model", AR, "d", "draft_model"),
        ("vllm", "eagle3", AR, "d", "eagle3"),
        ("vllm", "dflash", AR, "d", "dflash"),
        ("sglang", "standalone", AR, "d", "standalone"),
        ("sglang", None, SDAR, None, "dllm"),
        ("sglang", None, OURS, None, "dllm"),  # ours is a diffusion model too; sglang_call then says why not
    ],
)
def test_check_method_takes_the_rows_method(engine, method, config, draft, expected, tmp_path):
    draft_dir = None
    if draft:
        draft_dir = tmp_path
        (tmp_path / "config.json").write_text("{}")
    assert serving.check_method(engine, method, config, draft_dir) == expected


def test_check_method_rejects_what_a_server_cannot_run(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(InputError, match="vllm runs ar, draft_model, eagle3, dflash; got 'dllm'"):
        serving.check_method("vllm", "dllm", SDAR, None)
    with pytest.raises(InputError, match="got 'draft_model'"):
        serving.check_method("sglang", "draft_model", AR, tmp_path)  # SGLang's name is standalone
    with pytest.raises(CheckpointError, match="does not apply to an AR checkpoint"):
        serving.check_method("sglang", "dllm", AR, None)
    with pytest.raises(CheckpointError, match="does not apply to a block-diffusion checkpoint"):
        serving.check_method("vllm", "ar", SDAR, None)
    with pytest.raises(InputError, match="needs a draft"):
        serving.check_method("vllm", "eagle3", AR, None)
    with pytest.raises(InputError, match="takes no --draft"):
        serving.check_method("vllm", "ar", AR, tmp_path)
    with pytest.raises(InputError, match="needs the row's method"):  # never guessed from the draft's names
        serving.check_method("vllm", None, AR, tmp_path)
    with pytest.raises(CheckpointError, match="config.json: file not found"):
        serving.check_method("vllm", "eagle3", AR, tmp_path / "missing")


def test_vllm_calls(folders):
    plain = serving_call("vllm", "ar", folders["ar"], eos_ids=EOS)
    assert plain.constructor == "vllm.LLM" and plain.kwargs["model"] == str(folders["ar"])
    assert plain.kwargs["max_num_seqs"] == 1 and plain.kwargs["skip_tokenizer_init"] is True
    assert plain.kwargs["enable_prefix_caching"] is False and "speculative_config" not in plain.kwargs
    assert plain.sampling_for(32) == {
        "temperature": 0.0,
        "detokenize": False,
        "stop_token_ids": [1, 2],
        "max_tokens": 32,
    }
    draft = serving_call(
        "vllm",
        "draft_model",
        folders["ar"],
        eos_ids=EOS,
        draft_dir=folders["draft"],
        num_speculative_tokens=4,
        dtype="bfloat16",
    )
    assert draft.kwargs["speculative_config"] == {
        "method": "draft_model",
        "model": str(folders["draft"]),
        "num_speculative_tokens": 4,
    }
    assert (
        draft.kwargs["dtype"] == "bfloat16" and draft.kwargs["per_request_spec_decode_metrics"] == "summary"
    )
    # An EAGLE-3 head shipped as LlamaForCausalLM still runs eagle3: the row says so, not the name.
    eagle = serving_call("vllm", "eagle3", folders["ar"], eos_ids=EOS, draft_dir=folders["eagle3"])
    assert eagle.kwargs["speculative_config"]["method"] == "eagle3"
    assert eagle.kwargs["speculative_config"]["num_speculative_tokens"] == 5
    dflash = serving_call("vllm", "dflash", folders["ar"], eos_ids=EOS, draft_dir=folders["dflash"])
    assert dflash.kwargs["speculative_config"] == {
        "method": "dflash",
        "model": str(folders["dflash"]),
        "num_speculative_tokens": 15,
        "attention_backend": "FLASH_ATTN",
    }
    # A speed run: vLLM would still stop on stop_token_ids, so there are none.
    speed = serving_call("vllm", "ar", folders["ar"], eos_ids=EOS, ignore_eos=True)
    assert speed.sampling_for(8) == {
        "temperature": 0.0,
        "detokenize": False,
        "ignore_eos": True,
        "max_tokens": 8,
    }
    with pytest.raises(InputError, match="num-speculative-tokens"):
        serving_call(
            "vllm",
            "eagle3",
            folders["ar"],
            eos_ids=EOS,
            draft_dir=folders["eagle3"],
            num_speculative_tokens=0,
        )
    with pytest.raises(InputError, match="--dtype"):
        serving_call("vllm", "ar", folders["ar"], eos_ids=EOS, dtype="int8")


def test_sglang_calls(folders, tmp_path):
    ar = serving_call("sglang", "ar", folders["ar"], eos_ids=EOS)
    assert ar.constructor == "sglang.Engine" and ar.kwargs["model_path"] == str(folders["ar"])
    assert ar.kwargs["max_running_requests"] == 1 and ar.kwargs["disable_radix_cache"] is True
    assert "speculative_algorithm" not in ar.kwargs and ar.dllm_config is None
    assert ar.sampling_for(16) == {"temperature": 0.0, "stop_token_ids": [1, 2], "max_new_tokens": 16}
    standalone = serving_call(
        "sglang",
        "standalone",
        folders["ar"],
        eos_ids=EOS,
        draft_dir=folders["draft"],
        num_speculative_tokens=3,
    )
    assert {k: v for k, v in standalone.kwargs.items() if k.startswith("speculative")} == {
        "speculative_algorithm": "STANDALONE",
        "speculative_draft_model_path": str(folders["draft"]),
        "speculative_num_steps": 3,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4,
    }
    eagle = serving_call("sglang", "eagle3", folders["ar"], eos_ids=EOS, draft_dir=folders["eagle3"])
    assert (
        eagle.kwargs["speculative_algorithm"] == "EAGLE3"
        and eagle.kwargs["speculative_num_draft_tokens"] == 6
    )
    dflash = serving_call("sglang", "dflash", folders["ar"], eos_ids=EOS, draft_dir=folders["dflash"])
    assert (
        dflash.kwargs["speculative_algorithm"] == "DFLASH"
        and dflash.kwargs["speculative_num_draft_tokens"] == 16
    )
    assert "speculative_num_steps" not in dflash.kwargs  # DFLASH drafts its block in one step
    yaml_path = tmp_path / "dllm.yaml"
    dllm = serving_call(
        "sglang",
        "dllm",
        folders["sdar"],
        eos_ids=EOS,
        policy=Policy.parse("strict-threshold:0.8"),
        dllm_config_path=yaml_path,
        ignore_eos=True,
    )
    assert dllm.kwargs["dllm_algorithm"] == "LowConfidence" and dllm.kwargs["dllm_algorithm_config"] == str(
        yaml_path
    )
    assert dllm.dllm_config == {"threshold": 0.8, "block_size": 4} and dllm.notes == (NO_RESIDUAL,)
    assert dllm.sampling_for(8) == {"temperature": 0.0, "ignore_eos": True, "max_new_tokens": 8}
    serving.write_dllm_config(dllm)
    assert yaml.safe_load(yaml_path.read_text()) == {"threshold": 0.8, "block_size": 4}
    with pytest.raises(InputError, match="dllm_config_path"):
        serving_call(
            "sglang", "dllm", folders["sdar"], eos_ids=EOS, policy=Policy.parse("strict-threshold:0.8")
        )


def test_sglang_dllm_settings_say_what_cannot_match():
    strict = Policy.parse("strict-threshold:0.9")
    assert dllm_algorithm_config(strict, SDAR) == {"threshold": 0.9, "block_size": 4}
    # LowConfidence commits c > τ: our threshold:τ (c >= τ) is not the same rule.
    with pytest.raises(InputError, match="strict-threshold"):
        dllm_algorithm_config(Policy.parse("threshold:0.9"), SDAR)
    with pytest.raises(InputError, match="strict-threshold"):
        dllm_algorithm_config(None, SDAR)
    with pytest.raises(CheckpointError, match="orl export CKPT --format sdar"):
        dllm_algorithm_config(strict, OURS)  # sglang: "Unknown diffusion LLM: OrlBlockDiffusionLM"
    with pytest.raises(CheckpointError, match="hard-codes 151669"):
        dllm_algorithm_config(strict, {**SDAR, "mask_token_id": 5})
    with pytest.raises(CheckpointError, match="block_size"):
        dllm_algorithm_config(strict, {"architectures": ["SDARForCausalLM"]})
    assert DLLM_MASK_IDS["LLaDA2MoeModelLM"] == 156895


# ------------------------------------------------------------------------------ counters


# vLLM 0.33, per_request_spec_decode_metrics="summary": CompletionOutput.spec_decode_metrics.to_dict() of
# one EAGLE-3 request (k = 5) that produced 54 tokens, <eos> last, after 16 verify steps.
VLLM_EAGLE3 = {
    "mean_acceptance_length": 3.3125,
    "draft_acceptance_rate": 0.4625,
    "acceptance_histogram": [2, 3, 4, 4, 1, 2],
    "num_spec_steps": 16,
    "num_accepted_draft_tokens": 37,
    "num_draft_tokens": 80,
    "num_spec_tokens": 5,
}
# By hand: the prefill yields 1 token, the 16 verify steps 37 + 16 = 53: 54 tokens, no undrafted step;
# nfe = 1 + 16 = 17; acceptance length = (54 - 1) / 16 = 3.3125 (= vLLM's 1 + 37 / 16).

# The same vLLM, a DFlash request (k = 15) cut by <eos> inside its last verified block: 9 verify steps
# accepted 61 drafts (70 tokens verified) but the completion stops at token 66.
VLLM_DFLASH_CUT = {
    "mean_acceptance_length": 7.777777777777778,
    "draft_acceptance_rate": 0.45185185185185184,
    "acceptance_histogram": [0, 0, 1, 0, 1, 2, 0, 1, 1, 1, 1, 1, 0, 0, 0, 0],
    "num_spec_steps": 9,
    "num_accepted_draft_tokens": 61,
    "num_draft_tokens": 135,
    "num_spec_tokens": 15,
}
# By hand: nfe = 1 + 9 = 10; acceptance length = (66 - 1) / 9 = 7.2222 (vLLM's 7.7778 counts the
# accepted drafts past <eos>).

# SGLang 0.5.23 meta_info of one EAGLE3 request (speculative_num_draft_tokens 6): 54 completion tokens.
SGLANG_EAGLE3 = {
    "completion_tokens": 54,
    "spec_verify_ct": 16,
    "spec_accept_length": 3.375,
    "spec_accept_rate": 0.4625,
    "spec_num_correct_drafts": 37,
    "spec_num_proposed_drafts": 80,
    "finish_reason": {"type": "stop", "matched": 1},
    "e2e_latency": 0.41,
}
# By hand: SGLang's 54 / 16 = 3.375 counts the prefill's token; nfe = 16 (+ 1 prefill); acceptance length
# = 53 / 16 = 3.3125.


def test_vllm_counters_convert_to_the_one_acceptance_length():
    from orl.eval.speculative import acceptance_length

    tokens = list(range(10, 63)) + [1]  # 54 tokens, <eos> last
    g = generation_from_vllm(
        tokens,
        finish_reason="stop",
        stop_reason=None,
        eos_ids=EOS,
        decode=_decode,
        wall_s=0.2,
        speculative=True,
        spec_metrics=VLLM_EAGLE3,
    )
    assert g.num_tokens == 54 and g.nfe == 16 and g.nfe_prefill == 1
    assert g.extra["verify_forwards"] == 16 and g.extra["undrafted_forwards"] == 0
    assert g.extra["drafted_tokens"] == 80 and g.extra["accepted_tokens"] == 37
    assert g.extra["server_acceptance_length"] == 3.3125
    assert acceptance_length([g]) == pytest.approx(3.3125)

    cut = generation_from_vllm(
        list(range(10, 75)) + [2],
        finish_reason="stop",
        stop_reason=2,
        eos_ids=EOS,
        decode=_decode,
        wall_s=0.2,
        speculative=True,
        spec_metrics=VLLM_DFLASH_CUT,
    )
    assert cut.num_tokens == 66 and cut.nfe == 9 and cut.nfe_prefill == 1
    assert acceptance_length([cut]) == pytest.approx(65 / 9)
    assert cut.extra["server_acceptance_length"] == pytest.approx(1 + 61 / 9)
    # Both requests together: one ratio over the suite, not a mean of ratios.
    assert acceptance_length([g, cut]) == pytest.approx((53 + 65) / (16 + 9))


def test_vllm_decode_steps_without_a_draft_still_count():
    # 3 verify steps accepting 4 drafts give 1 + 3 + 4 = 8 tokens; 10 were produced: two decode steps
    # carried no draft (vLLM stops drafting near the end of the context), one forward and one token each.
    assert undrafted_forwards(10, 3, 4) == 2 and undrafted_forwards(7, 3, 4) == 0
    metrics = {"num_spec_steps": 3, "num_accepted_draft_tokens": 4, "num_draft_tokens": 15}
    g = generation_from_vllm(
        list(range(10, 20)),
        finish_reason="length",
        stop_reason=None,
        eos_ids=EOS,
        decode=_decode,
        wall_s=0.1,
        speculative=True,
        spec_metrics=metrics,
    )
    assert (g.nfe_prefill, g.nfe) == (1, 3 + 2) and g.extra["undrafted_forwards"] == 2
    with pytest.raises(InputError, match="num_spec_steps"):
        parse_spec_metrics({"num_spec_steps": -1, "num_accepted_draft_tokens": 0, "num_draft_tokens": 0})
    with pytest.raises(InputError, match="spec_decode_metrics is missing"):
        generation_from_vllm(
            [5],
            finish_reason="length",
            stop_reason=None,
            eos_ids=EOS,
            decode=_decode,
            wall_s=0.1,
            speculative=True,
            spec_metrics=None,
        )
    # The object vLLM returns is read through its to_dict().
    obj = types.SimpleNamespace(to_dict=lambda: VLLM_EAGLE3)
    assert parse_spec_metrics(obj)["steps"] == 16


def test_sglang_counters_convert_to_the_one_acceptance_length():
    from orl.eval.speculative import acceptance_length

    out = {"output_ids": list(range(10, 63)) + [1], "meta_info": SGLANG_EAGLE3}
    g = generation_from_sglang(out, method="eagle3", eos_ids=EOS, decode=_decode, wall_s=0.5)
    assert g.num_tokens == 54 and (g.nfe_prefill, g.nfe) == (1, 16) and g.extra["verify_forwards"] == 16
    assert g.extra["server_acceptance_length"] == 3.375  # SGLang's own, prefill token included
    assert acceptance_length([g]) == pytest.approx(53 / 16)
    assert g.extra["drafted_tokens"] == 80 and g.extra["accepted_tokens"] == 37
    # A request that stopped after its prefill: SGLang writes no spec_* keys at all.
    short = generation_from_sglang(
        {"output_ids": [1], "meta_info": {"completion_tokens": 1}},
        method="dflash",
        eos_ids=EOS,
        decode=_decode,
        wall_s=0.1,
    )
    assert (short.nfe_prefill, short.nfe) == (1, 0) and short.extra["verify_forwards"] == 0
    with pytest.raises(InputError, match="spec_verify_ct"):
        generation_from_sglang(
            {"output_ids": [4, 5, 6], "meta_info": {}},
            method="eagle3",
            eos_ids=EOS,
            decode=_decode,
            wall_s=0.1,
        )


def test_generations_cut_at_every_end_token():
    ar = generation_from_vllm(
        [5, 6, 2, 7],
        finish_reason="stop",
        stop_reason=2,
        eos_ids=EOS,
        decode=_decode,
        wall_s=0.5,
        speculative=False,
    )
    assert ar.token_ids == [5, 6, 2] and (ar.nfe_prefill, ar.nfe) == (1, 2) and ar.tpf == 1.5
    dropped = generation_from_vllm(
        [5, 6],
        finish_reason="stop",
        stop_reason=None,
        eos_ids=EOS,
        decode=_decode,
        wall_s=0.5,
        speculative=False,
    )
    assert dropped.token_ids == [5, 6, 1]  # the stop token put back: token counts include <eos>
    length = generation_from_vllm(
        [5, 6],
        finish_reason="length",
        stop_reason=None,
        eos_ids=EOS,
        decode=_decode,
        wall_s=0.5,
        speculative=False,
    )
    assert length.token_ids == [5, 6]
    meta = {"finish_reason": {"type": "stop", "matched": 1}, "e2e_latency": 0.2}
    sg = generation_from_sglang(
        {"output_ids": [4, 5, 6], "meta_info": meta}, method="ar", eos_ids=EOS, decode=_decode, wall_s=0.3
    )
    assert sg.token_ids == [4, 5, 6, 1] and (sg.nfe_prefill, sg.nfe) == (1, 3)
    dllm = generation_from_sglang(
        {"output_ids": [4, 1], "meta_info": {}}, method="dllm", eos_ids=EOS, decode=_decode, wall_s=0.3
    )
    assert dllm.nfe == 0 and "no per-request forward count" in dllm.extra["nfe_unavailable"]
    with pytest.raises(InputError, match="output_ids"):
        generation_from_sglang({"text": "x"}, method="ar", eos_ids=EOS, decode=_decode, wall_s=0.1)


# ------------------------------------------------------------------------------ building engines


def test_the_environment_is_the_first_reason(folders, monkeypatch):
    import importlib.util

    import torch

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name in ("vllm", "sglang") else real_find_spec(name, *a),
    )
    with pytest.raises(EngineUnavailable, match="^needs CUDA and vllm$"):
        build_engine("vllm", folders["ar"], device="cuda")
    # On the CPU vLLM runs from its CPU build, in the environment `make vllm-env` builds.
    with pytest.raises(EngineUnavailable, match=r"^vLLM environment missing \(make vllm-env\)$"):
        build_engine("vllm", folders["ar"], device="cpu")
    with pytest.raises(EngineUnavailable, match="^needs CUDA and sglang$"):
        build_serving_engine("sglang", folders["ar"], method="eagle3", draft_dir=folders["ar"] / "missing")
    assert "vllm" not in sys.modules and "sglang" not in sys.modules
    # Where the server could run, a bad draft path is an error naming the file, and the device must be CUDA.
    monkeypatch.setattr(serving, "environment_reason", lambda name, device="cuda": None)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(CheckpointError, match="config.json: file not found"):
        build_serving_engine("vllm", folders["ar"], method="eagle3", draft_dir=folders["ar"] / "missing")
    with pytest.raises(InputError, match="serves on CUDA only"):
        build_serving_engine("sglang", folders["ar"], device="cpu")
    with pytest.raises(InputError, match="--method"):
        build_engine("hf", folders["ar"], method="eagle3")


def _fake_package(monkeypatch, name: str, **attrs) -> types.ModuleType:
    module = types.ModuleType(name)
    for key, value in attrs.items():
        setattr(module, key, value)
    monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(serving, "environment_reason", lambda package, device="cuda": None)
    monkeypatch.setenv("HF_HUB_OFFLINE", "")  # restored afterwards; the engine sets it
    monkeypatch.delenv("HF_HUB_OFFLINE")
    return module


def test_a_server_that_fails_to_start_is_unavailable_with_its_message(folders, monkeypatch):
    def refuse(**kwargs):
        raise ValueError("Target and draft model should have the same vocabulary size.")

    _fake_package(monkeypatch, "vllm", LLM=refuse)
    with pytest.raises(EngineUnavailable, match="vllm cannot serve .*draft_model.*same vocabulary size"):
        build_serving_engine("vllm", folders["ar"], method="draft_model", draft_dir=folders["draft"])
    assert os.environ["HF_HUB_OFFLINE"] == "1"  # the servers read local folders only


def test_sglang_engine_shuts_its_server_down(folders, monkeypatch):
    started = []

    class FakeEngine:
        def __init__(self, **kwargs):
            self.kwargs, self.shutdowns = kwargs, 0
            self.tokenizer_manager = types.SimpleNamespace(
                model_config=types.SimpleNamespace(dtype="torch.bfloat16")
            )
            started.append(self)

        def generate(self, input_ids, sampling_params):
            return {"output_ids": [7, 8, 1], "meta_info": {"finish_reason": {"type": "stop", "matched": 1}}}

        def shutdown(self):
            self.shutdowns += 1

    _fake_package(monkeypatch, "sglang", Engine=FakeEngine)
    policy = Policy.parse("strict-threshold:0.7")
    with build_serving_engine("sglang", folders["sdar"], policy=policy, ignore_eos=True) as engine:
        (server,) = started
        config_file = server.kwargs["dllm_algorithm_config"]
        assert yaml.safe_load(open(config_file)) == {"threshold": 0.7, "block_size": 4}
        info = engine.describe()
        assert info.precision == "bfloat16" and info.policy == policy.to_record()  # what ran, not "auto"
        assert info.settings["method"] == "dllm" and info.settings["notes"] == [NO_RESIDUAL]
        assert engine.generate("def f(x):\n", 4).nfe == 0
    assert server.shutdowns == 1
    assert not os.path.exists(config_file)
    engine.close()  # idempotent
    assert server.shutdowns == 1
