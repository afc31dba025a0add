"""Stage 1 and 2 of the data flow: the tokenizer, AR pretraining, AR → block-diffusion conversion.

- `build_tokenizer`: byte-level BPE on the TinyCode train stream.
- `train_ar`: the AR model (or the small draft model) on prompt → completion pairs.
- `convert_to_diffusion`: start from the AR weights, switch the attention to
  block-causal and continue training with the masked-block objective
  (QwenDLM is "converted from Qwen3"; METHOD.md §1).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from orl.errors import CheckpointError, ConfigError
from orl.model.checkpoint import checkpoint_digest, load_checkpoint
from orl.model.transformer import ModelConfig, Transformer, count_parameters
from orl.tasks import tinycode
from orl.tokenizer import Tokenizer, load_tokenizer, train_bpe
from orl.train.config import ModelSize, TrainPreset
from orl.train.data import pair_batch
from orl.train.loop import StepResult, train
from orl.train.objectives import ar_loss, masked_block_loss


def build_tokenizer(preset: TrainPreset) -> Tokenizer:
    cfg = preset.tokenizer
    texts = (p + c for p, c in tinycode.train_stream(cfg.seed, preset.task_mix()))
    return train_bpe(texts, vocab_size=cfg.vocab_size, sample_count=cfg.samples)


def model_config(size: ModelSize, tokenizer: Tokenizer) -> ModelConfig:
    return ModelConfig(
        vocab_size=tokenizer.vocab_size, eos_token_id=tokenizer.eos_id, pad_token_id=tokenizer.pad_id,
        mask_token_id=tokenizer.mask_id, **dataclasses.asdict(size),
    )


STAGE_SECTIONS = {
    "ar": ("difficulty", "long_fraction", "tokenizer", "model", "ar"),
    "draft": ("difficulty", "long_fraction", "tokenizer", "draft_model", "draft"),
    "convert": ("difficulty", "long_fraction", "convert", "diffusion"),
}


def _stage_digest(preset: TrainPreset, stage: str, extra: str = "") -> str:
    return f"{preset.digest(*STAGE_SECTIONS[stage])}-{stage}{extra}"


def train_ar(
    preset: TrainPreset, out_dir: str | Path, *, draft: bool = False, tokenizer_path: str | Path | None = None,
    device: str = "cpu", progress: bool = True, halt_after_checkpoint: int | None = None,
) -> dict:
    """Train the AR target (or, with draft=True, the small draft model) and write OUT as a checkpoint."""
    tokenizer = load_tokenizer(tokenizer_path) if tokenizer_path else build_tokenizer(preset)
    size, optim = (preset.draft_model, preset.draft) if draft else (preset.model, preset.ar)
    torch.manual_seed(optim.seed)
    model = Transformer(model_config(size, tokenizer)).to(device)
    mix = preset.task_mix()
    max_len = size.max_position_embeddings

    def step(i: int) -> StepResult:
        batch = pair_batch(tokenizer, optim.seed, i, optim.batch_size, mix, max_len)
        return StepResult(ar_loss(model, batch), int(batch.lengths.sum()))

    stage = "draft" if draft else "ar"
    summary = train(model, step, optim, out_dir, tokenizer, digest=_stage_digest(preset, stage), stage=stage,
                    progress=progress, halt_after_checkpoint=halt_after_checkpoint,
                    model_name=f"{preset.name}-{stage}")
    return {**summary, "parameters": count_parameters(model)}


def convert_to_diffusion(
    preset: TrainPreset, init_dir: str | Path, out_dir: str | Path, *, device: str = "cpu", progress: bool = True,
    halt_after_checkpoint: int | None = None,
) -> dict:
    """Continue training an AR checkpoint as a block-diffusion model (residual α = 0: the base dLLM)."""
    init = load_checkpoint(init_dir, device=device)
    if init.is_diffusion:
        raise CheckpointError(f"{Path(init_dir) / 'config.json'}: architectures: --init must be an AR checkpoint "
                              "(Qwen3ForCausalLM); this one is already a diffusion model")
    if init.tokenizer.mask_id is None:
        raise CheckpointError(f"{Path(init_dir) / 'tokenizer.json'}: added_tokens: no [MASK] token; "
                              "conversion to diffusion needs one")
    block = preset.diffusion.block_size
    if block <= 0 or block > preset.model.max_position_embeddings:
        raise ConfigError(f"diffusion.block_size: expected 1..{preset.model.max_position_embeddings}, got {block}")
    model = init.model
    model.config.attention_mode = "block-causal"
    model.config.block_size = block
    model.config.mask_token_id = init.tokenizer.mask_id
    model.config.residual_alpha = 0.0
    tokenizer = init.tokenizer
    optim = preset.convert
    mix = preset.task_mix()
    max_len = model.config.max_position_embeddings

    def step(i: int) -> StepResult:
        batch = pair_batch(tokenizer, optim.seed, i, optim.batch_size, mix, max_len, block_size=block)
        generator = torch.Generator().manual_seed(optim.seed * 7919 + i)
        return StepResult(masked_block_loss(model, batch, generator), int(batch.lengths.sum()))

    return train(model, step, optim, out_dir, tokenizer, digest=_stage_digest(preset, "convert", f"-B{block}-init{checkpoint_digest(init_dir)[:12]}"),
                 stage="convert", progress=progress, halt_after_checkpoint=halt_after_checkpoint,
                 model_name=f"{preset.name}-dlm")
