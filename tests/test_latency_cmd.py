"""`orl bench-latency`: one latency record per row, the interface's last line, not-run rows."""

from __future__ import annotations

import re

import pytest

from orl.cli import main
from orl.engines.base import EngineInfo, Generation
from orl.eval.speculative import acceptance_length, acceptance_rate, speculative_metrics
from orl.records import load_records

LAST_LINE = re.compile(r"^median_s=(\S+) p90_s=(\S+) tokens_per_s=(\S+) tpf=(\S+)$")


def _run(capsys, *argv) -> tuple[int, list[str]]:
    code = main(["bench-latency", *map(str, argv), "--no-progress"])
    return code, capsys.readouterr().out.strip().splitlines()


def _gen(tokens: int, nfe: int, draft: int = 0, extra: dict | None = None) -> Generation:
    return Generation(
        token_ids=[7] * tokens,
        text="",
        nfe=nfe,
        nfe_prefill=1,
        wall_time_s=0.1,
        draft_forwards=draft,
        extra=extra or {},
    )


def _info(name: str, **what) -> EngineInfo:
    """What an engine of that kind says about itself (its describe())."""
    return EngineInfo(name, "m", None, "float32", "cpu", **what)


def test_speculative_metrics_one_definition():
    assert speculative_metrics(_info("hf"), [_gen(4, 3)]) == {}
    # hf-assisted / dflash: every target forward verifies a draft (the prefill forward carries the prompt
    # too): 2 target forwards each (1 decode + 1 prefill).
    spec = speculative_metrics(_info("dflash", speculative=True), [_gen(6, 1, draft=2), _gen(4, 1, draft=1)])
    assert spec == {"draft_forwards_mean": 1.5, "acceptance_length": 2.5}
    # vLLM / SGLang: their prefill forward verified nothing and yielded one token; it is left out of
    # both sides. 9 tokens in 4 forwards (3 decode + 1 prefill), 3 verifying: (9 - 1) / 3; then (5 - 1) / 2.
    served = [
        _gen(9, 3, extra={"verify_forwards": 3, "server_acceptance_length": 3.0}),
        _gen(5, 2, extra={"verify_forwards": 2, "server_acceptance_length": 2.5}),
    ]
    assert speculative_metrics(_info("sglang", counts_draft_forwards=False), served) == {
        "acceptance_length": (8 + 4) / (3 + 2)
    }  # no draft forwards
    assert acceptance_length([_gen(1, 0, extra={"verify_forwards": 0})]) is None
    assert (
        acceptance_rate(
            [
                _gen(3, 1, extra={"drafted_tokens": 8, "accepted_tokens": 2}),
                _gen(3, 1, extra={"drafted_tokens": 2, "accepted_tokens": 1}),
            ]
        )
        == 0.3
    )
    assert acceptance_rate([_gen(3, 3)]) is None


def test_bench_latency_hf_writes_a_latency_record(ar_ckpt_dir, tmp_path, capsys):
    out = tmp_path / "hf.jsonl"
    code, lines = _run(
        capsys,
        "--engine",
        "hf",
        "--ckpt",
        ar_ckpt_dir,
        "--limit",
        3,
        "--warmup",
        1,
        "--max-new-tokens",
        8,
        "--out",
        out,
    )
    assert code == 0
    match = LAST_LINE.match(lines[-1])
    assert match, lines[-1]
    (record,) = load_records(out)
    metrics = record["metrics"]
    assert record["kind"] == "latency" and record["status"] == "measured" and record["engine"] == "hf"
    assert record["n_problems"] == 3 and record["policy"] is None
    # counted, AR: 3 prefill forwards yield a token each, every other token costs a decode forward
    assert metrics["nfe_prefill_mean"] == 1 and metrics["tpf_prefill"] == 1.0
    assert metrics["tpf"] == pytest.approx(metrics["tokens"] / (metrics["tokens"] - 3))
    assert float(match.group(4)) == pytest.approx(metrics["tpf"], rel=1e-5)
    assert all(r["nfe"] == r["tokens"] - 1 and r["nfe_prefill"] == 1 for r in record["extra"]["per_request"])
    assert "tpf_commit" not in metrics and "tpf_ceiling" not in metrics  # no blocks
    assert metrics["latency_p90_s"] >= metrics["latency_median_s"] > 0
    assert metrics["tokens"] == sum(r["tokens"] for r in record["extra"]["per_request"])
    assert len(record["extra"]["per_request"]) == 3
    assert "acceptance_length" not in metrics and "draft_forwards_mean" not in metrics
    assert record["model"]["ckpt_sha256"] and record["model"]["precision"] == "float32"


def test_bench_latency_dflash_reports_acceptance(smoke_models, tmp_path, capsys):
    ar, dlm = smoke_models
    out = tmp_path / "dflash.jsonl"
    code, lines = _run(
        capsys,
        "--engine",
        "dflash",
        "--ckpt",
        ar,
        "--draft",
        dlm,
        "--suite",
        "tinycode",
        "--limit",
        2,
        "--warmup",
        0,
        "--max-new-tokens",
        16,
        "--system",
        "AR + DFlash-style",
        "--out",
        out,
    )
    assert code == 0 and LAST_LINE.match(lines[-1])
    (record,) = load_records(out)
    metrics = record["metrics"]
    assert record["system"] == "AR + DFlash-style" and record["policy"]["name"] == "dflash-greedy"
    # every target forward verifies a draft, the prefill one too: the acceptance length counts them all
    assert metrics["acceptance_length"] == pytest.approx(metrics["tpf_prefill"])
    assert metrics["draft_forwards_mean"] >= 1 and 0.0 <= metrics["acceptance_rate"] <= 1.0
    assert record["extra"]["draft_sha256"] and len(record["extra"]["engine_extra"]) == 2


def test_bench_latency_vllm_not_run_here(ar_ckpt_dir, tmp_path, capsys, monkeypatch):
    from orl.engines import serving

    # Whatever this machine has, simulate the CPU-only case the table must show.
    monkeypatch.setattr(
        serving,
        "environment_reason",
        lambda package, device="cuda": serving.unavailable_reason(package, cuda=False, installed=False),
    )
    out = tmp_path / "vllm.jsonl"
    code, lines = _run(
        capsys, "--engine", "vllm", "--method", "ar", "--ckpt", ar_ckpt_dir, "--limit", 2, "--out", out
    )
    assert code == 0
    assert lines[-1].endswith("not run: needs CUDA and vllm")
    (record,) = load_records(out)
    assert record["status"] == "not run: needs CUDA and vllm" and record["metrics"] == {}
    assert record["engine"] == "vllm" and record["model"]["ckpt"] == str(ar_ckpt_dir)
    assert record["kind"] == "latency"


def test_bench_latency_server_that_fails_to_start_is_not_run(ar_ckpt_dir, tmp_path, capsys, monkeypatch):
    """vllm.LLM(...) raising (an unsupported method, a vocabulary mismatch) is a "not run" record, exit 0."""
    import sys
    import types

    import torch

    from orl.engines import serving

    def refuse(**kwargs):
        raise NotImplementedError("Speculative decoding with draft model is not supported yet.")

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=refuse))
    monkeypatch.setattr(serving, "environment_reason", lambda package, device="cuda": None)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # --device cuda passes its check
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    draft = tmp_path / "draft"
    draft.mkdir()
    (draft / "config.json").write_text('{"architectures": ["Qwen3ForCausalLM"]}')
    out = tmp_path / "engine.jsonl"
    code, lines = _run(
        capsys,
        "--engine",
        "vllm",
        "--method",
        "draft_model",
        "--ckpt",
        ar_ckpt_dir,
        "--draft",
        draft,
        "--device",
        "cuda",
        "--limit",
        1,
        "--kind",
        "engine_bench",
        "--out",
        out,
    )
    assert code == 0
    (record,) = load_records(out)
    assert record["kind"] == "engine_bench" and record["engine"] == "vllm"
    assert (
        record["status"].startswith("not run: vllm cannot serve")
        and "NotImplementedError" in record["status"]
    )
    assert "not supported yet" in lines[-1]


def test_bench_latency_bad_input_is_one_line_error(ar_ckpt_dir, tmp_path, capsys):
    code = main(
        [
            "bench-latency",
            "--engine",
            "dflash",
            "--ckpt",
            str(ar_ckpt_dir),
            "--limit",
            "1",
            "--out",
            str(tmp_path / "x.jsonl"),
            "--no-progress",
        ]
    )
    assert code == 2
    assert "--draft" in capsys.readouterr().err
    assert not (tmp_path / "x.jsonl").exists()
