"""The Triton W4A16 kernel (orl/kernels/triton_w4a16.py), run by Triton's interpreter on the CPU."""

from __future__ import annotations

import json

import pytest
import torch

from orl.errors import InputError
from orl.kernels.linear import NVFP4Linear
from orl.kernels.nvfp4 import dequantize_nvfp4, dequantize_parts, quantize_nvfp4
from orl.kernels.reference import dequantize_matmul, emulated_w4a4_matmul
from tests.kernel_modules import kernel_module

pytest.importorskip("triton", reason="triton is not installed")


tk = kernel_module("triton_w4a16", interpreted=True)


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


@pytest.mark.parametrize("decode", ["bits", "lut"])
def test_both_decodes_give_every_byte_and_scale_exactly(decode):
    # As above with a 256-deep K tile (16 scale blocks broadcast over their 8 bytes each).
    n, k = 64, 256
    packed = (torch.arange(n * k // 2) % 256).to(torch.uint8).reshape(n, k // 2)
    scale_bits = (torch.arange(n * k // 16) % 127).to(torch.uint8).reshape(n, k // 16)
    scales = scale_bits.view(torch.float8_e4m3fn)
    one = torch.tensor(1.0)
    y = tk.w4a16_matmul(torch.eye(k), packed, scales, one, block_k=256, decode=decode)
    assert torch.equal(y, dequantize_parts(packed, scales, one).T)


# Batch-1 block-decoding rows, K not a multiple of the default 256-deep tile (so the
# masked scale-block path runs), split-K of 1 and > 1, both decodes.
DECODING = [
    (1, 48, 16 * 37, {}),
    (16, 40, 16 * 37, {"split_k": 2}),
    (33, 24, 16 * 37, {"split_k": 3, "block_k": 64, "decode": "lut"}),
    (16, 72, 512 + 128, {"split_k": 2, "block_k": 256, "block_n": 32, "num_warps": 8, "num_stages": 2}),
]


@pytest.mark.parametrize("m,n,k,settings", DECODING)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_decoding_rows_match_reference(m, n, k, settings, dtype):
    gen = torch.Generator().manual_seed(m + n + k)
    q = quantize_nvfp4(torch.randn(n, k, generator=gen))
    x = torch.randn(m, k, generator=gen).to(dtype)
    y = tk.w4a16_matmul(x, q.packed, q.block_scale, q.tensor_scale, **settings)
    ref = x.float() @ dequantize_nvfp4(q).T
    assert y.shape == (m, n) and y.dtype == dtype
    if dtype == torch.float32:
        assert _rel_err(y, ref) <= 1e-5  # fp32 accumulation, order aside
    else:
        # bf16 output rounding (2**-8 relative) plus the fp32 summation-order error, which
        # is absolute: where the sum cancels to near zero it dominates (|ref| ~ 1e-3 here).
        assert ((y.float() - ref).abs() <= ref.abs() * 2.0**-8 + 1e-4).all()


def test_decodes_agree_bit_for_bit():
    gen = torch.Generator().manual_seed(5)
    q = quantize_nvfp4(torch.randn(50, 16 * 21, generator=gen))
    x = torch.randn(7, 16 * 21, generator=gen)
    args = (x, q.packed, q.block_scale, q.tensor_scale)
    assert torch.equal(tk.w4a16_matmul(*args, decode="bits"), tk.w4a16_matmul(*args, decode="lut"))


def test_split_k_counters_are_left_zero():
    gen = torch.Generator().manual_seed(9)
    q = quantize_nvfp4(torch.randn(70, 512, generator=gen))
    x = torch.randn(4, 512, generator=gen)
    args = (x, q.packed, q.block_scale, q.tensor_scale)
    first = tk.w4a16_matmul(*args, block_n=32, block_k=64, split_k=4)
    assert int(tk._COUNTERS[x.device].abs().sum()) == 0
    assert torch.equal(tk.w4a16_matmul(*args, block_n=32, block_k=64, split_k=4), first)


def test_split_k_slices_cover_whole_tiles():
    assert tk.split_k_slices(2560, 256, 1) == (1, 2560)
    assert tk.split_k_slices(2560, 256, 4) == (4, 768)  # 10 tiles: 3 + 3 + 3 + 1
    assert tk.split_k_slices(2560, 256, 8) == (5, 512)  # 8 slices of 10 tiles would leave some empty
    assert tk.split_k_slices(592, 256, 8) == (3, 256)  # K = 2.3 tiles: at most 3 slices


def test_default_tiles_for_batch1_decoding():
    tiles = tk.default_tiles(16, 9728, 2560, torch.device("cpu"))
    assert tiles["block_m"] == 16 and tiles["block_k"] == 256 and tiles["split_k"] == 1
    assert tk.default_tiles(33, 2560, 9728, torch.device("cpu"))["block_m"] == 64


def test_default_tiles_on_an_h200_follow_its_measured_best(monkeypatch):
    # 132 SMs. Wide layers (9728 / 64 = 152 tiles fill the SMs): 128-wide tiles, 8 warps, no split, the
    # best bits setting measured at 2560 -> 9728 and -> 19456 (results/gpu-check/nvidia-h200-2026-12-04).
    monkeypatch.setattr(tk, "_sm_count", lambda device: 132)
    cuda = torch.device("cuda", 0)
    for m, n in ((16, 9728), (32, 9728), (16, 19456)):
        tiles = tk.default_tiles(m, n, 2560, cuda)
        assert (tiles["block_n"], tiles["num_warps"], tiles["split_k"]) == (128, 8, 1), (m, n)
    # Narrow ones (64 tiles of 2560 -> 4096): 64-wide, K split until two programs per SM.
    tiles = tk.default_tiles(16, 4096, 2560, cuda)
    assert (tiles["block_n"], tiles["num_warps"], tiles["split_k"]) == (64, 4, 5)


def test_kernel_rejects_bad_settings():
    q = quantize_nvfp4(torch.randn(16, 64))
    args = (torch.randn(2, 64), q.packed, q.block_scale, q.tensor_scale)
    with pytest.raises(InputError, match="decode"):
        tk.w4a16_matmul(*args, decode="table")
    with pytest.raises(InputError, match="powers of two"):
        tk.w4a16_matmul(*args, block_k=96)
    with pytest.raises(InputError, match="interpreter cannot run"):
        tk.w4a16_matmul(*args, decode="asm")


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


def test_a_compiled_model_calls_the_triton_linear_as_one_operator(monkeypatch):
    # The launcher's Python (interpreter check, tiles, split-K buffers) cannot be traced by dynamo: a
    # compiled decoder layer (orl/engines/capture.py, compile-layers) sees one opaque operator instead.
    monkeypatch.delenv("ORL_NVFP4_BACKEND", raising=False)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    torch.manual_seed(0)
    layer = NVFP4Linear.from_linear(torch.nn.Linear(64, 48, bias=False), backend="triton")
    x = torch.randn(3, 64)
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    compiled = torch.compile(layer, fullgraph=True, backend=backend)
    torch.testing.assert_close(compiled(x), layer(x))
    targets = [str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert targets == ["orl.w4a16_linear.default"], targets


def test_bench_gpu_dry_run_on_the_cpu(tmp_path):
    # The GPU benchmark's bookkeeping (every timed call over its weight copies, the
    # sweep, the error checks, bytes and ratios) run through the interpreter with host
    # clocks standing in for the graph and launch timers; numbers here mean nothing.
    from orl.kernels import bench_gpu

    row = bench_gpu.bench_shape(
        3, 64, 40, 1, device="cpu", timer=bench_gpu.time_wall, launch_timer=bench_gpu.time_host,
        l2_bytes=4096, graph_calls=2,
    )  # fmt: skip
    assert row["triton_default_rel_err"] <= 1e-2  # bf16 activations and output
    assert row["dequant_matmul_rel_err"] <= 1e-2 and row["bf16_linear_rel_err"] <= 1e-2
    assert len(row["triton_sweep"]) == len(bench_gpu.SWEEP)
    for entry in row["triton_sweep"]:
        if entry["decode"] == "asm":  # inline PTX: recorded as an error under the interpreter
            assert "interpreter cannot run" in entry["error"]
        else:
            assert entry["rel_err"] <= 1e-2 and entry["ms"] > 0
    assert row["triton_best"] is not None and row["speedup_vs_dequant"] > 0
    # 4096-byte "L2": bf16 weight 40 x 64 x 2 = 5120 B -> 2 copies; NVFP4 1280 + 160 + 4 B -> 6.
    assert (row["bf16_weight_copies"], row["nvfp4_weight_copies"]) == (2, 6)
    assert row["w4a16_bytes"] == 1444 + (3 * 64 + 3 * 40) * 2
    assert row["bf16_bytes"] == 5120 + (3 * 64 + 3 * 40) * 2
    assert row["w4a16_vs_bf16"] == pytest.approx(row["triton_best_ms"] / row["bf16_linear_ms"])
    assert row["w4a16_gbps"] > 0 and row["bf16_gbps"] > 0 and "triton_best_launch_ms" in row
    json.dumps(row)  # the record is plain JSON
    bench_gpu.print_table([row])


def test_bench_gpu_copy_count_keeps_weights_out_of_l2():
    from orl.kernels import bench_gpu

    l2 = 60 * 1024 * 1024
    bf16 = 2560 * 9728 * 2  # 49.8 MB
    nvfp4 = 2560 * 9728 // 2 + 2560 * 9728 // 16 + 4  # 14.0 MB
    for size in (bf16, nvfp4, 1024, 200 * 1024 * 1024):
        copies = bench_gpu.copies_to_flush(size, l2)
        assert copies >= 2 and copies * size >= 2 * l2
        assert copies == 2 or (copies - 1) * size < 2 * l2  # no more than needed
    assert bench_gpu.copies_to_flush(bf16, l2) == 3 and bench_gpu.copies_to_flush(nvfp4, l2) == 9
    assert bench_gpu.calls_per_graph(3) == bench_gpu.GRAPH_CALLS and bench_gpu.calls_per_graph(82) == 82
    with pytest.raises(ValueError):
        bench_gpu.copies_to_flush(0, l2)


def test_bench_gpu_l2_size_from_the_device_or_h200s(monkeypatch):
    from types import SimpleNamespace

    from orl.kernels import bench_gpu

    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda _: SimpleNamespace(L2_cache_size=50 << 20)
    )
    assert bench_gpu.device_l2_bytes() == 50 << 20
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda _: SimpleNamespace())
    assert bench_gpu.device_l2_bytes() == bench_gpu.L2_FALLBACK_BYTES == 60 << 20


def test_bench_gpu_qwen3_4b_rows():
    from orl.kernels import bench_gpu

    rows = bench_gpu.bench_rows("4b")
    expected_kn = {
        (2560, 4096),
        (2560, 1024),
        (2560, 6144),
        (4096, 2560),
        (2560, 9728),
        (2560, 19456),
        (9728, 2560),
    }
    assert {(k, n) for _, k, n in rows} == expected_kn
    assert {m for m, _, _ in rows} == {16, 32} and len(rows) == 14
    assert bench_gpu.bench_rows("4b", (1,)) == [(1, k, n) for k, n in bench_gpu.QWEN3_4B_SHAPES]
    assert len(bench_gpu.bench_rows("all")) == len(bench_gpu.SHAPES) * len(bench_gpu.ROWS)
    with pytest.raises(SystemExit):
        bench_gpu.main(["--shapes", "7b"])
    with pytest.raises(SystemExit):
        bench_gpu.main(["--rows", "16,x"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_bench_gpu_without_cuda_says_so(tmp_path, capsys):
    from orl.kernels import bench_gpu

    out = tmp_path / "bench.json"
    assert bench_gpu.main(["--out", str(out), "--shapes", "4b"]) == 2
    assert "no CUDA device" in capsys.readouterr().err
    assert json.loads(out.read_text())["status"].startswith("not run: no CUDA device")
