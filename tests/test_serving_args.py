"""`orl serving-args`: what every serving row passes to its server, and (where the package is
installed) those arguments constructed in vllm's EngineArgs / sglang's ServerArgs.

The packages are not installed in the harness's environment (each needs its own: make
serving-check runs scripts/check_serving_args.py there, on this command's output); the
constructor test below runs wherever one of them is importable and is skipped otherwise.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest
import yaml

from orl.cli import main
from orl.engines.serving import CHECKED_VERSIONS, METHODS, SPECULATIVE_METHODS


def _load_checker():
    """scripts/check_serving_args.py: the checks `make serving-check` runs in each side environment."""
    path = Path(__file__).resolve().parents[1] / "scripts" / "check_serving_args.py"
    spec = importlib.util.spec_from_file_location("check_serving_args", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


check_serving_args = _load_checker()
PAIRS = [(engine, method) for engine, methods in METHODS.items() for method in methods]
DRAFT_ARCH = {
    "draft_model": "Qwen3ForCausalLM",
    "standalone": "Qwen3ForCausalLM",
    "eagle3": "LlamaForCausalLM",
    "dflash": "DFlashDraftModel",
}


@pytest.fixture
def targets(ar_ckpt_dir, tmp_path):
    sdar = tmp_path / "sdar"
    sdar.mkdir()
    shutil.copy(ar_ckpt_dir / "tokenizer.json", sdar)
    (sdar / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["SDARForCausalLM"],
                "block_size": 4,
                "mask_token_id": 151669,
                "max_position_embeddings": 160,
            }
        )
    )
    return {"ar": ar_ckpt_dir, "sdar": sdar}


def serving_args(capsys, engine, method, targets, tmp_path, *extra) -> tuple[int, dict | str]:
    argv = [
        "serving-args",
        "--engine",
        engine,
        "--method",
        method,
        "--target",
        str(targets["sdar" if method == "dllm" else "ar"]),
    ]
    if method in SPECULATIVE_METHODS:
        draft = tmp_path / f"draft-{method}"
        draft.mkdir(exist_ok=True)
        (draft / "config.json").write_text(json.dumps({"architectures": [DRAFT_ARCH[method]]}))
        argv += ["--draft", str(draft)]
    if method == "dllm":
        argv += ["--policy", "strict-threshold:0.9", "--dllm-config", str(tmp_path / "dllm.yaml")]
    code = main([*argv, *extra])
    out = capsys.readouterr()
    return code, json.loads(out.out) if code == 0 else out.err


@pytest.mark.parametrize(("engine", "method"), PAIRS)
def test_serving_args_prints_the_call(capsys, targets, tmp_path, engine, method):
    code, call = serving_args(capsys, engine, method, targets, tmp_path)
    assert code == 0
    assert call["engine"] == engine and call["method"] == method
    assert call["constructor"] == {"vllm": "vllm.LLM", "sglang": "sglang.Engine"}[engine]
    assert call["checked_version"] == CHECKED_VERSIONS[engine]
    assert call["sampling_params"]["temperature"] == 0.0 and call["sampling_params"]["stop_token_ids"]
    budget = {"vllm": "max_tokens", "sglang": "max_new_tokens"}[engine]
    assert call["sampling_params"][budget] == 64
    model = call["kwargs"]["model" if engine == "vllm" else "model_path"]
    assert model == str(targets["sdar" if method == "dllm" else "ar"])
    if method == "dllm":
        assert yaml.safe_load((tmp_path / "dllm.yaml").read_text()) == call["dllm_algorithm_config"]
        assert call["dllm_algorithm_config"] == {"threshold": 0.9, "block_size": 4} and call["notes"]
    else:
        assert call["dllm_algorithm_config"] is None and call["notes"] == []


def test_serving_args_is_what_the_engine_runs(capsys, targets, tmp_path):
    from orl.engines.registry import serving_call
    from orl.tokenizer import load_tokenizer

    code, printed = serving_args(
        capsys, "vllm", "eagle3", targets, tmp_path, "--ignore-eos", "--max-new-tokens", "9"
    )
    call = serving_call(
        "vllm",
        "eagle3",
        targets["ar"],
        eos_ids=load_tokenizer(targets["ar"]).eos_ids,
        draft_dir=tmp_path / "draft-eagle3",
        ignore_eos=True,
    )
    assert code == 0 and printed == json.loads(json.dumps(call.to_json(9)))
    assert printed["sampling_params"] == {
        "temperature": 0.0,
        "detokenize": False,
        "ignore_eos": True,
        "max_tokens": 9,
    }


@pytest.mark.parametrize(
    ("engine", "method", "extra", "message"),
    [
        ("vllm", "standalone", (), "vllm runs ar, draft_model, eagle3, dflash; got 'standalone'"),
        ("sglang", "draft_model", (), "got 'draft_model'"),
        ("sglang", "ar", ("--dllm-config", "x.yaml"), "--dllm-config"),
        ("sglang", "eagle3", ("--num-speculative-tokens", "0"), "--num-speculative-tokens"),
    ],
)
def test_serving_args_bad_input_is_one_line(capsys, targets, tmp_path, engine, method, extra, message):
    code, err = serving_args(capsys, engine, method, targets, tmp_path, *extra)
    assert code == 2 and message in err and err.count("\n") == 1


def test_serving_args_dllm_needs_the_strict_rule_and_an_sglang_architecture(
    capsys, targets, ar_ckpt_dir, tmp_path
):
    base = [
        "serving-args",
        "--engine",
        "sglang",
        "--method",
        "dllm",
        "--dllm-config",
        str(tmp_path / "d.yaml"),
    ]
    assert main([*base, "--target", str(targets["sdar"]), "--policy", "threshold:0.9"]) == 2
    assert "strict-threshold" in capsys.readouterr().err
    assert main([*base, "--target", str(ar_ckpt_dir), "--policy", "strict-threshold:0.9"]) == 2
    assert "does not apply to an AR checkpoint" in capsys.readouterr().err
    assert not (tmp_path / "d.yaml").exists()


@pytest.mark.parametrize("method", [m for m in METHODS["sglang"] if m in SPECULATIVE_METHODS])
def test_sglang_relaxed_lines_pass_its_acceptance_thresholds(capsys, targets, tmp_path, method):
    """SGLang applies its thresholds only in sampled verification: a relaxed line samples at temperature 1."""
    code, call = serving_args(capsys, "sglang", method, targets, tmp_path, "--verification", "relaxed:0.7")
    assert code == 0
    assert call["kwargs"]["speculative_accept_threshold_single"] == 0.7
    assert call["kwargs"]["speculative_accept_threshold_acc"] == 1.0
    assert call["sampling_params"]["temperature"] == 1.0 and "temperature 1" in call["notes"][0]
    code, strict = serving_args(capsys, "sglang", method, targets, tmp_path)
    assert "speculative_accept_threshold_single" not in strict["kwargs"]


@pytest.mark.parametrize(
    ("engine", "method", "message"),
    [
        ("vllm", "draft_model", "vLLM has no relaxed acceptance rule"),
        ("sglang", "ar", "drafts nothing to verify"),
    ],
)
def test_relaxed_where_there_is_no_draft_or_no_rule_is_refused(
    capsys, targets, tmp_path, engine, method, message
):
    code, err = serving_args(capsys, engine, method, targets, tmp_path, "--verification", "relaxed:0.7")
    assert code == 2 and message in err


RELAXED_PAIRS = [("sglang", m, "relaxed:0.7") for m in METHODS["sglang"] if m in SPECULATIVE_METHODS]


@pytest.mark.parametrize(
    ("engine", "method", "verification"), [(*pair, "strict") for pair in PAIRS] + RELAXED_PAIRS
)
def test_the_real_package_constructs_the_call(capsys, targets, tmp_path, engine, method, verification):
    if importlib.util.find_spec(engine) is None:
        pytest.skip(
            f"{engine} is not installed here (it needs its own environment: `make serving-check` builds "
            f"one and runs this check there)"
        )
    code, call = serving_args(capsys, engine, method, targets, tmp_path, "--verification", verification)
    assert code == 0
    done = check_serving_args.CHECKS[engine](call)
    assert done[0] in ("EngineArgs(**kwargs)", "ServerArgs(**kwargs)")
