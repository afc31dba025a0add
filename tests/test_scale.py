"""bench-scale: random-weight models of real shapes, the floor's byte counts, the record plumbing."""

from __future__ import annotations

import pytest
import torch

from orl.cli import main
from orl.errors import InputError
from orl.eval.scale import (
    ARCHS,
    Floor,
    arch_config,
    flops_per_forward,
    gemm_rate,
    kv_bytes_read,
    random_checkpoint,
    random_model,
    residual_bytes_read,
    weight_bytes_read,
)
from orl.model.transformer import Transformer
from orl.records import load_records


def test_real_shapes_give_the_real_parameter_counts():
    # Qwen3-0.6B has 0.6B parameters with its embedding tied; Qwen3-4B 4.0B; SDAR-4B is Qwen3-4B's shape.
    with torch.device("meta"):  # shapes only: nothing is allocated
        small = Transformer(arch_config("qwen3-0.6b"))
        big = Transformer(arch_config("qwen3-4b")).to(torch.bfloat16)
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731  (unique parameters)
    assert 0.59e9 < count(small) < 0.61e9 and 4.0e9 < count(big) < 4.03e9
    assert weight_bytes_read(big) == count(big) * 2
    sdar = arch_config("sdar-4b-b16")
    assert (sdar.block_size, sdar.block_layout, sdar.mask_token_id, sdar.hidden_size) == (
        16,
        "absolute",
        151669,
        2560,
    )


def test_floor_from_known_byte_counts():
    config = arch_config("qwen3-4b")
    # 36 layers x (K and V) x 8 heads x 128 dims x 1000 positions x 2 bytes
    assert kv_bytes_read(config, 1000, 2) == 36 * 2 * 8 * 128 * 1000 * 2
    floor = Floor(weight_bytes=8_000_000_000, kv_bytes=147_456_000, bandwidth=4.0e12)
    assert floor.seconds == pytest.approx(8_147_456_000 / 4.0e12)


def test_compute_floor_and_roofline_from_known_counts():
    with torch.device("meta"):
        model = Transformer(arch_config("qwen3-4b")).to(torch.bfloat16)
    weights = sum(p.numel() for p in model.parameters())  # the tied table once, as the LM head
    # A block of 16 tokens against 1000 positions: 2 FLOPs per weight and token, then QK^T and PV
    # over 36 layers x 32 query heads x 128 dims.
    flops = flops_per_forward(model, 16, 1000)
    assert flops == 2 * 16 * weights + 2 * 2 * 36 * 32 * 128 * 16 * 1000
    bound = Floor(weight_bytes=8_000_000_000, kv_bytes=0, bandwidth=4.0e12, flops=flops, flops_per_s=1.0e12)
    assert bound.compute_seconds == pytest.approx(flops / 1.0e12) and bound.seconds == pytest.approx(2e-3)
    assert (
        bound.roofline_seconds == bound.compute_seconds > bound.seconds
    )  # 0.13 TFLOP at 1 TFLOP/s: compute-bound
    assert Floor(8, 0, 4.0).roofline_seconds == Floor(8, 0, 4.0).seconds == 2.0  # no arithmetic counted
    assert gemm_rate("cpu", torch.float32, 64, repeats=1) > 0


def test_the_residual_context_reads_the_embedding_table_once_more_per_step():
    # Qwen3-4B in bf16: 151,936 x 2560 x 2 bytes = 0.78 GB beside its 8 GB of weights (docs/method.md §2).
    orl = random_checkpoint("tiny", "cpu", torch.float32, residual="adapter").model
    base = random_checkpoint("tiny", "cpu", torch.float32, residual="off").model
    assert residual_bytes_read(base) == 0 and base.config.residual_alpha == 0.0
    assert residual_bytes_read(orl) == orl.embedding.numel() * 4 == 1024 * 256 * 4
    # z = P @ E: 2 FLOPs per token, vocabulary entry and width, on top of the adapter's own weights.
    adapter = sum(p.numel() for p in orl.residual_adapter.parameters())
    extra = flops_per_forward(orl, 16, 100) - flops_per_forward(base, 16, 100)
    assert extra == 2 * 16 * 1024 * 256 + 2 * 16 * adapter
    floor = Floor(weight_bytes=8, kv_bytes=4, bandwidth=2.0, residual_bytes=6)
    assert floor.seconds == 9.0
    with pytest.raises(InputError, match="--residual"):
        random_checkpoint("tiny", "cpu", torch.float32, residual="sparse")


def test_untied_embedding_tables_are_not_read_whole():
    with torch.device("meta"):
        model = Transformer(arch_config("qwen3-8b")).to(torch.bfloat16)
    embedding = model.model.embed_tokens.weight
    total = sum(p.numel() for p in model.parameters()) * 2
    assert weight_bytes_read(model) == total - embedding.numel() * 2


def test_random_models_are_allocated_once_in_their_dtype_with_tied_heads():
    model = random_model(arch_config("tiny"), "cpu", torch.bfloat16)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert (
        float(model.model.norm.weight.float().mean()) == 1.0
        and float(model.lm_head.weight.float().std()) > 0.01
    )


def test_unknown_arch_and_fixed_block_are_refused():
    with pytest.raises(InputError, match="unknown architecture"):
        arch_config("llama-70b")
    with pytest.raises(InputError, match="block size 4"):
        arch_config("sdar-4b-b4", block=16)
    assert "sdar-4b-b4" in ARCHS and "qwen3-1.7b" in ARCHS


def test_bench_scale_writes_one_record_per_engine_and_the_floor_ratio(tmp_path, capsys):
    out = tmp_path / "scale.jsonl"
    code = main(
        [
            "bench-scale",
            "--arch",
            "tiny",
            "--block",
            "8",
            "--max-new-tokens",
            "16",
            "--prompt-len",
            "8",
            "--requests",
            "1",
            "--warmup",
            "1",
            "--repeats",
            "2",
            "--copy-mb",
            "64",
            "--gemm-size",
            "64",
            "--threads",
            "1",
            "--engines",
            "dlmrt-eager,reference,hf",
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert code == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1] == "floor_ratio=n/a (no dlmrt row)"
    records = load_records(out)
    assert [r["engine"] for r in records] == ["dlmrt-eager", "reference", "hf"]
    for record in records:
        m = record["metrics"]
        assert record["kind"] == "scale_bench" and record["extra"]["random_weights"] is True
        assert "random weights: speed only" in record["system"] and record["model"]["ckpt_sha256"] is None
        assert m["tokens"] == 16 and m["floor_ratio"] == pytest.approx(m["time_per_forward_s"] / m["floor_s"])
        assert m["bandwidth_gb_per_s"] > 0 and m["weight_bytes_read"] > 0
    eager, ref, hf = records
    # dlmrt's rows carry a block forward's compute floor (block 8 against the generation's end) and the
    # roofline.
    m = eager["metrics"]
    assert m["flops_per_forward"] > 2 * 8 * m["weight_bytes_read"] / 4 and m["gemm_gflop_per_s"] > 0
    assert m["compute_floor_s"] == pytest.approx(m["flops_per_forward"] / (m["gemm_gflop_per_s"] * 1e9))
    assert m["roofline_ratio"] == pytest.approx(
        m["time_per_forward_s"] / max(m["floor_s"], m["compute_floor_s"])
    )
    assert "compute_floor_s" not in ref["metrics"] and "roofline_ratio" not in hf["metrics"]
    assert eager["metrics"]["tpf"] == ref["metrics"]["tpf"] == 1.0  # fixed:1, every request to the budget
    assert hf["metrics"]["tpf"] == pytest.approx(16 / 15)  # the prefill's token, then one per decode forward
    assert eager["metrics"]["step_time_s"] == eager["metrics"]["time_per_forward_s"]
    # --cpu-linear auto (the default): the measured choice is in dlmrt's records (orl/kernels/onednn.py).
    linear = eager["extra"]["cpu_linear"]
    assert linear["requested"] == "auto" and linear["backend"] in ("aten", "onednn") and linear["shapes"]
    assert any(line.startswith("dlmrt-eager: linears through ") for line in lines)
    # The default --residual adapter: the diffusion rows decode ORL's model and their floor counts the
    # residual context's read of the embedding table (tiny: 1024 x 256 fp32); the AR row's does not.
    table = 1024 * arch_config("tiny").hidden_size * 4
    assert eager["metrics"]["residual_bytes_read"] == ref["metrics"]["residual_bytes_read"] == table
    assert hf["metrics"]["residual_bytes_read"] == 0
    assert eager["metrics"]["floor_s"] > hf["metrics"]["floor_s"]
    assert eager["extra"]["residual_alpha"] == 1.0 and eager["extra"]["residual_form"] == "adapter"
