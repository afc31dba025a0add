"""Triton W4A16 matmul: y = x @ W^T with W in NVFP4 and x in bf16/fp16/fp32.

Written for memory-bound batch-1 decoding (M = 1..64 rows): the time is the
time to stream W's 4.5 bits per value from memory, so the kernel's job is to
keep enough bytes in flight and to spend as few instructions as possible per
weight turning them into tensor-core operands. The packed weights never exist
in high precision in memory. Each program, for each K tile:

* loads a [BLOCK_K/16, 8, BLOCK_N] tile of packed bytes (one row of 8 bytes per
  16-value scale block) and the [BLOCK_K/16, BLOCK_N] tile of its E4M3 block
  scales: one scale load and one scale decode per 16 weights, broadcast over
  the block's 8 bytes;
* decodes each 4-bit E2M1 code straight into the bits of an fp16 number, either
  by shifting the code's sign, exponent and mantissa bits into place or through
  a 16-entry lookup table (`decode="bits"` or `"lut"`, same values). Shifting
  the three magnitude bits to fp16's bits 11..9 yields E2M1 * 2**-14 exactly,
  subnormal code 1 included, because E2M1's subnormal (0.5) and fp16's line up
  at that offset: the fp16 value is the E2M1 value times 2**-14, and the kernel
  puts 2**14 back in the epilogue together with the per-tensor scale;
* multiplies by the block scale in fp16 and casts to the activation dtype for
  `tl.dot`, which accumulates in fp32.

Exactness: an E2M1 value has at most 2 significant bits (1.x) and an E4M3 scale
at most 4 (1.xxx), so their product has at most 6; its magnitude lies between
0.5 * 2**-9 = 2**-10 and 6 * 448 = 2688, so every product is a multiple of
2**-10 below 2**12. Times 2**-14 that is a multiple of 2**-24 (fp16's smallest
subnormal) below 2**-2: exact in fp16. Widening to bf16 (8 significant bits,
fp32's exponent range) or fp32 is exact as well. So the decoded weight is exact
in every activation dtype, and all rounding is in the activations and the fp32
accumulation, as in the dequantize-then-matmul reference.

Because the low nibble holds column 2j and the high nibble column 2j+1, the
kernel never interleaves the two halves: it multiplies the even columns of x by
the low nibbles and the odd columns by the high nibbles, two dots of depth
BLOCK_K/2 each.

Split-K (for shapes whose output tiles alone cannot fill the GPU) runs in the
same launch: each K slice stores an fp32 partial sum, bumps a per-tile counter,
and the slice that arrives last adds the partials in slice order (deterministic)
and writes y. No second kernel, which matters inside a CUDA graph where a
matmul takes a few microseconds. The counters live in a per-device buffer that
the last slice resets to zero; they are allocated on the first split-K call,
which must therefore not be inside a CUDA graph capture (warm up first), and
two split-K calls must not run concurrently on different streams.

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
from orl.kernels.nvfp4 import BLOCK_SIZE, E2M1_VALUES, check_layout

# Packed bytes per block scale (16 values, 2 per byte); a constexpr so the kernel may read it.
BYTES_PER_SCALE: tl.constexpr = tl.constexpr(BLOCK_SIZE // 2)
# The decoded fp16 weights are the true E2M1 * E4M3 products times 2**-14 (module docstring).
DECODE_SHIFT = 2.0**14
DECODES = ("bits", "lut")


def kernel_is_interpreted() -> bool:
    """True when the kernel below was defined under TRITON_INTERPRET=1 (runs on CPU tensors)."""
    return not isinstance(_w4a16_kernel, triton.runtime.jit.JITFunction)


@triton.jit
def _e2m1_pair_bits(packed):
    """Packed bytes (int32, low 8 bits) -> (low, high) nibbles as fp16 values E2M1 * 2**-14.

    fp16 is sign | 5 exponent bits | 10 mantissa bits. The code's sign (bit 3) goes
    to bit 15 and its exponent and mantissa (bits 2..0) to bits 11..9: exponent
    field e, top mantissa bit m, i.e. 2**(e - 15) * (1 + m/2) for e > 0 and the
    subnormal m * 2**-15 for e = 0, which is E2M1's value times 2**-14 in both cases.
    """
    low = ((packed << 12) & 0x8000) | ((packed << 9) & 0x0E00)
    high = ((packed << 8) & 0x8000) | ((packed << 5) & 0x0E00)
    return low.to(tl.uint16).to(tl.float16, bitcast=True), high.to(tl.uint16).to(tl.float16, bitcast=True)


@triton.jit
def _e2m1_pair_lut(packed, lut_ptr):
    """As `_e2m1_pair_bits`, through a 16-entry fp16 table of E2M1 * 2**-14 (cached in L1)."""
    return tl.load(lut_ptr + (packed & 15)), tl.load(lut_ptr + (packed >> 4))


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
    x_ptr, w_ptr, s_ptr, ts_ptr, lut_ptr, y_ptr, part_ptr, count_ptr,
    M, N, K, K_PER_SPLIT, SPLIT_K,
    stride_xm, stride_xk,
    stride_wn, stride_wb,
    stride_sn, stride_sb,
    stride_ym, stride_yn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    EVEN_K: tl.constexpr, USE_LUT: tl.constexpr, SPLIT: tl.constexpr,
    DOT_PRECISION: tl.constexpr, DOT_IN_FP32: tl.constexpr,
):  # fmt: skip
    GROUPS: tl.constexpr = BLOCK_K // 16  # scale blocks per K tile
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)  # split-K slice; 0 when SPLIT is False

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok = offs_m < M
    n_ok = offs_n < N
    # Rows of W past N are read as row n % N instead of masked: every weight load
    # stays in bounds without a per-element mask, and the store drops those columns.
    n_in = offs_n % N
    offs_g = tl.arange(0, GROUPS)
    offs_b = tl.arange(0, BLOCK_K // 2)  # byte within the K tile: columns 2b and 2b+1
    # Byte (g, j) of the tile is byte 8g + j: it belongs to scale block g.
    tile_byte = offs_g[:, None] * BYTES_PER_SCALE + tl.arange(0, BYTES_PER_SCALE)[None, :]
    w_tile = w_ptr + n_in[None, None, :] * stride_wn + tile_byte[:, :, None] * stride_wb
    s_tile = s_ptr + n_in[None, :] * stride_sn + offs_g[:, None] * stride_sb
    x_rows = x_ptr + offs_m[:, None] * stride_xm

    acc = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float32)  # not tl.zeros: see the module docstring
    k_start = pid_k * K_PER_SPLIT
    k_end = tl.minimum(k_start + K_PER_SPLIT, K)
    for k0 in range(k_start, k_end, BLOCK_K):
        if EVEN_K:  # every tile is whole: no K masks in the loop
            packed = tl.load(w_tile + (k0 // 2) * stride_wb)
            scale_bits = tl.load(s_tile + (k0 // BLOCK_SIZE) * stride_sb)
            x_mask = m_ok[:, None]
        else:  # K is a multiple of 16, so a scale block is either wholly in or wholly out
            g_ok = k0 // BLOCK_SIZE + offs_g < k_end // BLOCK_SIZE
            packed = tl.load(w_tile + (k0 // 2) * stride_wb, mask=g_ok[:, None, None], other=0)
            scale_bits = tl.load(s_tile + (k0 // BLOCK_SIZE) * stride_sb, mask=g_ok[:, None], other=0)
            x_mask = m_ok[:, None] & (k0 + 2 * offs_b < k_end)[None, :]

        packed = packed.to(tl.int32)
        if USE_LUT:
            w_low, w_high = _e2m1_pair_lut(packed, lut_ptr)
        else:
            w_low, w_high = _e2m1_pair_bits(packed)
        # One scale per 16 values, decoded once and broadcast over the block's 8 bytes;
        # E4M3 values are exact in fp16, and so is the product (module docstring).
        scale = _decode_e4m3(scale_bits.to(tl.int32)).to(tl.float16)[:, None, :]
        w_even = tl.reshape(w_low * scale, (BLOCK_K // 2, BLOCK_N))
        w_odd = tl.reshape(w_high * scale, (BLOCK_K // 2, BLOCK_N))

        x_even = tl.load(x_rows + (k0 + 2 * offs_b)[None, :] * stride_xk, mask=x_mask, other=0.0)
        x_odd = tl.load(x_rows + (k0 + 2 * offs_b + 1)[None, :] * stride_xk, mask=x_mask, other=0.0)
        if DOT_IN_FP32:
            x_even = x_even.to(tl.float32)
            x_odd = x_odd.to(tl.float32)
        acc = tl.dot(x_even, w_even.to(x_even.dtype), acc, input_precision=DOT_PRECISION)
        acc = tl.dot(x_odd, w_odd.to(x_odd.dtype), acc, input_precision=DOT_PRECISION)

    # Per-tensor scale, read on the device (no host sync), times the 2**14 the decode left out.
    scale_out = tl.load(ts_ptr) * 16384.0
    out_mask = m_ok[:, None] & n_ok[None, :]
    y_ptrs = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn
    if SPLIT:
        # Partials are [SPLIT_K, M, N] fp32, contiguous.
        part = part_ptr + offs_m[:, None] * N + offs_n[None, :]
        tl.store(part + pid_k * M * N, acc, mask=out_mask)
        # Every thread's partial is stored before the counter ticks; the atomic
        # (acq_rel, GPU scope) publishes them to the slice that arrives last.
        tl.debug_barrier()
        counter = count_ptr + pid_m * tl.num_programs(1) + pid_n
        arrived = tl.atomic_add(counter, 1)
        if arrived == SPLIT_K - 1:
            # Last slice: add the partials in slice order, reading L2 (.cg), not a stale L1.
            total = tl.load(part, mask=out_mask, other=0.0, cache_modifier=".cg")
            for s in range(1, SPLIT_K):
                total += tl.load(part + s * M * N, mask=out_mask, other=0.0, cache_modifier=".cg")
            tl.store(y_ptrs, (total * scale_out).to(y_ptr.dtype.element_ty), mask=out_mask)
            tl.atomic_xchg(counter, 0)  # ready for the next launch
    else:
        tl.store(y_ptrs, (acc * scale_out).to(y_ptr.dtype.element_ty), mask=out_mask)


_SM_COUNTS: dict[int, int] = {}
_LUTS: dict[torch.device, torch.Tensor] = {}
_COUNTERS: dict[torch.device, torch.Tensor] = {}
_MIN_COUNTERS = 1 << 16  # int32 tile counters per device (256 KiB): any layer of a 4B-class model


def _sm_count(device: torch.device) -> int:
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _SM_COUNTS:
        _SM_COUNTS[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return _SM_COUNTS[index]


def _lut(device: torch.device) -> torch.Tensor:
    """The 16 E2M1 values times 2**-14 as fp16 (exact), one table per device."""
    if device not in _LUTS:
        values = torch.tensor(E2M1_VALUES, dtype=torch.float32) / DECODE_SHIFT
        _LUTS[device] = values.to(torch.float16).to(device)
    return _LUTS[device]


def _counters(device: torch.device, needed: int) -> torch.Tensor:
    """Zeroed int32 split-K tile counters; the kernel leaves them zero after each launch."""
    have = _COUNTERS.get(device)
    if have is None or have.numel() < needed:
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            raise InputError(
                "w4a16_matmul: split-K needs its tile counters allocated before CUDA graph capture; "
                "run the call once outside the capture first"
            )
        _COUNTERS[device] = torch.zeros(max(needed, _MIN_COUNTERS), dtype=torch.int32, device=device)
    return _COUNTERS[device]


def default_tiles(m: int, n: int, k: int, device: torch.device) -> dict:
    """Tile settings for batch-1 block decoding (M = 1..64 rows).

    BLOCK_M is the smallest tensor-core-friendly tile covering M. The kernel is
    bound by reading W, so the settings aim at bytes in flight: 256-deep K tiles
    (64 packed bytes per weight row per tile) and, when the output tiles alone
    give fewer than two programs per SM, K split across programs (at most 8
    slices, each at least two K tiles deep).
    """
    block_m = min(64, max(16, triton.next_power_of_2(m)))
    block_n, block_k = 64, 256
    split_k = 1
    if device.type == "cuda":
        sms = _sm_count(device)
        tiles = triton.cdiv(m, block_m) * triton.cdiv(n, block_n)
        if tiles < 2 * sms:
            split_k = max(1, min(8, triton.cdiv(2 * sms, tiles), k // (2 * block_k)))
    return {
        "block_m": block_m,
        "block_n": block_n,
        "block_k": block_k,
        "split_k": split_k,
        "num_warps": 4,
        "num_stages": 3,
        "decode": "bits",
    }


def split_k_slices(k: int, block_k: int, split_k: int) -> tuple[int, int]:
    """(slices, K columns per slice): each slice covers whole K tiles, none is empty."""
    k_tiles = triton.cdiv(k, block_k)
    split_k = max(1, min(split_k, k_tiles))
    k_per_split = triton.cdiv(k_tiles, split_k) * block_k
    return triton.cdiv(k, k_per_split), k_per_split


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
    num_warps: int | None = None,
    num_stages: int | None = None,
    decode: str | None = None,
) -> torch.Tensor:
    """y = x @ W^T (+ bias) with W given as (weight uint8 [N, K/2], weight_scale e4m3 [N, K/16],
    weight_scale_2 fp32 scalar). x is [..., K] in bf16, fp16 or fp32; y has x's dtype.

    Settings left as None come from `default_tiles`. BLOCK_K must be a multiple
    of 32 so that a tile holds whole scale blocks and each dot is at least 16
    deep; BLOCK_M, BLOCK_N and BLOCK_K must be powers of two. `decode` picks the
    E2M1 decode ("bits" or "lut"); both give the same values.
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
    num_warps = num_warps or tiles["num_warps"]
    num_stages = num_stages or tiles["num_stages"]
    decode = decode or tiles["decode"]
    powers = all(v & (v - 1) == 0 for v in (block_m, block_n, block_k))
    if block_k % (2 * BLOCK_SIZE) or min(block_m, block_n) < 16 or not powers:
        raise InputError(
            "w4a16_matmul: need block_k % 32 == 0, block_m, block_n >= 16 and powers of two, "
            f"got block_m={block_m} block_n={block_n} block_k={block_k}"
        )
    if decode not in DECODES:
        raise InputError(f"w4a16_matmul: decode must be one of {DECODES}, got {decode!r}")

    split_k, k_per_split = split_k_slices(k, block_k, split_k)

    # tf32x3 keeps fp32 activations at about fp32 accuracy on tensor cores; for bf16/fp16
    # the setting is moot and we pass Triton's default.
    precision = "tf32x3" if x.dtype == torch.float32 else "tf32"
    # Triton 3.x's interpreter mishandles bf16 in two places: it multiplies bf16 tiles
    # as their raw uint16 bits, and it truncates fp32 -> bf16 instead of rounding to
    # nearest. Under the interpreter bf16 activations are therefore widened to fp32
    # before the dot (exact: bf16 times the bf16-exact weights fits fp32) and the
    # result is stored in fp32 and rounded by torch. On a GPU neither detour is taken.
    dot_in_fp32 = kernel_is_interpreted() and x.dtype == torch.bfloat16
    out = torch.empty((m, n), dtype=torch.float32 if dot_in_fp32 else x.dtype, device=x.device)
    grid = (triton.cdiv(m, block_m), triton.cdiv(n, block_n), split_k)
    if split_k > 1:
        partials = torch.empty((split_k, m, n), dtype=torch.float32, device=x.device)
        counters = _counters(x.device, grid[0] * grid[1])
    else:  # never read: any tensor will do
        partials, counters = out, out
    _w4a16_kernel[grid](
        x2, weight, weight_scale.view(torch.uint8), weight_scale_2.reshape(1), _lut(x.device),
        out, partials, counters,
        m, n, k, k_per_split, split_k,
        x2.stride(0), x2.stride(1),
        weight.stride(0), weight.stride(1),
        weight_scale.stride(0), weight_scale.stride(1),
        out.stride(0), out.stride(1),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
        EVEN_K=k % block_k == 0, USE_LUT=decode == "lut", SPLIT=split_k > 1,
        DOT_PRECISION=precision, DOT_IN_FP32=dot_in_fp32,
        num_warps=num_warps, num_stages=num_stages,
    )  # fmt: skip
    y = out.to(x.dtype)
    if bias is not None:
        y = y + bias.to(y.dtype)
    return y.reshape(*x.shape[:-1], n)
