"""Fused q/k/v and gate/up projections (orl/model/fusion.py): same logits and tokens, 4 GEMMs a layer
instead of 7, checkpoints untouched, weights shared with the original model and kept so."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from orl.decoding import Policy
from orl.engines.ar import CompiledAR
from orl.engines.dlmrt import DlmrtConfig, DlmrtEngine
from orl.errors import ConfigError
from orl.kernels.linear import NVFP4Linear
from orl.kernels.quantize import quantize_model
from orl.model.checkpoint import load_checkpoint, save_checkpoint
from orl.model.fusion import fuse_projections
from orl.model.transformer import KVCache, ModelConfig, Transformer

from .conftest import small_config

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

PROMPTS = ["def add(a, b):", "Write a function that reverses a list.", "x = [1, 2, 3]\nprint("]


def random_model(**overrides) -> Transformer:
    torch.manual_seed(0)
    config = ModelConfig(
        vocab_size=96,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        **overrides,
    )
    model = Transformer(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.2)
    return model


def linear_calls_per_layer(model: nn.Module, ids: torch.Tensor) -> list[int]:
    """How many linear layers (dense or NVFP4) each decoder layer calls in one forward (forward hooks)."""
    counts = [0] * len(model.model.layers)
    hooks = []
    for i, layer in enumerate(model.model.layers):
        for module in layer.modules():
            if isinstance(module, (nn.Linear, NVFP4Linear)):

                def count(*_, i=i):
                    counts[i] += 1

                hooks.append(module.register_forward_hook(count))
    with torch.no_grad():
        model(ids)
    for hook in hooks:
        hook.remove()
    return counts


@pytest.mark.parametrize("bias", [False, True])
def test_fused_logits_equal_unfused_at_fp32_with_and_without_a_cache(bias):
    model = random_model(attention_bias=bias)
    ids = torch.randint(0, 96, (2, 12))
    fused, fusion = fuse_projections(model)
    assert fusion.to_record() == {"qkv_proj": 2, "gate_up_proj": 2, "unfused": {}}
    with torch.no_grad():
        torch.testing.assert_close(fused(ids), model(ids), rtol=1e-6, atol=1e-6)
        outs = []
        for m in (model, fused):  # the engines' path: keys/values written into a static cache
            cache = KVCache.allocate(m.config, 2, 16, "cpu", torch.float32)
            slots = torch.arange(12)
            mask = (torch.arange(16)[None, :] <= slots[:, None]).expand(2, 12, 16)
            outs.append(m(ids, positions=slots.expand(2, 12), mask=mask, cache=cache, slots=slots))
        torch.testing.assert_close(outs[1], outs[0], rtol=1e-6, atol=1e-6)


def test_a_fused_layer_runs_four_linears_instead_of_seven_eagerly_and_compiled():
    model = random_model()
    ids = torch.randint(0, 96, (1, 8))
    fused, _ = fuse_projections(model)
    assert linear_calls_per_layer(model, ids) == [7, 7]
    assert linear_calls_per_layer(fused, ids) == [4, 4]

    def graph_linears(m: nn.Module) -> int:
        found = []

        def backend(gm, example_inputs):  # the graph dynamo hands to the compiler (what inductor lowers)
            found.append(sum(node.target is torch._C._nn.linear for node in gm.graph.nodes))
            return gm.forward

        with torch.no_grad():
            torch.compile(m, backend=backend, fullgraph=True)(ids)
        return found[0]

    torch._dynamo.reset()
    assert graph_linears(model) == 2 * 7 + 1  # + the LM head
    assert graph_linears(fused) == 2 * 4 + 1


def test_the_checkpoint_keeps_its_layout_names_and_values(tmp_path, tokenizer):
    torch.manual_seed(0)
    model = Transformer(small_config(tokenizer)).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    ids = torch.randint(0, tokenizer.vocab_size, (1, 10))
    with torch.no_grad():
        logits = model(ids)
    fused, _ = fuse_projections(model)
    assert "model.layers.0.self_attn.qkv_proj.weight" in fused.state_dict()
    after = model.state_dict()
    assert list(after) == list(before)  # Qwen3's names, in order; no fused tensor among them
    assert all(torch.equal(after[k], before[k]) for k in before)
    with torch.no_grad():
        assert torch.equal(model(ids), logits)  # the original still runs its seven linears
    saved = load_checkpoint(save_checkpoint(model, tokenizer, tmp_path / "ckpt")).model.state_dict()
    assert list(saved) == list(before)
    assert all(torch.equal(saved[k], before[k]) for k in before)


def test_weights_are_shared_and_in_place_updates_are_seen():
    model = random_model()
    ids = torch.randint(0, 96, (1, 10))
    fused, fusion = fuse_projections(model)
    attn = model.model.layers[0].self_attn
    qkv = fused.model.layers[0].self_attn.qkv_proj.weight
    assert attn.q_proj.weight.data_ptr() == qkv.data_ptr()  # a row view of the fused weight: no copy
    assert attn.k_proj.weight.data_ptr() == qkv[attn.q_proj.out_features :].data_ptr()
    params = {id(p) for p in model.parameters()}
    with torch.no_grad():
        model.model.layers[1].mlp.up_proj.weight.mul_(1.5)  # an optimizer step writes in place
        torch.testing.assert_close(fused(ids), model(ids), rtol=1e-6, atol=1e-6)
    assert {id(p) for p in model.parameters()} == params  # the same Parameter objects (optimizers hold them)
    again, _ = fuse_projections(model)  # a second engine on the same model reuses the storage
    assert again.model.layers[0].self_attn.qkv_proj.weight.data_ptr() == qkv.data_ptr()

    model.model.layers[0].mlp.gate_proj.weight = nn.Parameter(torch.randn(96, 64))  # replaced, not written
    assert fusion.refresh() == 1 and fusion.refresh() == 0
    with torch.no_grad():
        torch.testing.assert_close(fused(ids), model(ids), rtol=1e-6, atol=1e-6)
    model.model.layers[0].mlp.gate_proj.to(torch.float64)
    with pytest.raises(ConfigError, match="gate_proj|weight.*float64"):
        fusion.refresh()


def equal_tensor_scales(model: Transformer) -> None:
    """Give each fusion group's members the same absolute maximum, so NVFP4 gives them one tensor scale
    (as exporters that fuse q/k/v and gate/up write them)."""
    with torch.no_grad():
        for layer in model.model.layers:
            for group in (
                (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj),
                (layer.mlp.gate_proj, layer.mlp.up_proj),
            ):
                for linear in group:
                    linear.weight.div_(linear.weight.abs().amax())


@pytest.mark.parametrize("shared_scales", [True, False])
def test_nvfp4_groups_fuse_exactly_when_their_tensor_scales_agree(shared_scales):
    model = random_model()
    if shared_scales:
        equal_tensor_scales(model)
    quantize_model(model, backend="reference")
    ids = torch.randint(0, 96, (1, 10))
    fused, fusion = fuse_projections(model)
    record = fusion.to_record()
    with torch.no_grad():
        torch.testing.assert_close(fused(ids), model(ids), rtol=1e-5, atol=1e-5)
    if shared_scales:
        assert record == {"qkv_proj": 2, "gate_up_proj": 2, "unfused": {}}
        layer = fused.model.layers[0].mlp.gate_up_proj
        assert isinstance(layer, NVFP4Linear) and layer.backend == "reference" and layer.out_features == 192
        assert linear_calls_per_layer(fused, ids) == [4, 4]
    else:
        assert record["qkv_proj"] == record["gate_up_proj"] == 0
        assert len(record["unfused"]) == 4
        assert "per-tensor scales differ" in record["unfused"]["model.layers.0.self_attn.qkv_proj"]
        assert linear_calls_per_layer(fused, ids) == [7, 7]


def test_dlmrt_fused_decodes_the_qwen3_layout_checkpoint_like_unfused(sdar_ckpt):
    """A block-diffusion checkpoint in Qwen3's layout written by transformers (SDAR), at fp32: the same
    tokens and NFE fused and unfused, in the engine's eager and compiled chunk paths."""
    ckpt = load_checkpoint(sdar_ckpt.dir, dtype=torch.float32)
    policy = Policy.parse("threshold:0.9")
    unfused = DlmrtEngine(ckpt, policy, compiled=False, config=DlmrtConfig(fuse=False))
    eager = DlmrtEngine(ckpt, policy, compiled=False, config=DlmrtConfig(fuse=True))
    compiled = DlmrtEngine(
        ckpt, policy, config=DlmrtConfig(mode="compile", compile_backend="aot_eager", fuse=True)
    )
    # The default on the CPU: fused when the linears go through oneDNN, not through MKL (engine.py).
    assert DlmrtEngine(ckpt, policy, compiled=False).fusion is None
    assert (
        DlmrtEngine(ckpt, policy, compiled=False, config=DlmrtConfig(cpu_linear="onednn")).fusion is not None
    )
    assert eager.describe().settings["fused_projections"] == {"qkv_proj": 2, "gate_up_proj": 2, "unfused": {}}
    assert unfused.describe().settings["fused_projections"] is None
    for i, prompt in enumerate(PROMPTS):
        want = unfused.generate(prompt, 16)
        for engine in (eager, compiled) if i == 0 else (eager,):  # one prompt compiled: tracing is slow here
            got = engine.generate(prompt, 16)
            assert (got.token_ids, got.nfe) == (want.token_ids, want.nfe), prompt
    with torch.no_grad():
        ids = torch.tensor([ckpt.tokenizer.encode(PROMPTS[1])])
        torch.testing.assert_close(eager.model(ids), ckpt.model(ids), rtol=1e-5, atol=1e-5)


def test_ar_engine_fused_decodes_like_unfused(qwen3_ckpt_dir):
    ckpt = load_checkpoint(qwen3_ckpt_dir, dtype=torch.float32)
    unfused = CompiledAR(ckpt, mode="eager", fuse=False)
    fused = CompiledAR(ckpt, mode="eager", fuse=True)
    assert fused.describe().settings["fused_projections"]["qkv_proj"] == ckpt.model.config.num_hidden_layers
    for prompt in PROMPTS:
        assert fused.generate(prompt, 12).token_ids == unfused.generate(prompt, 12).token_ids
