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
        first = model(ids[:, :8], mask=mask_from_limits(causal_limits(head.expand(2, 8)), key_idx),
                      cache=cache, slots=head, positions=head.expand(2, 8))
        tail = torch.arange(8, 12)
        second = model(ids[:, 8:], mask=mask_from_limits(causal_limits(tail.expand(2, 4)), key_idx),
                       cache=cache, slots=tail, positions=tail.expand(2, 4))
    assert torch.allclose(torch.cat([first, second], 1), full, atol=1e-5)
