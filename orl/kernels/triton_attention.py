"""Split-KV attention (flash-decoding) for dlmrt's decoding steps on CUDA.

A decoding step asks few queries against a long cache: at Qwen3-4B and block 16, the G = 4 query heads
of each of the 8 key/value heads stack into 64 query rows (orl.model.attention.grouped_attention).
SDPA's memory-efficient kernel gives each (batch, key/value head) pair one thread block that walks the
whole cache: 8 thread blocks on a 132-SM H200, 32.7 µs a layer, a quarter of the step (measured
2026-12-04, results/gpu-check/nvidia-h200-2026-12-04b).

Here the cache is cut into splits of SPLIT_LEN keys and every (batch, key/value head, row tile, split)
gets its own thread block, which computes its split's part of the softmax: the running maximum m, the
sum l of exp(s - m) (`denom`) and the exp-weighted values acc (FlashAttention's online softmax). The
splits are then combined in torch (`combine_splits`):

    out = Σ_j exp(m_j - M) acc_j / Σ_j exp(m_j - M) l_j,    M = max_j m_j

which inductor fuses with the layer's output projection's input inside a compiled layer. The kernel is
one custom operator (orl::split_kv_partials) so that a compiled layer calls it as an extern kernel and a
CUDA graph captures its launch, as for the W4A16 linear.

On the CPU it runs under Triton's interpreter (TRITON_INTERPRET=1 set before the first import), for the
tests; the model uses it on CUDA only.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

SPLIT_LEN = 128  # keys per split: two BLOCK_N tiles; 8 splits of a 1,024-slot cache
BLOCK_N = 64  # keys per tile
MAX_BLOCK_R = 64  # query rows per thread block (the accumulator is BLOCK_R x head_dim fp32 registers)


def kernel_is_interpreted() -> bool:
    """True when the kernel below was defined under TRITON_INTERPRET=1 (runs on CPU tensors)."""
    return not isinstance(_split_kv_kernel, triton.runtime.jit.JITFunction)


# Row reductions through tl.reduce with our own combine functions, not tl.max / tl.sum: those are
# @jit functions of triton.language.standard, which do not run interpreted when triton was imported
# before TRITON_INTERPRET was set (as orl/kernels/triton_w4a16.py explains).
@triton.jit
def _larger(a, b):
    return tl.maximum(a, b)


@triton.jit
def _plus(a, b):
    return a + b


@triton.jit
def _split_kv_kernel(
    q_ptr, k_ptr, v_ptr, bias_ptr, acc_ptr, m_ptr, denom_ptr,
    sq_b, sq_h, sq_r, sk_b, sk_h, sk_s, sv_b, sv_h, sv_s, sb_b, sb_r,
    n_kv, rows, length, scale,
    SPLIT: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
    PRECISION: tl.constexpr,
):  # fmt: skip
    bh, row_tile, split = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    n_splits = tl.num_programs(2)
    b, h = bh // n_kv, bh % n_kv
    r = row_tile * BLOCK_R + tl.arange(0, BLOCK_R)
    d = tl.arange(0, HEAD_DIM)
    row_ok = r < rows
    q = tl.load(q_ptr + b * sq_b + h * sq_h + r[:, None] * sq_r + d[None, :], mask=row_ok[:, None], other=0.0)
    m = tl.full([BLOCK_R], float("-inf"), tl.float32)
    denom = tl.full([BLOCK_R], 0.0, tl.float32)
    acc = tl.full([BLOCK_R, HEAD_DIM], 0.0, tl.float32)
    start = split * SPLIT
    for offset in range(0, SPLIT, BLOCK_N):
        n = start + offset + tl.arange(0, BLOCK_N)
        key_ok = n < length
        k = tl.load(
            k_ptr + b * sk_b + h * sk_h + n[:, None] * sk_s + d[None, :], mask=key_ok[:, None], other=0.0
        )
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale
        bias = tl.load(
            bias_ptr + b * sb_b + r[:, None] * sb_r + n[None, :],
            mask=row_ok[:, None] & key_ok[None, :],
            other=float("-inf"),
        )
        s = s + bias.to(tl.float32)
        m_new = tl.maximum(m, tl.reduce(s, 1, _larger))
        # A row with every key so far masked keeps m = -inf; shift it by 0 so that exp gives 0, not NaN.
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp(s - shift[:, None])
        alpha = tl.exp(m - shift)
        denom = denom * alpha + tl.reduce(p, 1, _plus)
        v = tl.load(
            v_ptr + b * sv_b + h * sv_h + n[:, None] * sv_s + d[None, :], mask=key_ok[:, None], other=0.0
        )
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m = m_new
    # Partials are [b, n_kv, splits, rows(, head_dim)], contiguous.
    at = (bh * n_splits + split) * rows + r
    tl.store(m_ptr + at, m, mask=row_ok)
    tl.store(denom_ptr + at, denom, mask=row_ok)
    tl.store(acc_ptr + at[:, None] * HEAD_DIM + d[None, :], acc, mask=row_ok[:, None])


def split_count(length: int) -> int:
    """Splits of a cache of `length` slots (a SymInt under torch.compile: plain integer arithmetic)."""
    return (length + SPLIT_LEN - 1) // SPLIT_LEN


@torch.library.custom_op("orl::split_kv_partials", mutates_args=())
def split_kv_partials(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each split's (acc [b, Hkv, splits, R, d], m, denom [b, Hkv, splits, R]) for queries q [b, Hkv, R, d]
    (the query groups stacked as rows) over k, v [b, Hkv, S, d] under the additive bias [b, 1, R, S]."""
    b, n_kv, rows, head_dim = q.shape
    length = k.shape[2]
    if k.stride(-1) != 1 or v.stride(-1) != 1 or q.stride(-1) != 1 or bias.stride(-1) != 1:
        raise ValueError("split_kv_partials: q, k, v and bias need a contiguous last dimension")
    if head_dim & (head_dim - 1) or head_dim < 16:
        raise ValueError(f"split_kv_partials: head_dim {head_dim} is not a power of two >= 16")
    splits = split_count(length)
    acc = q.new_empty((b, n_kv, splits, rows, head_dim), dtype=torch.float32)
    m = q.new_empty((b, n_kv, splits, rows), dtype=torch.float32)
    denom = torch.empty_like(m)
    block_r = min(MAX_BLOCK_R, max(16, triton.next_power_of_2(rows)))
    grid = (b * n_kv, triton.cdiv(rows, block_r), splits)
    _split_kv_kernel[grid](
        q, k, v, bias, acc, m, denom,
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), bias.stride(0), bias.stride(2),
        n_kv, rows, length, head_dim**-0.5,
        SPLIT=SPLIT_LEN, BLOCK_R=block_r, BLOCK_N=BLOCK_N, HEAD_DIM=head_dim,
        PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
        num_warps=4,
    )  # fmt: skip
    return acc, m, denom


@split_kv_partials.register_fake
def _split_kv_partials_shape(q, k, v, bias):
    b, n_kv, rows, head_dim = q.shape
    splits = split_count(k.shape[2])
    m = q.new_empty((b, n_kv, splits, rows), dtype=torch.float32)
    return q.new_empty((b, n_kv, splits, rows, head_dim), dtype=torch.float32), m, torch.empty_like(m)


def combine_splits(
    acc: torch.Tensor, m: torch.Tensor, denom: torch.Tensor, dtype: torch.dtype
) -> torch.Tensor:
    """The attention output [b, Hkv, R, d] from the splits' partials (module docstring; denom is l)."""
    weight = torch.exp(m - m.amax(dim=2, keepdim=True))
    return ((acc * weight[..., None]).sum(2) / (denom * weight).sum(2)[..., None]).to(dtype)


def split_kv_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(d) + bias) v for stacked queries q [b, Hkv, R, d]: SDPA's result, split-KV."""
    return combine_splits(*split_kv_partials(q, k, v, bias), q.dtype)
