"""The transformer: transformers parity, block-causal masking, the HF-layout checkpoint."""

from __future__ import annotations

import torch

from orl.model.checkpoint import load_checkpoint
from orl.model.masks import training_mask
from orl.model.transformer import Transformer

from .conftest import small_config


def test_transformers_qwen3_loads_our_checkpoint_with_matching_logits(ar_ckpt_dir):
    from transformers import AutoModelForCausalLM

    ours = load_checkpoint(ar_ckpt_dir).model
    theirs = AutoModelForCausalLM.from_pretrained(ar_ckpt_dir, dtype=torch.float32).eval()
    assert type(theirs).__name__ == "Qwen3ForCausalLM"
    ids = torch.randint(0, ours.config.vocab_size, (4, 23), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        diff = (ours(ids) - theirs(ids).logits).abs().max().item()
    assert diff <= 1e-4, diff


def test_block_causal_mask_isolates_blocks(tokenizer):
    torch.manual_seed(0)
    model = Transformer(small_config(tokenizer, attention_mode="block-causal", block_size=4)).eval()
    prompt_len, block, seq = 5, 4, 5 + 4 * 4
    ids = torch.randint(3, tokenizer.vocab_size, (1, seq), generator=torch.Generator().manual_seed(2))
    mask = training_mask(seq, torch.tensor([prompt_len]), block, torch.tensor([seq]))
    for j in range(4):
        changed = ids.clone()
        pos = prompt_len + j * block + 2  # a token inside block j
        changed[0, pos] = (changed[0, pos] + 1) % tokenizer.vocab_size
        with torch.no_grad():
            delta = (model(ids, mask=mask) - model(changed, mask=mask)).abs().amax(-1)[0]
        start, end = prompt_len + j * block, prompt_len + (j + 1) * block
        assert delta[:start].max() == 0, f"block {j}: a position before the block changed"
        assert (delta[start:end] > 0).all(), f"block {j}: some position inside the block did not change"


def test_kv_cache_forward_matches_full_forward(tokenizer):
    from orl.model.masks import causal_limits, mask_from_limits
    from orl.model.transformer import KVCache

    torch.manual_seed(0)
    model = Transformer(small_config(tokenizer)).eval()
    ids = torch.randint(3, tokenizer.vocab_size, (2, 12), generator=torch.Generator().manual_seed(3))
    cache = KVCache.allocate(model.config, 2, 16, "cpu", torch.float32)
    key_idx = torch.arange(16)
    with torch.no_grad():
        full = model(ids)
        head = torch.arange(8)
        first = model(
            ids[:, :8],
            mask=mask_from_limits(causal_limits(head.expand(2, 8)), key_idx),
            cache=cache,
            slots=head,
            positions=head.expand(2, 8),
        )
        tail = torch.arange(8, 12)
        second = model(
            ids[:, 8:],
            mask=mask_from_limits(causal_limits(tail.expand(2, 4)), key_idx),
            cache=cache,
            slots=tail,
            positions=tail.expand(2, 4),
        )
    assert torch.allclose(torch.cat([first, second], 1), full, atol=1e-5)


def test_absolute_block_layout_limits_by_hand():
    from orl.model.masks import absolute_block_limits, layout_block_limits

    idx = torch.arange(10)
    # Blocks of 4 at 0-3, 4-7, 8-11: each query sees up to the end of its own block, prompt or not.
    assert absolute_block_limits(idx, 4).tolist() == [4, 4, 4, 4, 8, 8, 8, 8, 12, 12]
    assert torch.equal(layout_block_limits("absolute", idx, 5, 4), absolute_block_limits(idx, 4))
    # After the prompt (5 tokens): causal prompt, then blocks at 5-8 and 9-12.
    assert layout_block_limits("after-prompt", idx, 5, 4).tolist() == [1, 2, 3, 4, 5, 9, 9, 9, 9, 13]


def test_attention_bias_loads_with_matching_logits(tmp_path):
    """Qwen3's attention_bias switch (off in every release) loads like transformers runs it."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from .real_checkpoints import build_qwen_tokenizer

    config = Qwen3Config(
        vocab_size=151669,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        attention_bias=True,
        max_position_embeddings=128,
        tie_word_embeddings=False,
        eos_token_id=151645,
    )
    torch.manual_seed(0)
    theirs = Qwen3ForCausalLM(config).eval()
    with torch.no_grad():
        for module in theirs.modules():
            if isinstance(module, torch.nn.Linear) and module.bias is not None:
                module.bias.normal_(0.0, 0.5)
    theirs.save_pretrained(str(tmp_path))
    build_qwen_tokenizer(tmp_path, with_mask=False)
    ours = load_checkpoint(tmp_path).model
    assert ours.model.layers[0].self_attn.o_proj.bias is not None
    ids = torch.randint(0, 151669, (1, 9), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        assert (ours(ids) - theirs(ids).logits).abs().max().item() <= 1e-4
