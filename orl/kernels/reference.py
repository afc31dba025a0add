"""Reference NVFP4 matmuls in plain torch: they run on any device.

* `dequantize_matmul`: W4A16 as the definition says it, dequantize W then multiply.
  It is the oracle the Triton kernel is tested against, and the fallback path.
* `emulated_w4a4_matmul`: what a Blackwell FP4 tensor core computes, emulated: the
  activations are quantized to NVFP4 too (16-blocks along K, E4M3 block scales and a
  per-tensor scale from the activation's own amax, computed on every call) and
  dequantized before the multiply. Use it for accuracy studies on any machine.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from orl.kernels.nvfp4 import NVFP4Tensor, dequantize_nvfp4, quantize_nvfp4


def dequantize_matmul(
    x: torch.Tensor,
    weight: NVFP4Tensor,
    bias: torch.Tensor | None = None,
    *,
    compute_dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """y = x @ dequant(W)^T (+ bias), multiplied in `compute_dtype`, returned in x's dtype.

    float32 (the default) makes this the accuracy oracle; passing x's own dtype
    (bf16 on a GPU) gives the plain "dequantize, then matmul" baseline the GPU
    benchmark times.
    """
    w = dequantize_nvfp4(weight, dtype=compute_dtype)
    b = None if bias is None else bias.to(compute_dtype)
    return F.linear(x.to(compute_dtype), w, b).to(x.dtype)


def fake_quantize_nvfp4(x: torch.Tensor) -> torch.Tensor:
    """Round-trip activations through NVFP4 (blocks along the last dim), keeping x's dtype.

    The inf/NaN check is skipped so this never synchronises with the host (it runs
    inside captured decoding loops); a non-finite activation turns into NaN outputs.
    """
    q = quantize_nvfp4(x, name="activation", check_finite=False)
    return dequantize_nvfp4(q, dtype=x.dtype)


def emulated_w4a4_matmul(
    x: torch.Tensor,
    weight: NVFP4Tensor,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """y = fakequant(x) @ dequant(W)^T (+ bias) in float32, returned in x's dtype."""
    x_hat = dequantize_nvfp4(quantize_nvfp4(x, name="activation", check_finite=False))
    return dequantize_matmul(x_hat, weight, bias).to(x.dtype)
