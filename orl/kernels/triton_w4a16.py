"""Triton W4A16 matmul: y = x @ W^T with W in NVFP4 and x in bf16/fp16/fp32.

Written for memory-bound batch-1 decoding (M = 1..64 rows): the time is the
time to stream W's 4.5 bits per value from memory, so the kernel's job is to
keep enough bytes in flight and to spend as few instructions as possible per
weight turning them into tensor-core operands. The packed weights never exist
in high precision in memory. Each program, for each K tile:

* loads a [BLOCK_K/2, BLOCK_N] tile of packed bytes (16-byte vector loads: the
  pointers advance by whole tiles from an offset Triton can prove aligned) and
  the [BLOCK_K/16, BLOCK_N] tile of their E4M3 block scales: one scale load and
  one scale decode per 16 weights, broadcast over the block's 8 bytes by viewing
  the decoded tile as [BLOCK_K/16, 8, BLOCK_N];
* decodes each 4-bit E2M1 code straight into the bits of an fp16 number
  (`decode=`): "bits" shifts the code's sign to bit 15 and its exponent and
  mantissa to bits 11..9, both nibbles of a byte in one 32-bit word; "asm" does
  the same in inline PTX on four bytes per register (GPU only); "lut" loads the
  value from a 16-entry table. All three give the same values: E2M1 * 2**-14
  exactly, subnormal code 1 included, because E2M1's subnormal (0.5) and fp16's
  line up at that offset; the kernel puts 2**14 back in the epilogue together
  with the per-tensor scale;
* multiplies by the block scale in fp16 (packed HMUL2) and converts to the
  activation dtype for `tl.dot`, which accumulates in fp32. fp16 -> bf16 goes
  through fp32 on purpose: a direct cast compiles to one quarter-rate F2F per
  value, the detour to a full-rate HADD2.F32 plus one F2FP per two values.

Instruction cost, from compiling for sm_90 here (ptxas from Triton's wheel; the
inner loop at BLOCK 16 x 64 x 256, 4 warps): "bits" about 11.5 SASS instructions
per weight, "asm" about 9.8, "lut" about 16.9 (each table read is a load); the
kernel before issue 32 spent roughly twice that on its per-value decode alone.
Which is fastest on a GPU is for the benchmark's sweep to say (bench_gpu.py).

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

# Values and packed bytes per block scale (16 values, 2 per byte). Compiled Triton kernels
# may read module globals only when they are constexprs (the interpreter does not check).
SCALE_BLOCK: tl.constexpr = tl.constexpr(BLOCK_SIZE)
BYTES_PER_SCALE: tl.constexpr = tl.constexpr(BLOCK_SIZE // 2)
# The decoded fp16 weights are the true E2M1 * E4M3 products times 2**-14 (module docstring).
DECODE_SHIFT = 2.0**14
DECODES = ("bits", "lut", "asm")


def kernel_is_interpreted() -> bool:
    """True when the kernel below was defined under TRITON_INTERPRET=1 (runs on CPU tensors)."""
    return not isinstance(_w4a16_kernel, triton.runtime.jit.JITFunction)


@triton.jit
def _e2m1_pair_bits(packed):
    """Packed bytes (uint8) -> (low, high) nibbles as fp16 values E2M1 * 2**-14.

    fp16 is sign | 5 exponent bits | 10 mantissa bits. The code's sign (bit 3) goes
    to bit 15 and its exponent and mantissa (bits 2..0) to bits 11..9: exponent
    field e, top mantissa bit m, i.e. 2**(e - 15) * (1 + m/2) for e > 0 and the
    subnormal m * 2**-15 for e = 0, which is E2M1's value times 2**-14 in both cases.
    """
    # Both nibbles at once: the low one to bits 3..0, the high one to bits 19..16, so
    # that one set of shifts and masks builds both fp16 halves of a 32-bit word.
    packed = packed.to(tl.uint32)
    pair = (packed & 0x0F) | ((packed & 0xF0) << 12)
    bits = ((pair << 12) & 0x80008000) | ((pair << 9) & 0x0E000E00)
    low = (bits & 0xFFFF).to(tl.uint16).to(tl.float16, bitcast=True)
    high = (bits >> 16).to(tl.uint16).to(tl.float16, bitcast=True)
    return low, high


# `_e2m1_pair_bits` in PTX, four bytes per 32-bit register: PRMT spreads bytes 0,1
# (then 2,3) to the low byte of each 16-bit half, and one shift-and-mask pair per
# output word builds two fp16 values at a time (ptxas fuses the masks into LOP3).
# Outputs: $0, $1 the low nibbles of bytes (0, 1), (2, 3); $2, $3 the high nibbles.
_E2M1_PTX = tl.constexpr(
    """
{
.reg .b32 z, t01, t23, a, b;
mov.b32 z, 0;
prmt.b32 t01, $4, z, 0x4140;
prmt.b32 t23, $4, z, 0x4342;
shl.b32 a, t01, 12; and.b32 a, a, 0x80008000; shl.b32 b, t01, 9; and.b32 b, b, 0x0E000E00; or.b32 $0, a, b;
shl.b32 a, t23, 12; and.b32 a, a, 0x80008000; shl.b32 b, t23, 9; and.b32 b, b, 0x0E000E00; or.b32 $1, a, b;
shl.b32 a, t01, 8; and.b32 a, a, 0x80008000; shl.b32 b, t01, 5; and.b32 b, b, 0x0E000E00; or.b32 $2, a, b;
shl.b32 a, t23, 8; and.b32 a, a, 0x80008000; shl.b32 b, t23, 5; and.b32 b, b, 0x0E000E00; or.b32 $3, a, b;
}
"""
)


@triton.jit
def _e2m1_pair_asm(packed):
    """As `_e2m1_pair_bits`, in inline PTX on packed uint8 (GPU only: the interpreter runs no PTX)."""
    return tl.inline_asm_elementwise(
        _E2M1_PTX,
        "=r,=r,=r,=r,r",
        [packed],
        dtype=(tl.float16, tl.float16),
        is_pure=True,
        pack=4,
    )


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
    M, N, K, K_PER_SPLIT, BYTES_PER_SPLIT, GROUPS_PER_SPLIT, SPLIT_K,
    stride_xm, stride_xk,
    stride_wn, stride_wb,
    stride_sn, stride_sb,
    stride_ym, stride_yn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    EVEN_K: tl.constexpr, DECODE: tl.constexpr, SPLIT: tl.constexpr,
    DOT_PRECISION: tl.constexpr, DOT_IN_FP32: tl.constexpr,
):  # fmt: skip
    GROUPS: tl.constexpr = BLOCK_K // SCALE_BLOCK  # scale blocks per K tile
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
    k_start = pid_k * K_PER_SPLIT
    k_end = tl.minimum(k_start + K_PER_SPLIT, K)
    # The weight and scale pointers start at the slice's first byte and scale block
    # (passed precomputed: BYTES_PER_SPLIT is a multiple of 16, which Triton specializes
    # on) and advance by whole tiles, so the compiler can prove each row's bytes
    # contiguous and 16-byte aligned and load them with wide vector loads.
    w_ptrs = w_ptr + n_in[None, :] * stride_wn + (pid_k * BYTES_PER_SPLIT + offs_b)[:, None] * stride_wb
    s_ptrs = s_ptr + n_in[None, :] * stride_sn + (pid_k * GROUPS_PER_SPLIT + offs_g)[:, None] * stride_sb
    x_rows = x_ptr + offs_m[:, None] * stride_xm

    acc = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float32)  # not tl.zeros: see the module docstring
    for k0 in range(k_start, k_end, BLOCK_K):
        # [BLOCK_K/2, BLOCK_N] packed bytes and the [BLOCK_K/16, BLOCK_N] scales of their blocks.
        if EVEN_K:  # every tile is whole: no K masks in the loop
            packed = tl.load(w_ptrs)
            scale_bits = tl.load(s_ptrs)
            x_mask = m_ok[:, None]
        else:  # K is a multiple of 16, so a scale block is either wholly in or wholly out
            packed = tl.load(w_ptrs, mask=(k0 // 2 + offs_b < k_end // 2)[:, None], other=0)
            g_ok = k0 // SCALE_BLOCK + offs_g < k_end // SCALE_BLOCK
            scale_bits = tl.load(s_ptrs, mask=g_ok[:, None], other=0)
            x_mask = m_ok[:, None] & (k0 + 2 * offs_b < k_end)[None, :]
        w_ptrs += (BLOCK_K // 2) * stride_wb
        s_ptrs += GROUPS * stride_sb

        if DECODE == "asm":
            w_low, w_high = _e2m1_pair_asm(packed)
        elif DECODE == "lut":
            w_low, w_high = _e2m1_pair_lut(packed.to(tl.int32), lut_ptr)
        else:
            w_low, w_high = _e2m1_pair_bits(packed)
        # One scale per 16 values, decoded once and broadcast over its block's 8 bytes
        # (bytes 8g..8g+7 of the tile are block g); E4M3 values are exact in fp16, and
        # so are the products (module docstring).
        scale = _decode_e4m3(scale_bits.to(tl.int32)).to(tl.float16)[:, None, :]
        w_low = tl.reshape(w_low, (GROUPS, BYTES_PER_SCALE, BLOCK_N)) * scale
        w_high = tl.reshape(w_high, (GROUPS, BYTES_PER_SCALE, BLOCK_N)) * scale
        w_even = tl.reshape(w_low, (BLOCK_K // 2, BLOCK_N))
        w_odd = tl.reshape(w_high, (BLOCK_K // 2, BLOCK_N))

        x_even = tl.load(x_rows + (k0 + 2 * offs_b)[None, :] * stride_xk, mask=x_mask, other=0.0)
        x_odd = tl.load(x_rows + (k0 + 2 * offs_b + 1)[None, :] * stride_xk, mask=x_mask, other=0.0)
        if DOT_IN_FP32:
            x_even = x_even.to(tl.float32)
            x_odd = x_odd.to(tl.float32)
        if x_even.dtype == tl.bfloat16:  # fp16 -> fp32 -> bf16, not F2F: module docstring
            w_even = w_even.to(tl.float32)
            w_odd = w_odd.to(tl.float32)
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
    """The 16 E2M1 values times 2**-14 as fp16 (exact), one table per device.

    Made by a host-to-device copy on the first call, which must not be inside a CUDA
    graph capture (warm up first, as torch's graph recipe does anyway).
    """
    if device not in _LUTS:
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            raise InputError(
                "w4a16_matmul: decode='lut' makes its table on the first call, which cannot be "
                "inside a CUDA graph capture; run the call once outside the capture first"
            )
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
    (64 packed bytes per weight row per tile); where 64-wide output tiles give
    every SM a program, 128-wide tiles and 8 warps, else K split across programs
    until there are two per SM (at most 8 slices, each at least two K tiles deep).
    """
    block_m = min(64, max(16, triton.next_power_of_2(m)))
    block_n, block_k, warps = 64, 256, 4
    split_k = 1
    if device.type == "cuda":
        sms = _sm_count(device)
        tiles = triton.cdiv(m, block_m) * triton.cdiv(n, block_n)
        if tiles >= sms:
            # Where 64-wide output tiles already give every SM a program, 128-wide ones with 8 warps and
            # no split were the fastest setting on an H200 (Qwen3-4B's 2560 -> 9728 and -> 19456 at
            # M = 16 and 32: 1.14-1.34x faster than 64-wide tiles;
            # results/gpu-check/nvidia-h200-2026-12-04).
            block_n, warps = 128, 8
        elif tiles < 2 * sms:
            split_k = max(1, min(8, triton.cdiv(2 * sms, tiles), k // (2 * block_k)))
    return {
        "block_m": block_m,
        "block_n": block_n,
        "block_k": block_k,
        "split_k": split_k,
        "num_warps": warps,
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
    E2M1 decode ("bits", "lut", or "asm": inline PTX, GPU only, with at least 4
    packed bytes per thread in a weight tile); all give the same values.
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
    if decode == "asm" and kernel_is_interpreted():
        raise InputError("w4a16_matmul: decode='asm' is inline PTX, which Triton's interpreter cannot run")
    if decode == "asm" and (block_k // 2) * block_n < 4 * 32 * num_warps:
        # The PTX takes four bytes per register: each thread must hold a multiple of four.
        raise InputError(
            f"w4a16_matmul: decode='asm' needs (block_k/2) * block_n >= 128 * num_warps, got "
            f"block_k={block_k} block_n={block_n} num_warps={num_warps}"
        )

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
    # The table is only read by decode="lut"; the "bits" path needs no per-device state.
    lut = _lut(x.device) if decode == "lut" else weight
    _w4a16_kernel[grid](
        x2, weight, weight_scale.view(torch.uint8), weight_scale_2.reshape(1), lut,
        out, partials, counters,
        m, n, k, k_per_split, k_per_split // 2, k_per_split // BLOCK_SIZE, split_k,
        x2.stride(0), x2.stride(1),
        weight.stride(0), weight.stride(1),
        weight_scale.stride(0), weight_scale.stride(1),
        out.stride(0), out.stride(1),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
        EVEN_K=k % block_k == 0, DECODE=decode, SPLIT=split_k > 1,
        DOT_PRECISION=precision, DOT_IN_FP32=dot_in_fp32,
        num_warps=num_warps, num_stages=num_stages,
    )  # fmt: skip
    y = out.to(x.dtype)
    if bias is not None:
        y = y + bias.to(y.dtype)
    return y.reshape(*x.shape[:-1], n)


@torch.library.custom_op("orl::w4a16_linear", mutates_args=())
def w4a16_linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    weight_scale_2: torch.Tensor,
    bias: torch.Tensor | None,
) -> torch.Tensor:
    """`w4a16_matmul` with its default settings as one opaque operator, for compiled models.

    torch.compile cannot trace the launcher's Python (the interpreter check, the tile choice, the
    split-K buffers made on a first call): as a custom operator, a compiled decoder layer calls it
    like any extern kernel, and a CUDA graph captures its launch.
    """
    return w4a16_matmul(x, weight, weight_scale, weight_scale_2, bias)


@w4a16_linear.register_fake
def _w4a16_linear_shape(x, weight, weight_scale, weight_scale_2, bias):
    return x.new_empty((*x.shape[:-1], weight.shape[0]))
