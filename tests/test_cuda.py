"""Checks that need a CUDA GPU: the compiled Triton kernel, and NVFP4 models under graph capture.

Skipped without CUDA. On a GPU machine:

    pytest tests/test_cuda.py tests/test_dlmrt.py -k cuda

The CPU suite covers the same code through TRITON_INTERPRET=1 and the eager/compiled
engine modes; these tests cover what only a GPU runs: Triton compiling the kernel for
the device, and CUDA-graph replay of a chunk whose linears are NVFP4.
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

from orl.kernels.nvfp4 import dequantize_nvfp4, quantize_nvfp4  # noqa: E402
from orl.kernels.nvfp4 import dequantize_parts as dequantize_nvfp4_parts  # noqa: E402
from orl.kernels.reference import dequantize_matmul  # noqa: E402
from tests.kernel_modules import kernel_module  # noqa: E402


@pytest.fixture(scope="module")
def compiled_kernel():
    """orl.kernels.triton_w4a16 with its kernel compiled for the GPU (tests/test_nvfp4_kernel.py may have
    left the interpreted module in sys.modules)."""
    return kernel_module("triton_w4a16", interpreted=False)


# (M, N, K, tiles): ragged in every dimension, split-K included; M up to a 64-row block step.
SHAPES = [
    (1, 16, 16, {}),
    (17, 33, 80, {}),
    (5, 70, 208, {"block_k": 64, "block_n": 32, "split_k": 3}),
    (32, 768, 256, {}),
    (64, 256, 768, {"split_k": 4}),
]


@pytest.mark.parametrize("m,n,k,tiles", SHAPES)
def test_compiled_kernel_matches_dequantize_then_matmul(compiled_kernel, m, n, k, tiles):
    gen = torch.Generator().manual_seed(m * 1000 + n + k)
    q = quantize_nvfp4(torch.randn(n, k, generator=gen).cuda())
    x = torch.randn(m, k, generator=gen).cuda()
    y = compiled_kernel.w4a16_matmul(x, q.packed, q.block_scale, q.tensor_scale, **tiles)
    ref = dequantize_matmul(x, q)
    # fp32 activations: Triton's dot may use TF32 on the tensor cores (10-bit mantissa).
    assert float((y - ref).abs().max() / ref.abs().max()) <= 5e-3


def test_compiled_kernel_bf16_within_bf16_rounding(compiled_kernel):
    gen = torch.Generator().manual_seed(11)
    q = quantize_nvfp4(torch.randn(96, 256, generator=gen).cuda())
    x = torch.randn(32, 256, generator=gen).to(device="cuda", dtype=torch.bfloat16)
    y = compiled_kernel.w4a16_matmul(x, q.packed, q.block_scale, q.tensor_scale)
    ref = x.float() @ dequantize_nvfp4(q).T
    assert y.dtype == torch.bfloat16
    # bf16 products are exact in fp32; what is left is the bf16 output rounding and summation order.
    assert ((y.float() - ref).abs() <= ref.abs() * 2.0**-8 + 1e-4).all()


@pytest.mark.parametrize("decode", ["bits", "lut", "asm"])
def test_compiled_kernel_decodes_every_byte_and_scale_exactly(compiled_kernel, decode):
    # All 256 byte values and all 127 finite non-negative E4M3 scales, times the identity.
    n, k = 64, 256
    packed = (torch.arange(n * k // 2) % 256).to(torch.uint8).reshape(n, k // 2).cuda()
    scale_bits = (torch.arange(n * k // 16) % 127).to(torch.uint8).reshape(n, k // 16).cuda()
    scales = scale_bits.view(torch.float8_e4m3fn)
    one = torch.tensor(1.0, device="cuda")
    y = compiled_kernel.w4a16_matmul(torch.eye(k, device="cuda"), packed, scales, one, decode=decode)
    assert torch.equal(y, dequantize_nvfp4_parts(packed, scales, one).T)


@pytest.mark.parametrize("m", [1, 16, 33])
def test_compiled_split_k_in_a_cuda_graph_replays_exactly(compiled_kernel, m):
    # The one-launch split-K reduction (tile counters, last slice adds) replayed many
    # times from a graph gives the eager result bit for bit: deterministic, counters reset.
    gen = torch.Generator().manual_seed(m)
    q = quantize_nvfp4(torch.randn(2560, 2560 + 256, generator=gen).cuda())
    x = torch.randn(m, 2560 + 256, generator=gen).to(device="cuda", dtype=torch.bfloat16)
    settings = {"block_n": 64, "block_k": 256, "split_k": 5}

    def call():
        return compiled_kernel.w4a16_matmul(x, q.packed, q.block_scale, q.tensor_scale, **settings)

    eager = call()
    asm = compiled_kernel.w4a16_matmul(x, q.packed, q.block_scale, q.tensor_scale, **settings, decode="asm")
    assert torch.equal(asm, eager)  # the inline-PTX decode gives the same bits
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = [call() for _ in range(4)]
    for _ in range(25):
        graph.replay()
        torch.cuda.synchronize()
        assert all(torch.equal(out, eager) for out in outs)
    ref = x.float() @ dequantize_nvfp4(q).T
    assert ((eager.float() - ref).abs() <= ref.abs() * 2.0**-8 + 1e-4).all()


def test_nvfp4_model_graph_replay_matches_eager(smoke_models):
    from orl.decoding import Policy
    from orl.engines.dlmrt import DlmrtConfig, DlmrtEngine
    from orl.kernels.quantize import quantize_model
    from orl.model.checkpoint import load_checkpoint

    ckpt = load_checkpoint(smoke_models[1], device="cuda")
    report = quantize_model(ckpt.model)
    assert report["quantized"], "the smoke model has linears to quantize"
    backends = {m.backend for m in ckpt.model.modules() if hasattr(m, "backend")}
    assert backends == {"triton"}, f"on CUDA the W4A16 linears run the Triton kernel, got {backends}"
    policy = Policy.parse("threshold:0.9")
    graph = DlmrtEngine(ckpt, policy, config=DlmrtConfig(sync_every=3, mode="cudagraph"))
    eager = DlmrtEngine(ckpt, policy, config=DlmrtConfig(sync_every=3, mode="eager"))
    prompts = ["def add(a, b):\n", "def is_even(n):\n"]
    for prompt in prompts:
        a, b = graph.generate(prompt, 32), eager.generate(prompt, 32)
        assert a.token_ids == b.token_ids and a.nfe == b.nfe


@pytest.fixture(scope="module")
def compiled_attention():
    """orl.kernels.triton_attention with its kernel compiled for the GPU."""
    return kernel_module("triton_attention", interpreted=False)


@pytest.mark.parametrize(
    "dtype,rows,length", [(torch.bfloat16, 64, 1024), (torch.bfloat16, 128, 656), (torch.float32, 96, 300)]
)
def test_split_kv_attention_equals_sdpa_on_the_gpu(compiled_attention, dtype, rows, length):
    from orl.model.attention import attention_bias

    gen = torch.Generator().manual_seed(rows + length)
    q, k, v = (torch.randn(1, 8, n, 128, generator=gen).to("cuda", dtype) for n in (rows, length, length))
    visible = length // 2 + torch.arange(rows)[:, None] % (length // 2)
    bias = attention_bias((torch.arange(length)[None, :] <= visible)[None].cuda(), 1, dtype)
    out = compiled_attention.split_kv_attention(q, k, v, bias)
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.double(), k.double(), v.double(), attn_mask=bias.double()
    )
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-5
    torch.testing.assert_close(out.double(), ref, atol=tol, rtol=tol)


def test_a_cuda_decoding_step_attends_split_kv(compiled_attention, monkeypatch):
    from orl.model import attention

    calls = []
    real = compiled_attention.split_kv_attention
    monkeypatch.setattr(compiled_attention, "split_kv_attention", lambda *a: calls.append(1) or real(*a))
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(1, 16, 32, 128, generator=gen).to("cuda", torch.bfloat16)  # 16 query heads, 4 per group
    k, v = (torch.randn(1, 4, 512, 128, generator=gen).to("cuda", torch.bfloat16) for _ in range(2))
    mask = torch.ones(1, 32, 512, dtype=torch.bool, device="cuda")
    mask[..., 400:] = False
    bias = attention.attention_bias(mask, 4, q.dtype)
    with torch.no_grad():
        out = attention.grouped_attention(q, k, v, bias)
    assert calls == [1]
    by_sdpa = torch.nn.functional.scaled_dot_product_attention(
        q.float(), k.float(), v.float(), attn_mask=mask[:, None], enable_gqa=True
    )
    torch.testing.assert_close(out.float(), by_sdpa, atol=2e-2, rtol=2e-2)
