"""config.json of the checkpoint families this harness runs: read, validate, write.

Families (docs/method.md §5), all one Qwen3-style model (orl.model.transformer):
- `Qwen3ForCausalLM`: the AR model, a plain transformers Qwen3 config;
- `OrlBlockDiffusionLM`: ours, Qwen3 fields plus attention_mode, block_size,
  mask_token_id, residual_alpha; blocks start after the prompt;
- `SDARForCausalLM` (SDAR, TraDo; `model_type: sdar`): Qwen3 fields and weight
  names one to one, plus block_size and mask_token_id; blocks at absolute
  positions. A `block_layout` field, which SDAR's own code ignores, overrides
  that: our exports of after-prompt checkpoints carry it (orl.model.export).

Validation happens before anything is allocated, and every error names the
file and the field: a value of the wrong type (`hidden_size: true`,
`head_dim: "32"`, `vocab_size: 1e9`) fails here; sizes that type-check but do
not match the weights fail against the safetensors header (orl.model.weights).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from orl.errors import CheckpointError
from orl.io import read_json_object
from orl.model.masks import BLOCK_LAYOUTS
from orl.model.transformer import ModelConfig

AR_ARCH = "Qwen3ForCausalLM"
DIFFUSION_ARCH = "OrlBlockDiffusionLM"
SDAR_ARCH = "SDARForCausalLM"
SUPPORTED_ARCHS = (AR_ARCH, DIFFUSION_ARCH, SDAR_ARCH)
CONFIG = "config.json"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# The block layout each block-diffusion family was trained with, unless its config says otherwise.
DEFAULT_LAYOUT = {DIFFUSION_ARCH: "after-prompt", SDAR_ARCH: "absolute"}
_MISSING = object()


def read_json_config(path: Path, missing_hint: str) -> dict:
    """A config.json as a dict, or a CheckpointError naming the file (any architecture)."""
    if not path.is_file():
        raise CheckpointError(f"{path}: file not found ({missing_hint})")
    return read_json_object(path)


def architecture(config: dict, path: Path) -> str:
    archs = config.get("architectures")
    if not isinstance(archs, list) or not archs or archs[0] not in SUPPORTED_ARCHS:
        raise CheckpointError(
            f"{path}: architectures: unsupported {json.dumps(archs)}; supported: {', '.join(SUPPORTED_ARCHS)}"
        )
    return archs[0]


def read_config(ckpt_dir: str | Path) -> dict:
    """config.json of a checkpoint of a supported family, validated; the raw dict."""
    if not Path(ckpt_dir).is_dir():
        raise CheckpointError(f"{ckpt_dir}: checkpoint directory not found")
    path = Path(ckpt_dir) / CONFIG
    config = read_json_config(
        path, "a checkpoint needs config.json, its safetensors weights and tokenizer.json"
    )
    model_config_from_hf(config, path)
    return config


def is_diffusion_arch(arch: str) -> bool:
    return arch in DEFAULT_LAYOUT


class _Fields:
    """Typed reads of config.json fields; each failure names the file and the field."""

    def __init__(self, config: dict, path: Path):
        self.config, self.path = config, path

    def fail(self, name: str, expected: str):
        value = self.config.get(name)
        raise CheckpointError(f"{self.path}: {name}: expected {expected}, got {json.dumps(value)}")

    def get(self, name: str, default=_MISSING):
        value = self.config.get(name)
        if value is None:
            if default is _MISSING:
                raise CheckpointError(f"{self.path}: {name}: missing; expected a value")
            return default
        return value

    def integer(self, name: str, default=_MISSING, minimum: int = 1) -> int:
        value = self.get(name, default)
        # bool is an int in Python; `hidden_size: true` must not read as 1.
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            self.fail(name, "a positive integer" if minimum == 1 else f"an integer >= {minimum}")
        return value

    def number(self, name: str, default=_MISSING, minimum: float = 0.0, strict: bool = True) -> float:
        value = self.get(name, default)
        bad = not isinstance(value, (int, float)) or isinstance(value, bool)
        if bad or (value <= minimum if strict else value < minimum):
            self.fail(name, f"a number {'>' if strict else '>='} {minimum:g}")
        return float(value)

    def boolean(self, name: str, default: bool) -> bool:
        value = self.get(name, default)
        if not isinstance(value, bool):
            self.fail(name, "true or false")
        return value

    def choice(self, name: str, allowed: tuple, default=_MISSING):
        value = self.get(name, default)
        if value not in allowed:
            self.fail(name, "one of " + ", ".join(json.dumps(a) for a in allowed))
        return value


def _rope_theta(fields: _Fields) -> float:
    """RoPE base from `rope_theta` (transformers < 5, SDAR) or `rope_parameters` (transformers 5)."""
    config, path = fields.config, fields.path
    for name in ("rope_scaling", "rope_parameters"):
        rope = config.get(name)
        if rope is None:
            continue
        if not isinstance(rope, dict):
            fields.fail(name, "an object or null")
        kind = rope.get("rope_type", rope.get("type", "default"))
        if kind != "default":
            raise CheckpointError(
                f"{path}: {name}.rope_type: {json.dumps(kind)} is not supported; "
                "only default RoPE (as every Qwen3 / SDAR release uses)"
            )
    rope = config.get("rope_parameters") or {}
    if config.get("rope_theta") is None and rope.get("rope_theta") is not None:
        return _Fields(rope, f"{path}: rope_parameters").number("rope_theta")
    return fields.number("rope_theta", 10000.0)


def model_config_from_hf(config: dict, path: Path) -> ModelConfig:
    """The ModelConfig a config.json describes, every field checked (types, ranges, consistency)."""
    arch = architecture(config, path)
    f = _Fields(config, path)
    hidden, heads = f.integer("hidden_size"), f.integer("num_attention_heads")
    kv_heads = f.integer("num_key_value_heads", heads)
    if heads % kv_heads:
        raise CheckpointError(
            f"{path}: num_key_value_heads: {kv_heads} does not divide num_attention_heads {heads}"
        )
    if config.get("head_dim") is None and hidden % heads:
        raise CheckpointError(
            f"{path}: head_dim: missing, and hidden_size {hidden} is not a multiple of "
            f"num_attention_heads {heads}"
        )
    head_dim = f.integer("head_dim", hidden // heads)
    if head_dim % 2:
        f.fail("head_dim", "an even integer (RoPE rotates pairs)")
    f.choice("hidden_act", ("silu",), "silu")
    if f.boolean("use_sliding_window", False):
        f.fail("use_sliding_window", "false (sliding-window attention is not supported)")
    layer_types = config.get("layer_types")
    if layer_types is not None and (
        not isinstance(layer_types, list) or any(t != "full_attention" for t in layer_types)
    ):
        f.fail("layer_types", 'a list of "full_attention"')
    for name in ("eos_token_id", "pad_token_id", "bos_token_id"):
        value = config.get(name)
        ids = value if isinstance(value, list) else [value]
        if value is not None and not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in ids
        ):
            f.fail(name, "a token id, a list of token ids, or null")
    config_dtype(config, path)
    values = dict(
        vocab_size=f.integer("vocab_size"),
        hidden_size=hidden,
        intermediate_size=f.integer("intermediate_size"),
        num_hidden_layers=f.integer("num_hidden_layers"),
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        rope_theta=_rope_theta(f),
        rms_norm_eps=f.number("rms_norm_eps", 1e-6),
        max_position_embeddings=f.integer("max_position_embeddings"),
        tie_word_embeddings=f.boolean("tie_word_embeddings", False),
        attention_bias=f.boolean("attention_bias", False),
    )
    if is_diffusion_arch(arch):
        f.choice("attention_mode", ("block-causal",), "block-causal")
        block = f.integer("block_size")
        if block > values["max_position_embeddings"]:
            f.fail("block_size", f"at most max_position_embeddings ({values['max_position_embeddings']})")
        mask = config.get("mask_token_id")
        if arch == DIFFUSION_ARCH and mask is None:
            raise CheckpointError(
                f"{path}: mask_token_id: a diffusion checkpoint needs an integer mask token id"
            )
        if mask is not None and (
            not isinstance(mask, int) or isinstance(mask, bool) or not 0 <= mask < values["vocab_size"]
        ):
            f.fail("mask_token_id", f"a token id below vocab_size ({values['vocab_size']})")
        values.update(
            attention_mode="block-causal",
            block_size=block,
            mask_token_id=mask,
            block_layout=f.choice("block_layout", BLOCK_LAYOUTS, DEFAULT_LAYOUT[arch]),
            residual_alpha=f.number("residual_alpha", 0.0, strict=False),
            residual_adapter=_residual_adapter(config, path, values["hidden_size"]),
        )
    else:
        values.update(attention_mode="causal", mask_token_id=None)
    return ModelConfig(**values)


def _residual_adapter(config: dict, path: Path, hidden: int) -> dict | None:
    """config.json's residual_adapter (docs/method.md §2): null / absent, or {"form", "shape": [d, d]}."""
    value = config.get("residual_adapter")
    if value is None:
        return None
    if not isinstance(value, dict) or value.get("shape") != [hidden, hidden]:
        raise CheckpointError(
            f'{path}: residual_adapter: expected null or {{"form": ..., "shape": '
            f"[{hidden}, {hidden}]}} (hidden_size), got {json.dumps(value)}"
        )
    return dict(value)


def config_dtype(config: dict, path: Path) -> torch.dtype:
    """The weights' dtype config.json declares (`torch_dtype`, or transformers 5's `dtype`); float32 if
    none."""
    name = "torch_dtype" if config.get("torch_dtype") is not None else "dtype"
    value = config.get(name) or "float32"
    if not isinstance(value, str) or value not in DTYPES:
        raise CheckpointError(f"{path}: {name}: expected one of {', '.join(DTYPES)}, got {json.dumps(value)}")
    return DTYPES[value]


def hf_config(config: ModelConfig, arch: str, dtype: torch.dtype = torch.float32) -> dict:
    """config.json content for `arch`: Qwen3Config fields, plus the block-diffusion fields for a dLLM.

    The Qwen3 part is what transformers' Qwen3Config reads (both the transformers 5
    `rope_parameters` and the older `rope_theta`, so either version loads it).
    """
    dtype_name = str(dtype).replace("torch.", "")
    out = {
        "architectures": [arch],
        "model_type": "sdar" if arch == SDAR_ARCH else "qwen3",
        "vocab_size": config.vocab_size,
        "hidden_size": config.hidden_size,
        "intermediate_size": config.intermediate_size,
        "num_hidden_layers": config.num_hidden_layers,
        "num_attention_heads": config.num_attention_heads,
        "num_key_value_heads": config.num_key_value_heads,
        "head_dim": config.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": config.max_position_embeddings,
        "rms_norm_eps": config.rms_norm_eps,
        "rope_theta": config.rope_theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": config.rope_theta},
        "tie_word_embeddings": config.tie_word_embeddings,
        "attention_bias": config.attention_bias,
        "attention_dropout": 0.0,
        "use_sliding_window": False,
        "sliding_window": None,
        "initializer_range": 0.02,
        "use_cache": True,
        "bos_token_id": config.eos_token_id,
        "eos_token_id": config.eos_token_id,
        "pad_token_id": config.pad_token_id,
        "torch_dtype": dtype_name,
        "dtype": dtype_name,
    }
    if arch in DEFAULT_LAYOUT:
        out.update(
            block_size=config.block_size,
            mask_token_id=config.mask_token_id,
            residual_alpha=config.residual_alpha,
        )
        if config.residual_adapter is not None:
            out["residual_adapter"] = dict(config.residual_adapter)
        out["block_layout"] = config.block_layout
        if arch == DIFFUSION_ARCH:
            out["attention_mode"] = "block-causal"
    return out
