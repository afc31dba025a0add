"""Grouped-query attention with an explicit mask: the folded call equals plain GQA, and what reaches SDPA
is a call its memory-efficient CUDA kernel accepts (equal query and key/value heads, no enable_gqa)."""

import pytest
import torch
import torch.nn.functional as F

from orl.model import transformer
from orl.model.attention import attention_bias, grouped_attention
from orl.model.transformer import ModelConfig, Transformer


def gqa_by_hand(q, k, v, mask):
    """Every query head against its own copy of its key/value head, softmax in float64."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1).double(), v.repeat_interleave(group, dim=1).double()
    scores = q.double() @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    scores = scores.masked_fill(~mask[:, None], float("-inf"))
    return (scores.softmax(-1) @ v).to(q.dtype)


@pytest.mark.parametrize("n_heads,n_kv", [(4, 4), (4, 2), (8, 2), (16, 1)])
def test_folded_groups_equal_plain_gqa(n_heads, n_kv):
    gen = torch.Generator().manual_seed(n_heads * 10 + n_kv)
    b, t, s, d = 2, 16, 48, 32
    q = torch.randn(b, t, n_heads, d, generator=gen).transpose(1, 2)  # non-contiguous, as in the model
    k, v = torch.randn(b, n_kv, s, d, generator=gen), torch.randn(b, n_kv, s, d, generator=gen)
    mask = torch.rand(b, t, s, generator=gen) > 0.4
    mask[..., 0] = True  # every query sees at least one key
    torch.testing.assert_close(
        grouped_attention(q, k, v, attention_bias(mask, n_heads // n_kv, q.dtype)),
        gqa_by_hand(q, k, v, mask),
        atol=1e-5,
        rtol=1e-5,
    )


def test_masked_call_reaching_sdpa_has_no_grouped_heads(monkeypatch):
    calls = []
    sdpa = F.scaled_dot_product_attention

    def recording_sdpa(q, k, v, **kwargs):
        calls.append((q.shape, k.shape, kwargs))
        return sdpa(q, k, v, **kwargs)

    monkeypatch.setattr(transformer.F, "scaled_dot_product_attention", recording_sdpa)
    q, k = torch.randn(1, 8, 16, 32), torch.randn(1, 2, 40, 32)
    grouped_attention(q, k, k.clone(), attention_bias(torch.ones(1, 16, 40, dtype=torch.bool), 4, q.dtype))
    ((q_shape, k_shape, kwargs),) = calls
    assert q_shape == (1, 2, 64, 32) and k_shape == (1, 2, 40, 32)
    assert not kwargs.get("enable_gqa", False) and kwargs["attn_mask"].shape == (1, 1, 64, 40)
    assert kwargs["attn_mask"].dtype == q.dtype  # a float bias: SDPA converts nothing per layer
    calls.clear()
    grouped_attention(q, k, k.clone(), None)  # causal training path: SDPA's own GQA (flash takes it)
    assert calls[0][2] == {"is_causal": True, "enable_gqa": True}


def test_the_bias_is_built_once_per_forward(monkeypatch):
    """Every layer reads the one bias the forward built (not a conversion of its own)."""

    seen = []
    sdpa = F.scaled_dot_product_attention

    def recording_sdpa(q, k, v, **kwargs):
        seen.append(kwargs.get("attn_mask"))
        return sdpa(q, k, v, **kwargs)

    monkeypatch.setattr(transformer.F, "scaled_dot_product_attention", recording_sdpa)
    config = ModelConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
    )
    model = Transformer(config)
    mask = torch.ones(1, 5, 5, dtype=torch.bool).tril()
    model(torch.arange(5)[None], mask=mask)
    assert len(seen) == 3 and all(b is seen[0] for b in seen) and seen[0].shape == (1, 1, 10, 5)


def test_a_bias_of_the_wrong_layout_is_refused():
    q, k = torch.randn(1, 8, 16, 32), torch.randn(1, 2, 40, 32)
    with pytest.raises(ValueError, match="attention_bias"):
        grouped_attention(
            q, k, k.clone(), attention_bias(torch.ones(1, 16, 40, dtype=torch.bool), 2, q.dtype)
        )


@pytest.mark.parametrize("length", range(17, 70, 4))
def test_queries_as_a_suffix_attend_exactly_as_in_the_whole_forward(length):
    """A block's last 16 queries over the whole sequence's keys (a later step with the context in the
    cache), given `suffix_of`, equal the same rows of the forward over all queries bit for bit."""
    gen = torch.Generator().manual_seed(length)
    b, n_heads, n_kv, d, t = 3, 4, 2, 64, 16
    q = torch.randn(b, length, n_heads, d, generator=gen).transpose(1, 2)
    k, v = torch.randn(b, n_kv, length, d, generator=gen), torch.randn(b, n_kv, length, d, generator=gen)
    mask = torch.ones(length, length, dtype=torch.bool).tril()
    mask[-t:, -t:] = True
    mask = mask.expand(b, length, length)
    whole = grouped_attention(q, k, v, attention_bias(mask, n_heads // n_kv, q.dtype))
    suffix = grouped_attention(
        q[:, :, -t:], k, v, attention_bias(mask[:, -t:], n_heads // n_kv, q.dtype, suffix_of=length)
    )
    assert torch.equal(suffix, whole[:, :, -t:])
