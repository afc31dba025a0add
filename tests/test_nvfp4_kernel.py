"""The Triton W4A16 kernel (orl/kernels/triton_w4a16.py), run by Triton's interpreter on the CPU."""

from __future__ import annotations

import importlib
import json
import os

import pytest
import torch

from orl.errors import InputError
from orl.kernels.linear import NVFP4Linear
from orl.kernels.nvfp4 import dequantize_nvfp4, dequantize_parts, quantize_nvfp4
from orl.kernels.reference import dequantize_matmul, emulated_w4a4_matmul

pytest.importorskip("triton", reason="triton is not installed")


def _import_interpreted_kernel():
    """The kernel module with its kernel defined under TRITON_INTERPRET=1.

    triton.jit picks the interpreter when the kernel is defined, so the variable is
    set around the import (and the module reloaded if something imported it first),
    then restored so it does not leak into other test files.
    """
    previous = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        module = importlib.import_module("orl.kernels.triton_w4a16")
        if not module.kernel_is_interpreted():
            module = importlib.reload(module)
    finally:
        if previous is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = previous
    return module


tk = _import_interpreted_kernel()


def _rel_err(y: torch.Tensor, ref: torch.Tensor) -> float:
    return float((y.detach().float() - ref.detach()).abs().max() / ref.detach().abs().max())


# (M, N, K, tile overrides): no shape is a multiple of its tiles; every K is a
# multiple of 16, several are not multiples of BLOCK_K (default 128).
SHAPES = [
    (1, 16, 16, {}),
    (3, 20, 48, {"block_k": 32}),  # K = 1.5 tiles
    (17, 33, 80, {}),  # K < one default tile, M > one 16-row tile
    (5, 70, 208, {"block_k": 64, "block_n": 32, "split_k": 3}),  # split-K with a ragged last slice
    (33, 18, 144, {"block_m": 16, "block_k": 64}),  # three M tiles, last one ragged
]


@pytest.mark.parametrize("m,n,k,tiles", SHAPES)
def test_kernel_matches_reference_fp32(m, n, k, tiles):
    gen = torch.Generator().manual_seed(m * 1000 + n * 10 + k)
    w = torch.randn(n, k, generator=gen)
    x = torch.randn(m, k, generator=gen)
    q = quantize_nvfp4(w)
    y = tk.w4a16_matmul(x, q.packed, q.block_scale, q.tensor_scale, **tiles)
    ref = dequantize_matmul(x, q)
    assert y.shape == (m, n) and y.dtype == torch.float32
    assert _rel_err(y, ref) <= 1e-3


@pytest.mark.parametrize("m,n,k,tiles", SHAPES[1:4])
def test_kernel_matches_reference_bf16(m, n, k, tiles):
    # bf16 activations: the products are exact and accumulate in fp32, so the only
    # rounding left is the bf16 output: within bf16's unit roundoff 2**-8 (8 significant
    # bits, round to nearest) of the fp32 reference, plus 1e-6 for summation order.
    gen = torch.Generator().manual_seed(k)
    w = torch.randn(n, k, generator=gen)
    x = torch.randn(m, k, generator=gen).to(torch.bfloat16)
    q = quantize_nvfp4(w)
    y = tk.w4a16_matmul(x, q.packed, q.block_scale, q.tensor_scale, **tiles)
    ref = x.float() @ dequantize_nvfp4(q).T
    assert y.dtype == torch.bfloat16
    assert ((y.float() - ref).abs() <= ref.abs() * (2.0**-8 + 1e-6)).all()


def test_kernel_decodes_every_byte_and_every_e4m3_scale_exactly():
    # W has all 256 byte values (every pair of E2M1 codes) and all 127 finite,
    # non-negative E4M3 bit patterns as block scales (subnormals included); x is the
    # identity, so y = W^ transposed must equal torch's dequantization bit for bit.
    n, k = 64, 32
    packed = (torch.arange(n * k // 2) % 256).to(torch.uint8).reshape(n, k // 2)
    scale_bits = (torch.arange(n * k // 16) % 127).to(torch.uint8).reshape(n, k // 16)
    scales = scale_bits.view(torch.float8_e4m3fn)
    one = torch.tensor(1.0)
    y = tk.w4a16_matmul(torch.eye(k), packed, scales, one, block_k=32)
    assert torch.equal(y, dequantize_parts(packed, scales, one).T)


def test_split_k_agrees_with_one_slice():
    gen = torch.Generator().manual_seed(7)
    q = quantize_nvfp4(torch.randn(40, 256, generator=gen))
    x = torch.randn(9, 256, generator=gen)
    one = tk.w4a16_matmul(x, q.packed, q.block_scale, q.tensor_scale, block_k=64, split_k=1)
    four = tk.w4a16_matmul(x, q.packed, q.block_scale, q.tensor_scale, block_k=64, split_k=4)
    assert torch.allclose(one, four, rtol=1e-5, atol=1e-5)


def test_batched_input_and_bias():
    gen = torch.Generator().manual_seed(3)
    q = quantize_nvfp4(torch.randn(24, 64, generator=gen))
    x = torch.randn(2, 3, 64, generator=gen)
    bias = torch.randn(24, generator=gen)
    y = tk.w4a16_matmul(x, q.packed, q.block_scale, q.tensor_scale, bias)
    assert y.shape == (2, 3, 24)
    assert _rel_err(y, dequantize_matmul(x, q, bias)) <= 1e-3


def test_kernel_rejects_mismatched_input():
    q = quantize_nvfp4(torch.randn(16, 32))
    with pytest.raises(InputError, match="K=32"):
        tk.w4a16_matmul(torch.randn(2, 48), q.packed, q.block_scale, q.tensor_scale)
    with pytest.raises(InputError, match="weight_scale"):
        tk.w4a16_matmul(torch.randn(2, 32), q.packed, q.block_scale.float(), q.tensor_scale)


@pytest.mark.parametrize("mode", ["w4a16", "w4a4"])
def test_nvfp4_linear_forced_triton_matches_reference(mode, monkeypatch):
    monkeypatch.delenv("ORL_NVFP4_BACKEND", raising=False)
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # backend selection accepts CPU weights for triton
    torch.manual_seed(0)
    dense = torch.nn.Linear(96, 40, bias=True)
    layer = NVFP4Linear.from_linear(dense, mode=mode, backend="triton")
    assert layer.backend == "triton" and layer.backend_reason.startswith("forced")
    x = torch.randn(5, 96)
    reference = NVFP4Linear.from_linear(dense, mode=mode, backend="reference")
    assert reference.backend == "reference"
    assert _rel_err(layer(x), reference(x)) <= 1e-3
    if mode == "w4a4":
        assert _rel_err(layer(x), emulated_w4a4_matmul(x, layer.quantized(), layer.bias)) <= 1e-3


def test_bench_gpu_dry_run_on_the_cpu(tmp_path):
    # The GPU benchmark's bookkeeping (every timed call, the sweep, the error check)
    # run once through the interpreter with a host clock; numbers here mean nothing.
    from orl.kernels import bench_gpu

    row = bench_gpu.bench_shape(3, 64, 40, 1, device="cpu", timer=bench_gpu.time_wall)
    assert row["triton_default_rel_err"] <= 1e-2  # bf16 activations and output
    assert len(row["triton_sweep"]) == len(bench_gpu.SWEEP)
    assert all("ms" in entry for entry in row["triton_sweep"])
    assert row["triton_best"] is not None and row["speedup_vs_dequant"] > 0
    bench_gpu.print_table([row])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_bench_gpu_without_cuda_says_so(tmp_path, capsys):
    from orl.kernels import bench_gpu

    out = tmp_path / "bench.json"
    assert bench_gpu.main(["--out", str(out)]) == 2
    assert "no CUDA device" in capsys.readouterr().err
    assert json.loads(out.read_text())["status"].startswith("not run: no CUDA device")
