"""Checkpoints in the Hugging Face layout: config.json, model.safetensors, tokenizer.json.

The AR model's config.json is a valid transformers Qwen3Config
(`model_type: qwen3`, `architectures: [Qwen3ForCausalLM]`), so
`AutoModelForCausalLM.from_pretrained(dir)` loads it and vLLM/SGLang could serve
it. The block-diffusion model keeps the same weights and config fields and adds
its own (attention_mode, block_size, mask_token_id, residual_alpha) under its
own architecture name. Weights are safetensors only: nothing is ever unpickled.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import torch

from orl.errors import CheckpointError
from orl.io import atomic_write_bytes, atomic_write_json
from orl.model.transformer import ModelConfig, Transformer
from orl.tokenizer import Tokenizer, load_tokenizer

AR_ARCH = "Qwen3ForCausalLM"
DIFFUSION_ARCH = "OrlBlockDiffusionLM"
SUPPORTED_ARCHS = (AR_ARCH, DIFFUSION_ARCH)
CONFIG, WEIGHTS, TOKENIZER = "config.json", "model.safetensors", "tokenizer.json"
REQUIRED_FIELDS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                   "num_attention_heads", "num_key_value_heads")


@dataclass
class Checkpoint:
    model: Transformer
    tokenizer: Tokenizer
    config: dict  # the raw config.json
    path: Path

    @property
    def is_diffusion(self) -> bool:
        return self.model.config.attention_mode == "block-causal"

    @property
    def precision(self) -> str:
        quant = self.config.get("quantization_config")
        if quant:
            return f"{quant.get('quant_method', 'quantized')}-{quant.get('mode', '')}".rstrip("-")
        return str(next(self.model.parameters()).dtype).replace("torch.", "")


def hf_config(config: ModelConfig, diffusion: bool) -> dict:
    """config.json content: Qwen3Config fields, plus the diffusion fields for the dLLM."""
    out = {
        "architectures": [DIFFUSION_ARCH if diffusion else AR_ARCH],
        "model_type": "qwen3",
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
        "attention_bias": False,
        "attention_dropout": 0.0,
        "use_sliding_window": False,
        "bos_token_id": config.eos_token_id,
        "eos_token_id": config.eos_token_id,
        "pad_token_id": config.pad_token_id,
        "torch_dtype": "float32",
        "dtype": "float32",
    }
    if diffusion:
        out.update(attention_mode="block-causal", block_size=config.block_size,
                   mask_token_id=config.mask_token_id, residual_alpha=config.residual_alpha)
    return out


def save_checkpoint(model: Transformer, tokenizer: Tokenizer, out_dir: str | Path, *, extra_config: dict | None = None) -> Path:
    """Write the three files atomically; the weights go last-but-one, config.json last."""
    from safetensors.torch import save

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)  # tied to model.embed_tokens.weight, as transformers stores it
    tokenizer.save(out_dir / TOKENIZER)
    atomic_write_bytes(out_dir / WEIGHTS, save(state, metadata={"format": "pt"}))
    config = hf_config(model.config, diffusion=model.config.attention_mode == "block-causal")
    config.update(extra_config or {})
    atomic_write_json(out_dir / CONFIG, config)
    return out_dir


def read_json_config(path: Path, missing_hint: str) -> dict:
    """A config.json as a dict, or a CheckpointError naming the file (any architecture)."""
    if not path.is_file():
        raise CheckpointError(f"{path}: file not found ({missing_hint})")
    try:
        config = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(config, dict):
        raise CheckpointError(f"{path}: expected a JSON object")
    return config


def read_config(ckpt_dir: str | Path) -> dict:
    """config.json of one of our checkpoints, validated (architecture and required fields)."""
    path = Path(ckpt_dir) / CONFIG
    if not Path(ckpt_dir).is_dir():
        raise CheckpointError(f"{ckpt_dir}: checkpoint directory not found")
    config = read_json_config(path, "a checkpoint needs config.json, model.safetensors, tokenizer.json")
    archs = config.get("architectures")
    if not isinstance(archs, list) or not archs or archs[0] not in SUPPORTED_ARCHS:
        raise CheckpointError(f"{path}: architectures: unsupported {archs!r}; expected one of {list(SUPPORTED_ARCHS)}")
    for field in REQUIRED_FIELDS:
        if not isinstance(config.get(field), int) or config[field] <= 0:
            raise CheckpointError(f"{path}: {field}: expected a positive integer, got {config.get(field)!r}")
    if archs[0] == DIFFUSION_ARCH:
        if not isinstance(config.get("mask_token_id"), int):
            raise CheckpointError(f"{path}: mask_token_id: a diffusion checkpoint needs an integer mask token id")
        if not isinstance(config.get("block_size"), int) or config["block_size"] <= 0:
            raise CheckpointError(f"{path}: block_size: expected a positive integer, got {config.get('block_size')!r}")
    return config


def model_config_from_hf(config: dict) -> ModelConfig:
    values = dict(config)
    if "rope_theta" not in values and isinstance(values.get("rope_parameters"), dict):
        values["rope_theta"] = values["rope_parameters"].get("rope_theta", 10000.0)
    values.setdefault("head_dim", values["hidden_size"] // values["num_attention_heads"])
    if config["architectures"][0] == AR_ARCH:
        values["attention_mode"] = "causal"
    return ModelConfig.from_dict(values)


def _read_weights(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load

    if not path.is_file():
        raise CheckpointError(f"{path}: file not found")
    try:
        return load(path.read_bytes())
    except Exception as exc:  # safetensors raises on truncation and bad headers
        raise CheckpointError(f"{path}: cannot read safetensors weights ({exc}); the file may be truncated") from None


def load_checkpoint(ckpt_dir: str | Path, *, device: str | torch.device = "cpu", dtype: torch.dtype | None = None) -> Checkpoint:
    """Load and validate a checkpoint directory; every failure names the file and field."""
    ckpt_dir = Path(ckpt_dir)
    config = read_config(ckpt_dir)
    model_config = model_config_from_hf(config)
    tokenizer = load_tokenizer(ckpt_dir / TOKENIZER)
    if tokenizer.vocab_size > model_config.vocab_size:
        raise CheckpointError(
            f"{ckpt_dir / TOKENIZER}: vocabulary has {tokenizer.vocab_size} tokens but "
            f"{ckpt_dir / CONFIG}: vocab_size is {model_config.vocab_size}; the tokenizer does not match the model"
        )
    if model_config.attention_mode == "block-causal" and tokenizer.mask_id != model_config.mask_token_id:
        raise CheckpointError(
            f"{ckpt_dir / CONFIG}: mask_token_id is {model_config.mask_token_id} but {ckpt_dir / TOKENIZER} "
            f"has [MASK] at {tokenizer.mask_id}"
        )
    state = _read_weights(ckpt_dir / WEIGHTS)
    model = Transformer(model_config)
    quant = config.get("quantization_config")
    if quant:
        from orl.kernels.quantize import prepare_model_for_nvfp4_state_dict

        if quant.get("quant_method") != "nvfp4":
            raise CheckpointError(f"{ckpt_dir / CONFIG}: quantization_config.quant_method: unsupported "
                                  f"{quant.get('quant_method')!r}; expected 'nvfp4'")
        prepare_model_for_nvfp4_state_dict(model, state, mode=quant.get("mode", "w4a16"))
    expected = model.state_dict()
    if model_config.tie_word_embeddings:
        expected.pop("lm_head.weight", None)
        state.pop("lm_head.weight", None)
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise CheckpointError(f"{ckpt_dir / WEIGHTS}: tensors do not match config.json "
                              f"(missing: {missing[:5]}, unexpected: {unexpected[:5]})")
    # The model's own parameter order, not the file's: safetensors versions differ in the key order
    # they return, and the error should name the same tensor whichever wrote the file.
    for name, want in expected.items():
        if tuple(state[name].shape) != tuple(want.shape):
            raise CheckpointError(f"{ckpt_dir / WEIGHTS}: {name}: shape {tuple(state[name].shape)} but config.json "
                                  f"implies {tuple(want.shape)}")
    model.load_state_dict(state, strict=False)
    if dtype is not None:
        model.to(dtype=dtype)
    model.to(device).eval()
    return Checkpoint(model=model, tokenizer=tokenizer, config=config, path=ckpt_dir)


def checkpoint_digest(ckpt_dir: str | Path) -> str | None:
    """sha256 of model.safetensors (the record's ckpt_sha256), None when absent."""
    path = Path(ckpt_dir) / WEIGHTS
    if not path.is_file():
        return None
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
