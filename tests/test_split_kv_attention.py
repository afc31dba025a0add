"""Split-KV attention (orl/kernels/triton_attention.py) under Triton's interpreter: SDPA's result with the
same additive bias, on stacked query groups, caches that are not a multiple of a split, masked keys and
query rows that span several row tiles; compiled, it is one extern operator and a fused combine."""

import pytest
import torch
import torch.nn.functional as F

from orl.model.attention import attention_bias
from tests.kernel_modules import kernel_module

pytest.importorskip("triton", reason="triton is not installed")


ka = kernel_module("triton_attention", interpreted=True)


def _case(rows: int, length: int, n_kv: int = 2, head_dim: int = 32, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(1, n_kv, rows, head_dim, generator=gen)
    k = torch.randn(1, n_kv, length, head_dim, generator=gen)
    v = torch.randn(1, n_kv, length, head_dim, generator=gen)
    # A block-causal-like mask: row i sees the first (length // 2 + i) keys, so later splits are partly or
    # wholly masked for early rows, as the unwritten slots of a cache bucket are.
    visible = length // 2 + torch.arange(rows)[:, None] % (length // 2)
    mask = (torch.arange(length)[None, :] <= visible)[None]
    return q, k, v, attention_bias(mask, 1, q.dtype)


@pytest.mark.parametrize("rows,length", [(64, 1024), (16, 200), (96, 130), (32, 64)])
def test_split_kv_equals_sdpa(rows, length):
    q, k, v, bias = _case(rows, length, seed=rows + length)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    torch.testing.assert_close(ka.split_kv_attention(q, k, v, bias), expected, atol=2e-5, rtol=2e-5)
    acc, _, _ = ka.split_kv_partials(q, k, v, bias)
    assert acc.shape[2] == -(-length // ka.SPLIT_LEN)  # one partial per split of the cache


def test_a_split_whose_keys_are_all_masked_contributes_nothing():
    q, k, v, _ = _case(16, 384)
    mask = torch.zeros(1, 16, 384, dtype=torch.bool)
    mask[..., :100] = True  # splits 2 and 3 see no key at all
    bias = attention_bias(mask, 1, q.dtype)
    out = ka.split_kv_attention(q, k, v, bias)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q[..., :, :], k, v, attn_mask=bias))


def test_strided_queries_are_read_in_place():
    q, k, v, bias = _case(32, 256)
    wide = torch.randn(1, 2, 32, 64)
    wide[..., :32] = q
    strided = wide[..., :32]
    with pytest.raises(ValueError, match="contiguous last dimension"):
        ka.split_kv_partials(q.transpose(-1, -2).contiguous().transpose(-1, -2), k, v, bias)
    torch.testing.assert_close(
        ka.split_kv_attention(strided, k, v, bias), ka.split_kv_attention(q, k, v, bias)
    )


def test_compiled_it_is_one_extern_operator():
    q, k, v, bias = _case(64, 256)
    graphs = []

    def backend(gm, inputs):
        graphs.append(gm)
        return gm.forward

    out = torch.compile(ka.split_kv_attention, backend=backend, fullgraph=True)(q, k, v, bias)
    torch.testing.assert_close(
        out, F.scaled_dot_product_attention(q, k, v, attn_mask=bias), atol=2e-5, rtol=2e-5
    )
    (graph,) = graphs
    targets = [str(n.target) for n in graph.graph.nodes if n.op == "call_function"]
    assert sum("split_kv_partials" in t for t in targets) == 1
