"""Triton W4A16 matmul: y = x @ W^T with W in NVFP4 and x in bf16/fp16/fp32.

The packed weights never exist in high precision in memory: each program loads
a [BLOCK_K/2, BLOCK_N] tile of bytes, splits every byte into its two E2M1 codes
with shifts and masks, turns the codes into values with integer arithmetic and
`tl.where` (no lookup table, no inline PTX), multiplies by the block scales
(decoded from their E4M3 bits the same way) and feeds tensor cores through
`tl.dot` with fp32 accumulation. The per-tensor scale is applied once, in the
epilogue.

Because the low nibble holds column 2j and the high nibble column 2j+1, the
kernel never interleaves the two halves: it multiplies the even columns of x
by the low nibbles and the odd columns by the high nibbles, two dots of depth
BLOCK_K/2 each.

An E2M1 value times an E4M3 scale has at most 2 + 4 significant bits, so the
scaled weight is exact in bf16 and in fp32: casting it to the activation dtype
before the dot loses nothing, and all rounding is in the activations and the
fp32 accumulation.

Written for Ampere and Hopper (tl.dot on bf16 or tf32x3 tensor cores). On the
CPU it runs under Triton's interpreter: TRITON_INTERPRET=1 must be set when this
module is first imported, because triton.jit picks the interpreter when a kernel
is defined. The kernel calls only Triton's built-in ops and its own helpers, not
@jit functions of triton.language.standard such as tl.zeros, so that it also runs
interpreted when triton itself was imported before the variable was set.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from orl.errors import InputError
from orl.kernels.nvfp4 import BLOCK_SIZE, check_layout

# Packed bytes per block scale (16 values, 2 per byte); a constexpr so the kernel may read it.
BYTES_PER_SCALE: tl.constexpr = tl.constexpr(BLOCK_SIZE // 2)


def kernel_is_interpreted() -> bool:
    """True when the kernel below was defined under TRITON_INTERPRET=1 (runs on CPU tensors)."""
    return not isinstance(_w4a16_kernel, triton.runtime.jit.JITFunction)


@triton.jit
def _decode_e2m1(code):
    """4-bit E2M1 codes (int32, low 4 bits) -> float32 values."""
    exponent = (code >> 1) & 3
    mantissa = code & 1
    # Four times the magnitude is an integer: subnormal (exponent 0) 2*m,
    # normal (2 + m) << exponent; e.g. code 7 -> (2 + 1) << 3 = 24 -> 6.0.
    quadruple = tl.where(exponent == 0, mantissa << 1, (2 + mantissa) << exponent)
    value = quadruple.to(tl.float32) * 0.25
    return tl.where((code & 8) != 0, -value, value)


@triton.jit
def _decode_e4m3(bits):
    """float8_e4m3fn bit patterns (int32, low 8 bits) -> float32 values (NaN codes not handled)."""
    exponent = (bits >> 3) & 15
    mantissa = bits & 7
    # Normal numbers move exactly into float32: rebias the exponent (7 -> 127)
    # and put the 3 mantissa bits at the top of float32's 23.
    normal = (((exponent + 120) << 23) | (mantissa << 20)).to(tl.float32, bitcast=True)
    subnormal = mantissa.to(tl.float32) * 0.001953125  # m * 2**-9
    value = tl.where(exponent == 0, subnormal, normal)
    return tl.where((bits & 128) != 0, -value, value)


@triton.jit
def _w4a16_kernel(
    x_ptr, w_ptr, s_ptr, ts_ptr, y_ptr,
    M, N, K, K_PER_SPLIT,
    stride_xm, stride_xk,
    stride_wn, stride_wb,
    stride_sn, stride_sb,
    stride_ys, stride_ym, stride_yn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    DOT_PRECISION: tl.constexpr, DOT_IN_FP32: tl.constexpr,
):  # fmt: skip
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)  # split-K slice; 0 when the grid has one slice

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_b = tl.arange(0, BLOCK_K // 2)  # byte within the K tile: columns 2b and 2b+1
    m_ok = offs_m < M
    n_ok = offs_n < N

    acc = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float32)  # not tl.zeros: see the module docstring
    k_start = pid_k * K_PER_SPLIT
    k_end = tl.minimum(k_start + K_PER_SPLIT, K)
    for k0 in range(k_start, k_end, BLOCK_K):
        byte = k0 // 2 + offs_b
        byte_ok = byte < k_end // 2
        w_mask = byte_ok[:, None] & n_ok[None, :]

        # [BLOCK_K/2, BLOCK_N] tiles of packed bytes and of their block scales
        # (byte b holds columns 2b, 2b+1, which belong to block 2b // 16 = b // 8).
        packed = tl.load(
            w_ptr + offs_n[None, :] * stride_wn + byte[:, None] * stride_wb, mask=w_mask, other=0
        )
        scale_bits = tl.load(
            s_ptr + offs_n[None, :] * stride_sn + (byte // BYTES_PER_SCALE)[:, None] * stride_sb,
            mask=w_mask,
            other=0,
        )
        packed = packed.to(tl.int32)
        scale = _decode_e4m3(scale_bits.to(tl.int32))
        w_even = _decode_e2m1(packed & 15) * scale
        w_odd = _decode_e2m1(packed >> 4) * scale

        x_mask = m_ok[:, None] & byte_ok[None, :]
        x_row = x_ptr + offs_m[:, None] * stride_xm
        x_even = tl.load(x_row + (2 * byte)[None, :] * stride_xk, mask=x_mask, other=0.0)
        x_odd = tl.load(x_row + (2 * byte + 1)[None, :] * stride_xk, mask=x_mask, other=0.0)

        if DOT_IN_FP32:
            x_even = x_even.to(tl.float32)
            x_odd = x_odd.to(tl.float32)
        acc = tl.dot(x_even, w_even.to(x_even.dtype), acc, input_precision=DOT_PRECISION)
        acc = tl.dot(x_odd, w_odd.to(x_odd.dtype), acc, input_precision=DOT_PRECISION)

    acc = acc * tl.load(ts_ptr)  # per-tensor scale, read on the device: no host sync
    y_ptrs = y_ptr + pid_k * stride_ys + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])


_SM_COUNTS: dict[int, int] = {}


def _sm_count(device: torch.device) -> int:
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _SM_COUNTS:
        _SM_COUNTS[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return _SM_COUNTS[index]


def default_tiles(m: int, n: int, k: int, device: torch.device) -> dict:
    """Tile sizes for batch-1 block decoding (M = 1..64 rows).

    BLOCK_M is the smallest tensor-core-friendly tile covering M; when the
    output tiles alone cannot fill the GPU's SMs, K is split across programs.
    """
    block_m = min(64, max(16, triton.next_power_of_2(m)))
    block_n, block_k = 64, 128
    split_k = 1
    if device.type == "cuda":
        sms = _sm_count(device)
        tiles = triton.cdiv(m, block_m) * triton.cdiv(n, block_n)
        if tiles < sms:
            split_k = max(1, min(8, triton.cdiv(sms, tiles), k // (4 * block_k)))
    return {"block_m": block_m, "block_n": block_n, "block_k": block_k, "split_k": split_k}


def w4a16_matmul(
    x: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    weight_scale_2: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    block_k: int | None = None,
    split_k: int | None = None,
    num_warps: int = 4,
    num_stages: int = 3,
) -> torch.Tensor:
    """y = x @ W^T (+ bias) with W given as (weight uint8 [N, K/2], weight_scale e4m3 [N, K/16],
    weight_scale_2 fp32 scalar). x is [..., K] in bf16, fp16 or fp32; y has x's dtype.

    Tile arguments left as None come from `default_tiles`. BLOCK_K must be a
    multiple of 32 so that a tile holds whole scale blocks and each dot is at
    least 16 deep.
    """
    n, k = check_layout(weight, weight_scale, weight_scale_2)
    if x.shape[-1] != k:
        raise InputError(f"w4a16_matmul: x has last dimension {x.shape[-1]}, the weight expects K={k}")
    if x.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise InputError(f"w4a16_matmul: x must be bf16, fp16 or fp32, got {x.dtype}")
    if x.device != weight.device:
        raise InputError(f"w4a16_matmul: x is on {x.device} but the weight is on {weight.device}")
    if x.device.type == "cpu" and not kernel_is_interpreted():
        raise InputError(
            "w4a16_matmul: x is on the CPU but the Triton kernel was compiled for a GPU; "
            "set TRITON_INTERPRET=1 before importing orl.kernels.triton_w4a16 to run it on the CPU"
        )
    x2 = x.reshape(-1, k)
    m = x2.shape[0]
    if m == 0:
        return x.new_zeros(*x.shape[:-1], n)
    tiles = default_tiles(m, n, k, x.device)
    block_m = block_m or tiles["block_m"]
    block_n = block_n or tiles["block_n"]
    block_k = block_k or tiles["block_k"]
    split_k = split_k or tiles["split_k"]
    if block_k % (2 * BLOCK_SIZE) or min(block_m, block_n) < 16:
        raise InputError(
            "w4a16_matmul: need block_k % 32 == 0 and block_m, block_n >= 16, "
            f"got block_m={block_m} block_n={block_n} block_k={block_k}"
        )

    # Each split-K slice covers whole K tiles; slices write fp32 partial sums that
    # are added afterwards (deterministic, unlike atomics).
    k_tiles = triton.cdiv(k, block_k)
    split_k = max(1, min(split_k, k_tiles))
    k_per_split = triton.cdiv(k_tiles, split_k) * block_k
    split_k = triton.cdiv(k, k_per_split)

    # tf32x3 keeps fp32 activations at about fp32 accuracy on tensor cores; for bf16/fp16
    # the setting is moot and we pass Triton's default.
    precision = "tf32x3" if x.dtype == torch.float32 else "tf32"
    # Triton 3.x's interpreter mishandles bf16 in two places: it multiplies bf16 tiles
    # as their raw uint16 bits, and it truncates fp32 -> bf16 instead of rounding to
    # nearest. Under the interpreter bf16 activations are therefore widened to fp32
    # before the dot (exact: bf16 times the bf16-exact weights fits fp32) and the
    # result is stored in fp32 and rounded by torch. On a GPU neither detour is taken.
    dot_in_fp32 = kernel_is_interpreted() and x.dtype == torch.bfloat16
    out_dtype = torch.float32 if (split_k > 1 or dot_in_fp32) else x.dtype
    out = torch.empty((split_k, m, n), dtype=out_dtype, device=x.device)
    grid = (triton.cdiv(m, block_m), triton.cdiv(n, block_n), split_k)
    _w4a16_kernel[grid](
        x2, weight, weight_scale.view(torch.uint8), weight_scale_2.reshape(1), out,
        m, n, k, k_per_split,
        x2.stride(0), x2.stride(1),
        weight.stride(0), weight.stride(1),
        weight_scale.stride(0), weight_scale.stride(1),
        out.stride(0), out.stride(1), out.stride(2),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
        DOT_PRECISION=precision, DOT_IN_FP32=dot_in_fp32,
        num_warps=num_warps, num_stages=num_stages,
    )  # fmt: skip
    y = (out[0] if split_k == 1 else out.sum(dim=0)).to(x.dtype)
    if bias is not None:
        y = y + bias.to(y.dtype)
    return y.reshape(*x.shape[:-1], n)
