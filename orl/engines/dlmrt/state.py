"""The decoding state of dlmrt: every tensor one request touches, preallocated once.

All buffers have static shapes and live on the device for the engine's lifetime;
a request only writes into them. That is what lets the same step code run
eagerly, under torch.compile (one compilation per shape, not per request) and
inside a captured CUDA graph (which replays fixed memory addresses).

The cache length is a bucket, not the request's exact length (orl/engines/capture.py
`cache_bucket`): one state per bucket, each compiled or captured once.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from orl.model.transformer import KVCache, ModelConfig

# Per-step statistics a chunk records when step logging is on (columns of DecodeState.log).
LOG_COLUMNS = ("committed", "masked_before", "mean_entropy", "mean_confidence")


@dataclass
class DecodeState:
    """Static buffers of one batch of requests (batch b, block B, cache length L, vocabulary V)."""

    cache: KVCache  # keys/values [layers, b, kv_heads, L, head_dim]
    seq: torch.Tensor  # [b, L] token id at every slot: prompt, then generated blocks
    tokens: torch.Tensor  # [b, B] current block: committed ids, [MASK] elsewhere
    masked: torch.Tensor  # [b, B] bool, still masked
    generated: (
        torch.Tensor
    )  # [b, B] bool, completion positions (False on the prompt's tail in SDAR's first block)
    probs: torch.Tensor  # [b, B, V] float32, the previous step's distributions (residual context)
    entropy: torch.Tensor  # [b, B] float32, their entropies
    start: torch.Tensor  # [] long, slot of the current block's first token
    mask_origin: (
        torch.Tensor
    )  # [] long, where the block-causal mask counts blocks from (orl/decoding/layout.py)
    nfe: torch.Tensor  # [b] long, steps that did work (some position masked when the step began)
    status: torch.Tensor  # [3] long: block done, block finished with <eos>, total NFE; the one host read
    log: torch.Tensor  # [S, b, len(LOG_COLUMNS)] float32, per-step statistics of the last chunk

    @classmethod
    def allocate(
        cls,
        config: ModelConfig,
        *,
        batch: int,
        cache_len: int,
        steps: int,
        device,
        dtype: torch.dtype,
        block: int | None = None,
    ) -> DecodeState:
        """Buffers for blocks of `block` tokens (default: the checkpoint's block size)."""
        B, V = block or config.block_size, config.vocab_size
        long = dict(device=device, dtype=torch.long)
        return cls(
            cache=KVCache.allocate(config, batch, cache_len, device, dtype),
            seq=torch.zeros(batch, cache_len, **long),
            tokens=torch.zeros(batch, B, **long),
            masked=torch.zeros(batch, B, device=device, dtype=torch.bool),
            generated=torch.ones(batch, B, device=device, dtype=torch.bool),
            probs=torch.zeros(batch, B, V, device=device, dtype=torch.float32),
            entropy=torch.zeros(batch, B, device=device, dtype=torch.float32),
            start=torch.zeros((), **long),
            mask_origin=torch.zeros((), **long),
            nfe=torch.zeros(batch, **long),
            status=torch.zeros(3, **long),
            log=torch.zeros(steps, batch, len(LOG_COLUMNS), device=device, dtype=torch.float32),
        )

    @property
    def cache_len(self) -> int:
        return self.cache.max_len
