"""Shared fixtures: a small tokenizer and tiny random checkpoints written by the project."""

from __future__ import annotations

import os

import pytest
import torch

# The machine's 2 cores are shared by pytest's workers (`make test` runs pytest-xdist, one worker per
# core): each worker's intra-op threads get its share, so two workers do not oversubscribe the cores.
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
torch.set_num_threads(max(1, min(2, os.cpu_count() or 1) // WORKERS))


@pytest.fixture(scope="module")
def one_thread():
    """Batch-1 steps of micro models are latency-bound: a second intra-op thread buys nothing, and on a
    shared 2-core machine OpenMP oversubscription makes them up to 10x slower. Modules of such steps
    use it for all their tests (`pytestmark = pytest.mark.usefixtures("one_thread")`)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tokenizer():
    from orl.tasks import tinycode
    from orl.tokenizer import train_bpe

    return train_bpe((p + c for p, c in tinycode.train_stream(0, "easy")), vocab_size=512, sample_count=1500)


def small_config(tokenizer, **overrides):
    from orl.model.transformer import ModelConfig

    values = dict(
        vocab_size=tokenizer.vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=160,
        eos_token_id=tokenizer.eos_id,
        pad_token_id=tokenizer.pad_id,
        mask_token_id=tokenizer.mask_id,
    )
    values.update(overrides)
    return ModelConfig(**values)


@pytest.fixture(scope="session")
def ar_ckpt_dir(tokenizer, tmp_path_factory):
    from orl.model.checkpoint import save_checkpoint
    from orl.model.transformer import Transformer

    torch.manual_seed(0)
    model = Transformer(small_config(tokenizer))
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.2)  # larger than init: logits that differ clearly between positions
    return save_checkpoint(model, tokenizer, tmp_path_factory.mktemp("ar"))


@pytest.fixture(scope="session")
def smoke_models(tmp_path_factory):
    """AR model and its converted dLLM trained with the smoke preset (seconds)."""
    from orl.train.config import load_preset
    from orl.train.pretrain import convert_to_diffusion, train_ar

    root = tmp_path_factory.mktemp("smoke")
    preset = load_preset("smoke")
    train_ar(preset, root / "ar", progress=False)
    convert_to_diffusion(preset, root / "ar", root / "dlm", progress=False)
    return root / "ar", root / "dlm"


# Real-format checkpoints (Qwen3 AR, SDAR block diffusion) built with transformers: tests/real_checkpoints.py.
@pytest.fixture(scope="session")
def qwen3_ckpt_dir(tmp_path_factory):
    """A random Qwen3ForCausalLM (tied, bf16, 2 shards + index) with a Qwen-style tokenizer."""
    from .real_checkpoints import build_qwen3_checkpoint

    return build_qwen3_checkpoint(tmp_path_factory.mktemp("qwen3"), tie=True, logit_gain=8.0)


@pytest.fixture(scope="session")
def sdar_ckpt(tmp_path_factory):
    """An SDARForCausalLM checkpoint (untied, bf16, 3 shards, block 4, <|MASK|> 151669) and its Qwen3 twin."""
    from .real_checkpoints import build_sdar_checkpoint

    return build_sdar_checkpoint(tmp_path_factory.mktemp("sdar"), block_size=4, logit_gain=8.0)
