"""ORL's residual context: a masked position carries the previous step's prediction (METHOD.md §2).

    e_i = E[MASK] + w_i · r_i,   r_i = P_i^{(k-1)} @ E,   w_i = α · (1 − H(P_i^{(k-1)}) / log V)

Committed positions use E[token]. At step 0 of a block r = 0; with α = 0 the residual is off.
"""

from __future__ import annotations

import math

import torch


def residual_context(
    embedding: torch.Tensor, prev_probs: torch.Tensor, prev_entropy: torch.Tensor, alpha: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """ORL's residual r = P^{(k-1)} @ E and its weight w = α·(1 − H(P^{(k-1)}) / log V)."""
    weight = alpha * (1.0 - prev_entropy / math.log(embedding.shape[0]))
    return prev_probs.to(embedding.dtype) @ embedding, weight


def mix_residual(
    embedding: torch.Tensor, tokens: torch.Tensor, masked: torch.Tensor, residual: torch.Tensor,
    weight: torch.Tensor, mask_id: int,
) -> torch.Tensor:
    """Committed positions: E[token]; masked positions: E[MASK] + w·r."""
    mix = embedding[mask_id] + weight[..., None].to(embedding.dtype) * residual
    return torch.where(masked[..., None], mix, embedding[tokens])


def residual_embeddings(
    embedding: torch.Tensor, tokens: torch.Tensor, masked: torch.Tensor, prev_probs: torch.Tensor | None,
    prev_entropy: torch.Tensor | None, alpha: float, mask_id: int,
) -> torch.Tensor:
    """Input embeddings of a block with the residual context, from the previous step's distributions.

    At step 0 (prev_probs None) or with α = 0 just the token embeddings (E[MASK] where masked).
    """
    if prev_probs is None or alpha == 0.0:
        return embedding[tokens]
    residual, weight = residual_context(embedding, prev_probs, prev_entropy, alpha)
    return mix_residual(embedding, tokens, masked, residual, weight, mask_id)
