"""One Qwen3-style transformer for both autoregressive and block-diffusion use.

RMSNorm, rotary position embeddings, SwiGLU MLP, grouped-query attention with
RMSNorm on queries and keys (Qwen3), optional tied embeddings. Parameter names
follow transformers' Qwen3ForCausalLM so an AR checkpoint loads there unchanged.

The attention pattern is not baked in: `forward` takes an explicit boolean
mask (True = may attend) built by orl.model.masks, so the same weights run
`causal` (AR) or `block-causal` (diffusion) and the engine can pass static
shapes. With a KVCache the new keys/values are written in place at `slots`
and the queries attend over the whole preallocated cache (orl/model/attention.py runs the attention).

Checkpoint families are switches of this one model, never copies of it
(docs/method.md §5): Qwen3 is `causal`; our block-diffusion model and SDAR / TraDo
are `block-causal` and differ only in `block_layout`, which says where blocks
sit and so which mask the decoders build (masks.layout_block_limits).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from orl.model.attention import attention_bias, grouped_attention
from orl.model.shape import ModelShape


@dataclass
class ModelConfig(ModelShape):
    """A whole model: its shape (orl/model/shape.py, the one declaration of the sizes) plus vocabulary,
    RoPE, tying and the block-diffusion fields."""

    vocab_size: int = 1024
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = True
    attention_bias: bool = (
        False  # biases on q/k/v/o projections (Qwen3's attention_bias; off in every release)
    )
    # Block diffusion (docs/method.md §1-2, §5); ignored by the AR model.
    attention_mode: str = "causal"  # "causal" or "block-causal"
    # Where blocks sit: "after-prompt" (ours: the prompt attends causally, block 0 starts right after it)
    # or "absolute" (SDAR: blocks at multiples of block_size, the prompt inside blocks, bidirectional
    # inside a block and block-causal across blocks, prompt included).
    block_layout: str = "after-prompt"
    block_size: int = 16
    mask_token_id: int | None = None
    residual_alpha: float = 0.0  # α of the residual context (docs/method.md §2); 0 = off (a base dLLM)
    # The residual adapter g_ϕ ORL adds (docs/method.md §2): {"form": ADAPTER_FORM, "shape": [d, d]}; None =
    # no adapter, and then α > 0 is the version-1 entropy-weighted form E[MASK] + α(1 − H/log V)·z.
    residual_adapter: dict | None = None
    eos_token_id: int = 1
    pad_token_id: int = 0

    @classmethod
    def from_dict(cls, values: dict) -> ModelConfig:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names})

    def to_dict(self) -> dict:
        return asdict(self)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in float32 as Qwen3 does, then return to the input dtype.
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


def rope_tables(positions: torch.Tensor, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin of shape [batch, 1, seq, head_dim] for integer positions [batch, seq]."""
    inv_freq = 1.0 / (
        theta ** (torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim)
    )
    angles = positions.float()[..., None] * inv_freq  # [b, t, d/2]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos()[:, None], angles.sin()[:, None]


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return (x * cos + rotated * sin).to(x.dtype)


@dataclass
class KVCache:
    """Static key/value buffers, one [batch, kv_heads, max_len, head_dim] tensor per layer, written in place.

    One tensor per layer, not one 5-D tensor: torch.compile writes a separate buffer in
    place, but views into one shared buffer make it copy the whole cache on every call.
    """

    k: list[torch.Tensor]
    v: list[torch.Tensor]

    @classmethod
    def allocate(cls, config: ModelConfig, batch: int, max_len: int, device, dtype) -> KVCache:
        shape = (batch, config.num_key_value_heads, max_len, config.head_dim)
        layers = range(config.num_hidden_layers)
        return cls(
            [torch.zeros(shape, device=device, dtype=dtype) for _ in layers],
            [torch.zeros(shape, device=device, dtype=dtype) for _ in layers],
        )

    @property
    def max_len(self) -> int:
        return self.k[0].shape[2]


class Attention(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.n_heads, self.n_kv = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = config.head_dim
        bias = config.attention_bias
        self.q_proj = nn.Linear(config.hidden_size, self.n_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(config.hidden_size, self.n_kv * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(config.hidden_size, self.n_kv * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, config.hidden_size, bias=bias)
        self.q_norm = RMSNorm(self.head_dim, config.rms_norm_eps)
        self.k_norm = RMSNorm(self.head_dim, config.rms_norm_eps)
        # q/k/v as one linear, set by orl.model.fusion on an engine's copy of the model (never saved).
        self.qkv_proj: nn.Module | None = None

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v [b, t, width]: one GEMM when fused, else three."""
        if self.qkv_proj is None:
            return self.q_proj(x), self.k_proj(x), self.v_proj(x)
        kv = self.n_kv * self.head_dim
        return self.qkv_proj(x).split([self.n_heads * self.head_dim, kv, kv], dim=-1)

    def forward(self, x, cos, sin, bias, k_cache: torch.Tensor | None, v_cache, slots: torch.Tensor | None):
        """Attention of x [b, t, d] under `bias` (attention_bias; None: causal); with a cache, this layer's
        own key/value buffers (KVCache.k[i], .v[i]).

        The buffers come in as tensors, not as the cache and a layer index, so that every layer runs
        the same code with the same guards: a compiled layer serves them all (orl/engines/capture.py).
        """
        b, t, _ = x.shape
        q, k, v = self.project(x)
        q = self.q_norm(q.view(b, t, self.n_heads, self.head_dim)).transpose(1, 2)
        k = self.k_norm(k.view(b, t, self.n_kv, self.head_dim)).transpose(1, 2)
        v = v.view(b, t, self.n_kv, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if k_cache is not None:
            # Write this step's keys/values at their slots, then attend over the whole buffer;
            # the bias hides slots that are not (yet) valid for each query.
            k_cache.index_copy_(2, slots, k.to(k_cache.dtype))
            v_cache.index_copy_(2, slots, v.to(v_cache.dtype))
            k, v = k_cache.to(q.dtype), v_cache.to(q.dtype)
        out = grouped_attention(q, k, v, bias)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, self.n_heads * self.head_dim))


class MLP(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.gate_up_proj: nn.Module | None = None  # gate and up as one linear (orl.model.fusion)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gate_up_proj is None:
            gate, up = self.gate_proj(x), self.up_proj(x)
        else:
            gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class DecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Attention(config)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MLP(config)

    def forward(self, x, cos, sin, bias, k_cache, v_cache, slots):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, bias, k_cache, v_cache, slots)
        return x + self.mlp(self.post_attention_layernorm(x))


class Backbone(nn.Module):
    """The `model.` part of Qwen3ForCausalLM: embeddings, layers, final norm."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)


ADAPTER_FORM = "W2·SiLU(W1·RMSNorm(z))"
ADAPTER_INIT_SEED = 0


def adapter_spec(config: ModelConfig) -> dict:
    """What config.json says of a residual adapter of this model's width."""
    return {"form": ADAPTER_FORM, "shape": [config.hidden_size, config.hidden_size]}


class ResidualAdapter(nn.Module):
    """g_ϕ(z) = W₂·SiLU(W₁·RMSNorm(z)) (docs/method.md §2, ours), W₂ zero at creation so that a freshly
    added adapter contributes exactly 0 and the model decodes as with no residual."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        d = config.hidden_size
        self.norm = RMSNorm(d, config.rms_norm_eps)
        self.w1 = nn.Linear(d, d, bias=False)
        self.w2 = nn.Linear(d, d, bias=False)
        if not self.w1.weight.is_meta:
            # W₁ from its own generator, not the global one: every rank of a sharded run (which shards
            # each rank's own tensor) and a single process start from the same adapter.
            draw = torch.randn(d, d, generator=torch.Generator().manual_seed(ADAPTER_INIT_SEED)) * d**-0.5
            with torch.no_grad():
                self.w1.weight.copy_(draw)
        nn.init.zeros_(self.w2.weight)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(self.norm(z))))


class Transformer(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.model = Backbone(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.apply(self._init_weights)
        self.residual_adapter = None
        if config.residual_adapter is not None:
            self.add_residual_adapter()
        # Recompute each layer's activations in the backward pass instead of keeping them (training
        # at scale, orl/train/distributed.py): memory for one layer's activations instead of all.
        self.activation_checkpointing = False
        # How the residual context's z = P @ E is multiplied (orl.decoding.residual): torch's matmul;
        # dlmrt's copy of the model takes oneDNN's where its linears go through oneDNN on the CPU.
        self.residual_matmul = torch.matmul

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def add_residual_adapter(self) -> ResidualAdapter:
        """Add a fresh (zero-output) residual adapter, as ORL does to a base dLLM; recorded in the config."""
        shape = adapter_spec(self.config)["shape"]
        if self.config.residual_adapter is not None and self.config.residual_adapter.get("shape") != shape:
            raise ValueError(
                f"residual_adapter: shape {self.config.residual_adapter.get('shape')} does not match "
                f"hidden_size {self.config.hidden_size}"
            )
        device = self.model.embed_tokens.weight.device
        dtype = self.model.embed_tokens.weight.dtype
        self.residual_adapter = ResidualAdapter(self.config).to(device=device, dtype=dtype)
        self.config.residual_adapter = adapter_spec(self.config)
        return self.residual_adapter

    def residual_term(self, z: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """What the residual context adds to a position's input embedding (docs/method.md §2): w·g_ϕ(z) with
        the adapter (w = α where masked), else the entropy-weighted form w·z; z is detached (sg)."""
        z = z.detach().to(self.model.embed_tokens.weight.dtype)
        out = self.residual_adapter(z) if self.residual_adapter is not None else z
        return weight[..., None].to(out.dtype) * out

    @property
    def embedding(self) -> torch.Tensor:
        """The input embedding matrix E (V x d) that residual context mixes over."""
        return self.model.embed_tokens.weight

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        *,
        inputs_embeds: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
        slots: torch.Tensor | None = None,
        residual: torch.Tensor | None = None,
        residual_weight: torch.Tensor | None = None,
        logits_to_keep: int | None = None,
        suffix_of: int | None = None,
    ) -> torch.Tensor:
        """Logits [batch, seq, vocab] (the last `logits_to_keep` positions only, when given).

        Args:
            input_ids: [b, t] token ids, or None when `inputs_embeds` is given (residual context).
            inputs_embeds: [b, t, d] input embeddings overriding the token lookup.
            positions: [b, t] RoPE positions; defaults to 0..t-1.
            mask: [b, t, s] bool, True where query may attend key (s = t, or the cache length);
                None means plain causal attention over the inputs (AR training fast path).
            cache: static KV buffers; when given, keys/values are written at `slots` ([t], shared
                by the batch) and attention runs over all cache slots.
            residual: [b, t, d] the pre-adapter residual z = P^{(k-1)} @ E (docs/method.md §2), with
                `residual_weight` [b, t] (α or the entropy weight where masked, 0 elsewhere): the forward
                adds `residual_term(z, w)` to the token embeddings, so E[MASK] + α·g_ϕ(z) is formed here,
                where a sharded embedding and adapter are whole and the adapter gets its gradient.

            logits_to_keep: the LM head runs on the last this many positions only (a block decoder reads
                the block's logits; the context's would be computed for nothing).
            suffix_of: the inputs are the last t positions of a sequence this long whose other positions
                are already in `cache`: attention runs as a forward over the whole sequence runs it, so
                the logits are that forward's, bit for bit (grouped_attention).
        """
        x = self.model.embed_tokens(input_ids) if inputs_embeds is None else inputs_embeds
        if residual is not None:
            term = self.residual_term(residual, residual_weight)
            with torch.no_grad():  # the adapter's output norm over the positions it feeds (ORL's log)
                fed = residual_weight != 0
                self.residual_norm_stats = ((term.float().norm(dim=-1) * fed).sum(), fed.sum())
            x = x + term.to(x.dtype)
        b, t = x.shape[:2]
        if positions is None:
            positions = torch.arange(t, device=x.device).expand(b, t)
        cos, sin = rope_tables(positions, self.config.head_dim, self.config.rope_theta)
        cos, sin = cos.to(x.dtype), sin.to(x.dtype)
        group = self.config.num_attention_heads // self.config.num_key_value_heads
        bias = attention_bias(mask, group, x.dtype, suffix_of)
        for i, layer in enumerate(self.model.layers):
            k_cache, v_cache = (cache.k[i], cache.v[i]) if cache is not None else (None, None)
            if self.activation_checkpointing and torch.is_grad_enabled():
                x = checkpoint(layer, x, cos, sin, bias, k_cache, v_cache, slots, use_reentrant=False)
            else:
                x = layer(x, cos, sin, bias, k_cache, v_cache, slots)
        if logits_to_keep is not None:
            x = x[:, -logits_to_keep:]
        return self.lm_head(self.model.norm(x))


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
