"""ORL's residual context: a masked position carries the previous step's prediction (docs/method.md §2).

    ẽ_i = E[MASK] + α · g_ϕ(sg(z_i)),   z_i = P_i^{(k-1)} @ E        (the adapter form, version 2)
    ẽ_i = E[MASK] + w_i · z_i,   w_i = α · (1 − H(P_i^{(k-1)}) / log V)   (`entropy-weighted`, version 1)

z is the *pre-adapter residual*; g_ϕ (orl.model.transformer.ResidualAdapter) is part of the model
and runs inside `Transformer.residual_term`, so every decoder (dlmrt, the reference decoder, the ORL
rollout) and the replay form the same input. A checkpoint with an adapter uses the first form; one
without uses the second (α > 0) or none (α = 0, a base dLLM). Committed positions use E[token]; at
step 0 of a block z = 0 and the weight is 0, so the input is exactly E[MASK].
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

FORMS = ("adapter", "entropy-weighted")


def residual_form(config) -> str:
    """The residual form a checkpoint's ModelConfig decodes with."""
    return "adapter" if getattr(config, "residual_adapter", None) is not None else "entropy-weighted"


def residual_context(
    embedding: torch.Tensor,
    prev_probs: torch.Tensor,
    prev_entropy: torch.Tensor,
    alpha: float,
    form: str = "entropy-weighted",
    matmul: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = torch.matmul,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The pre-adapter residual z = P^{(k-1)} @ E and its weight w (α, or α·(1 − H/log V)); `matmul` is
    the model's `residual_matmul` (torch's, or oneDNN's where an engine's linears go through oneDNN)."""
    if form == "adapter":
        weight = torch.full_like(prev_entropy, alpha)
    else:
        weight = alpha * (1.0 - prev_entropy / math.log(embedding.shape[0]))
    return matmul(prev_probs.to(embedding.dtype), embedding), weight


def mix_residual(
    model,
    tokens: torch.Tensor,
    masked: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    mask_id: int,
) -> torch.Tensor:
    """Committed positions: E[token]; masked positions: E[MASK] + the model's residual term of (z, w)."""
    embedding = model.embedding
    mix = embedding[mask_id] + model.residual_term(residual, weight).to(embedding.dtype)
    return torch.where(masked[..., None], mix, embedding[tokens])


def residual_embeddings(
    model,
    tokens: torch.Tensor,
    masked: torch.Tensor,
    prev_probs: torch.Tensor | None,
    prev_entropy: torch.Tensor | None,
    alpha: float,
    mask_id: int,
    form: str = "entropy-weighted",
) -> torch.Tensor:
    """Input embeddings of a block with the residual context, from the previous step's distributions.

    At step 0 (prev_probs None) or with α = 0 just the token embeddings (E[MASK] where masked).
    """
    if prev_probs is None or alpha == 0.0:
        return model.embedding[tokens]
    residual, weight = residual_context(
        model.embedding, prev_probs, prev_entropy, alpha, form, model.residual_matmul
    )
    return mix_residual(model, tokens, masked, residual, weight, mask_id)
