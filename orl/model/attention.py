"""Attention over an explicit mask, as every forward of the transformer (orl/model/transformer.py) runs it:
the mask as one additive bias per forward, the query heads of a KV group stacked so that SDPA's
memory-efficient kernel (or, for a CUDA decoding step, the split-KV kernel) runs grouped-query
attention with a mask, and the process-wide choice of SDPA's backends.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def attention_bias(
    mask: torch.Tensor | None, group: int, dtype: torch.dtype, suffix_of: int | None = None
) -> torch.Tensor | None:
    """The bool mask [b, t, s] (True: the query may read the key) as the additive bias grouped_attention
    takes: [b, 1, G·t, s], 0 where allowed and -inf elsewhere, its rows repeated for the G query heads
    of a group (row g·t + i is query i of group member g). None stays None (causal).

    With `suffix_of` = S > t the t queries are the last t of S: the bias has G·S rows, theirs last in each
    member's S (the others 0), and grouped_attention runs S query rows per member (see there).

    Built once per forward: every layer reads the same bias, and SDPA would otherwise turn a bool mask
    into this float bias in every layer (on CUDA two kernels a layer, with the repeat).
    """
    if mask is None:
        return None
    bias = torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, float("-inf"))
    b, t, s = mask.shape
    if suffix_of is not None and suffix_of > t:
        bias = torch.cat([bias.new_zeros(b, suffix_of - t, s), bias], dim=1)
    return bias[:, None].repeat(1, 1, group, 1)


def grouped_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    """Grouped-query attention: q [b, Hq, t, d] over k, v [b, Hkv, s, d], Hq a multiple of Hkv.

    Query head h reads key/value head h // (Hq / Hkv). Without a bias (causal AR training) SDPA's own
    `enable_gqa` shares the key/value heads. With an explicit bias (`attention_bias`) it is not used: on
    CUDA the flash kernel takes no mask and the memory-efficient kernel no `enable_gqa`, so SDPA would
    fall back to its math kernel, which builds float copies of K and V for every layer at every step.
    Instead the G query heads of one group are stacked along the query axis (t -> G·t), as the bias's
    rows already are: plain multi-head attention over the Hkv heads, which the memory-efficient kernel
    runs, with the same result (each stacked query row still sees exactly its own mask row).

    A bias laid out for S > t rows per member (attention_bias's `suffix_of`: the queries are the last t
    of a sequence whose other positions sit in the cache) runs S rows per member, the others zero, and
    returns the last t. SDPA's CPU kernel tiles query rows by their index, and a row's result depends on
    its place in its tile (measured: a block's 16 queries alone differ in the last bits from the same rows
    of a forward over the whole sequence, at key lengths 17, 33, 49, ...); at its index in S rows it
    is computed exactly as that forward computes it.
    """
    b, n_heads, t, d = q.shape
    n_kv = k.shape[1]
    if bias is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=n_heads != n_kv)
    group = n_heads // n_kv
    rows = bias.shape[-2] // group
    if bias.shape[-2] != group * rows or rows < t:
        raise ValueError(
            f"attention bias has {bias.shape[-2]} rows, expected {group} x {t} or more (attention_bias)"
        )
    if rows > t:
        stacked = q.reshape(b, n_kv, group, t, d)
        stacked = torch.cat([stacked.new_zeros(b, n_kv, group, rows - t, d), stacked], dim=3)
        out = F.scaled_dot_product_attention(stacked.reshape(b, n_kv, group * rows, d), k, v, attn_mask=bias)
        return out.reshape(b, n_kv, group, rows, d)[:, :, :, rows - t :].reshape(b, n_heads, t, d)
    stacked = q.reshape(b, n_kv, group * t, d)  # heads kv·G + g -> rows g·t + i of kv head `kv`
    if splits_the_cache(stacked, k):
        from orl.kernels.triton_attention import split_kv_attention  # triton: CUDA installs only

        return split_kv_attention(stacked, k, v, bias).reshape(b, n_heads, t, d)
    return F.scaled_dot_product_attention(stacked, k, v, attn_mask=bias).reshape(b, n_heads, t, d)


SPLIT_KV_MAX_ROWS = 128  # stacked query rows up to which a CUDA decoding step splits the cache


def splits_the_cache(stacked: torch.Tensor, k: torch.Tensor) -> bool:
    """Whether attention runs split-KV (orl/kernels/triton_attention.py) instead of SDPA: on CUDA, for a
    decoding step's few stacked query rows against a longer cache, without autograd (the kernel has no
    backward). SDPA's memory-efficient kernel walks the whole cache in one thread block per key/value
    head there (a quarter of a Qwen3-4B step on an H200); a prefill's many rows fill the GPU without it."""
    rows, length, head_dim = stacked.shape[2], k.shape[2], stacked.shape[3]
    return (
        stacked.is_cuda
        and rows <= SPLIT_KV_MAX_ROWS < length
        and head_dim >= 16
        and head_dim & (head_dim - 1) == 0
        and not (torch.is_grad_enabled() and stacked.requires_grad)
    )


def avoid_per_length_attention_plans(device: torch.device) -> None:
    """On CUDA, leave cuDNN out of scaled_dot_product_attention's backends (process-wide).

    cuDNN attention builds an execution plan for every new sequence length. Batch-1
    decoding meets a new prompt length on almost every request, and the reference
    decoder a new length at every block, so planning swamps the attention itself.
    Measured on an H200 (bf16, tiny ORL checkpoint, 8 TinyCode prompts): the reference
    decoder ran at 97 tokens/s on first-seen lengths and 1,317 tokens/s when the same
    lengths came again; without cuDNN, 970-1,490 tokens/s on both passes. The flash,
    memory-efficient and math backends need no per-shape planning.
    """
    if device.type == "cuda":
        torch.backends.cuda.enable_cudnn_sdp(False)
