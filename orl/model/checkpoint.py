"""Checkpoints in the Hugging Face layout: config.json, safetensors weights, tokenizer files.

Three families load here (orl.model.config): Qwen3ForCausalLM (AR),
OrlBlockDiffusionLM (ours) and SDARForCausalLM (SDAR / TraDo), single-file
or sharded. Our AR model's config.json is a valid transformers Qwen3Config,
so `AutoModelForCausalLM.from_pretrained(dir)` loads it too.

Loading, in the order that keeps a bad checkpoint from allocating anything:
1. config.json: every field type-checked (orl.model.config);
2. tokenizer files: vocabulary size, eos ids, mask token (orl.tokenizer);
3. safetensors headers: the embedding's shape and the layer count against the
   config, so `num_hidden_layers: 100000` fails before a module is built;
4. the model built on the `meta` device (no memory), NVFP4 linears swapped in
   where the weights are quantized, every tensor's name and shape compared;
5. the model materialised once, in its final dtype and on its device, and each
   tensor copied in from the memory-mapped files (orl.model.weights).
Nothing is ever unpickled and no file is read whole.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import torch

from orl.errors import CheckpointError
from orl.io import atomic_write_json
from orl.model.config import (  # noqa: F401  (re-exported: the names other modules import from here)
    AR_ARCH,
    CONFIG,
    DIFFUSION_ARCH,
    SDAR_ARCH,
    SUPPORTED_ARCHS,
    architecture,
    config_dtype,
    hf_config,
    model_config_from_hf,
    read_config,
    read_json_config,
)
from orl.model.digest import weights_digest as checkpoint_digest  # noqa: F401  (the record's ckpt_sha256)
from orl.model.transformer import ModelConfig, Transformer
from orl.model.weights import WEIGHTS, WEIGHTS_INDEX, TensorInfo, copy_into, read_headers, write_weights
from orl.tokenizer import (
    SDAR_MASK,
    TOKENIZER,
    TOKENIZER_CONFIG,
    Tokenizer,
    load_tokenizer,
    save_tokenizer_files,
)

_LAYER = re.compile(r"model\.layers\.(\d+)\.")


@dataclass
class Checkpoint:
    model: Transformer
    tokenizer: Tokenizer
    config: dict  # the raw config.json
    path: Path

    @property
    def arch(self) -> str:
        return self.config["architectures"][0]

    @property
    def is_diffusion(self) -> bool:
        return self.model.config.attention_mode == "block-causal"

    @property
    def precision(self) -> str:
        quant = self.config.get("quantization_config")
        if quant:
            return f"{quant.get('quant_method', 'quantized')}-{quant.get('mode', '')}".rstrip("-")
        return str(next(self.model.parameters()).dtype).replace("torch.", "")


def model_dtype(model: torch.nn.Module) -> torch.dtype:
    """The dtype of the model's floating parameters (what config.json's torch_dtype records)."""
    return next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)


def save_checkpoint(
    model: Transformer,
    tokenizer: Tokenizer,
    out_dir: str | Path,
    *,
    extra_config: dict | None = None,
    max_shard_bytes: int | None = None,
) -> Path:
    """Write tokenizer.json, the weights, then config.json (last: a directory with a config is complete)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    state = dict(model.state_dict())
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)  # tied to model.embed_tokens.weight, as transformers stores it
    save_tokenizer_files(tokenizer, out_dir)
    write_weights(state, out_dir, max_shard_bytes)
    if model.config.attention_mode != "block-causal":
        arch = AR_ARCH
    else:  # SDAR's layout is SDAR's architecture: SGLang and LMDeploy read it as one of theirs
        arch = SDAR_ARCH if model.config.block_layout == "absolute" else DIFFUSION_ARCH
    config = hf_config(model.config, arch, model_dtype(model))
    config.update(extra_config or {})
    atomic_write_json(out_dir / CONFIG, config)
    return out_dir


def _check_header(cfg: ModelConfig, infos: dict[str, TensorInfo], config_path: Path) -> None:
    """The sizes a config.json declares against the weights' headers, before any module exists."""
    embed = infos.get("model.embed_tokens.weight")
    if embed is None:
        raise CheckpointError(
            f"{config_path.parent / WEIGHTS}: model.embed_tokens.weight: missing from the weights"
        )
    if len(embed.shape) != 2 or embed.shape[0] != cfg.vocab_size:
        raise CheckpointError(
            f"{config_path}: vocab_size: {cfg.vocab_size}, but {embed.file}: "
            f"model.embed_tokens.weight has shape {embed.shape}"
        )
    if embed.shape[1] != cfg.hidden_size:
        raise CheckpointError(
            f"{config_path}: hidden_size: {cfg.hidden_size}, but {embed.file}: "
            f"model.embed_tokens.weight has shape {embed.shape}"
        )
    layers = sorted({int(m.group(1)) for name in infos if (m := _LAYER.match(name))})
    if layers != list(range(cfg.num_hidden_layers)):
        held = f"layers {layers[0]}..{layers[-1]} ({len(layers)})" if layers else "no layers"
        raise CheckpointError(
            f"{config_path}: num_hidden_layers: {cfg.num_hidden_layers}, but the weights hold {held}"
        )


def _resolve_special_ids(cfg: ModelConfig, tokenizer: Tokenizer, ckpt_dir: Path) -> None:
    """The tokenizer is the one source of eos / pad ids; the mask must agree between config and tokenizer."""
    if tokenizer.vocab_size > cfg.vocab_size:
        raise CheckpointError(
            f"{ckpt_dir / TOKENIZER}: vocabulary has {tokenizer.vocab_size} tokens but "
            f"{ckpt_dir / CONFIG}: vocab_size is {cfg.vocab_size}; the tokenizer does not match the model"
        )
    cfg.eos_token_id, cfg.pad_token_id = tokenizer.eos_id, tokenizer.pad_id
    if cfg.attention_mode != "block-causal":
        return
    if cfg.mask_token_id is None:
        if tokenizer.mask_id is None:
            raise CheckpointError(
                f"{ckpt_dir / TOKENIZER_CONFIG}: mask_token: a block-diffusion checkpoint needs a "
                f"mask token (config.json mask_token_id, or {SDAR_MASK!r} / '[MASK]' in "
                f"{TOKENIZER})"
            )
        cfg.mask_token_id = tokenizer.mask_id
    elif tokenizer.mask_id is None:
        tokenizer.mask_id = cfg.mask_token_id
    elif tokenizer.mask_id != cfg.mask_token_id:
        raise CheckpointError(
            f"{ckpt_dir / CONFIG}: mask_token_id is {cfg.mask_token_id} but {ckpt_dir / TOKENIZER} "
            f"has its mask token at {tokenizer.mask_id}"
        )


def _build_on_meta(
    cfg: ModelConfig, config: dict, infos: dict[str, TensorInfo], ckpt_dir: Path
) -> Transformer:
    """The model with no storage, NVFP4 linears where the weights are quantized; shapes checked."""
    with torch.device("meta"):
        model = Transformer(cfg)
    quant = config.get("quantization_config")
    if quant:
        from orl.kernels.quantize import check_quantization_config, prepare_model_for_nvfp4_state_dict

        quant = check_quantization_config(quant, source=str(ckpt_dir / CONFIG))
        headers = {name: info.meta() for name, info in infos.items()}
        prepare_model_for_nvfp4_state_dict(model, headers, mode=quant["mode"], source=str(ckpt_dir / WEIGHTS))
    expected = _expected_tensors(model)
    file_names = set(infos) - ({"lm_head.weight"} if cfg.tie_word_embeddings else set())
    missing, unexpected = sorted(set(expected) - file_names), sorted(file_names - set(expected))
    if missing or unexpected:
        where = ckpt_dir / (WEIGHTS if (ckpt_dir / WEIGHTS).is_file() else WEIGHTS_INDEX)
        raise CheckpointError(
            f"{where}: tensors do not match config.json "
            f"(missing: {missing[:5]}, unexpected: {unexpected[:5]})"
        )
    # The model's own parameter order, not the file's, so the error names the same tensor whoever wrote the
    # file.
    for name, want in expected.items():
        info = infos[name]
        scalar = want.numel() == 1 and info.shape in ((), (1,))
        if info.shape != tuple(want.shape) and not scalar:
            raise CheckpointError(
                f"{info.file}: {name}: shape {info.shape} but config.json implies {tuple(want.shape)}"
            )
        if want.is_floating_point() and not info.dtype.is_floating_point:
            raise CheckpointError(
                f"{info.file}: {name}: dtype {info.dtype} but a floating-point weight is expected"
            )
    return model


def _expected_tensors(model: Transformer) -> dict[str, torch.Tensor]:
    expected = dict(model.state_dict())
    if model.config.tie_word_embeddings:
        expected.pop("lm_head.weight", None)
    return expected


def load_checkpoint(
    ckpt_dir: str | Path, *, device: str | torch.device = "cpu", dtype: torch.dtype | None = None
) -> Checkpoint:
    """Load and validate a checkpoint directory; dtype None = the dtype config.json declares (float32 if
    none).

    Every failure is a CheckpointError naming the file and the field.
    """
    ckpt_dir = Path(ckpt_dir)
    if not ckpt_dir.is_dir():
        raise CheckpointError(f"{ckpt_dir}: checkpoint directory not found")
    config_path = ckpt_dir / CONFIG
    config = read_json_config(
        config_path, "a checkpoint needs config.json, its safetensors weights and tokenizer.json"
    )
    cfg = model_config_from_hf(config, config_path)
    target_dtype = dtype or config_dtype(config, config_path)
    tokenizer = load_tokenizer(ckpt_dir / TOKENIZER)
    _resolve_special_ids(cfg, tokenizer, ckpt_dir)
    infos = read_headers(ckpt_dir)
    _check_header(cfg, infos, config_path)
    model = _build_on_meta(cfg, config, infos, ckpt_dir)
    model.to(dtype=target_dtype)  # still on meta: NVFP4 codes and scales keep their own dtypes
    model.to_empty(device=device)
    if cfg.tie_word_embeddings:  # to_empty gives each module its own tensor; share one again
        model.lm_head.weight = model.model.embed_tokens.weight
    with torch.no_grad():
        copy_into(_expected_tensors(model), infos)
    return Checkpoint(model=model.eval(), tokenizer=tokenizer, config=config, path=ckpt_dir)
