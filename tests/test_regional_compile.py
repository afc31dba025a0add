"""Regional compilation (orl/engines/capture.py, "compile-layers" / "compile-graph"): one compiled decoder
layer serves every layer, every block shape and every cache length after a few recompilations, and the
engines decode exactly as they do eagerly; the checkpoint's own model stays uncompiled."""

from __future__ import annotations

import pytest
import torch

from orl.decoding import Policy
from orl.engines.ar import CompiledAR
from orl.engines.capture import compile_layers
from orl.engines.dlmrt import DlmrtConfig, DlmrtEngine
from orl.engines.reference import ReferenceDiffusion
from orl.eval.scale import arch_config, random_model
from orl.model.checkpoint import load_checkpoint
from orl.model.transformer import KVCache

MAX_NEW = 32

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def prompts():
    from orl.tasks import load_suite

    return [p["prompt"] for p in load_suite("tinycode", difficulty="easy", limit=4)]


class CountingBackend:
    """A torch.compile backend that records each graph it is handed (one per compilation)."""

    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return gm.forward


def generate_all(engine, prompts):
    return [(g.token_ids, g.nfe) for g in (engine.generate(p, MAX_NEW) for p in prompts)]


def test_dlmrt_compile_layers_decodes_like_eager_with_a_few_layer_compilations(smoke_models, prompts):
    torch._dynamo.reset()
    ckpt = load_checkpoint(smoke_models[1])
    ckpt.model.config.residual_alpha = 0.5
    backend = CountingBackend()
    policy = Policy.parse("threshold:0.9")
    regional = DlmrtEngine(
        ckpt, policy, config=DlmrtConfig(sync_every=2, mode="compile-layers", compile_backend=backend)
    )
    eager = DlmrtEngine(ckpt, policy, compiled=False, config=DlmrtConfig(sync_every=2))
    assert regional.mode == "compile-layers"
    assert generate_all(regional, prompts) == generate_all(eager, prompts)
    # Prompt lengths, the block start's 2B tokens and the steps' B: a static compilation, then one
    # with the length symbolic, which serves every later length; never one per layer.
    layers = ckpt.model.config.num_hidden_layers
    assert layers >= 2
    assert 1 <= len(backend.graphs) <= 3, len(backend.graphs)
    # Each compiled graph is one decoder layer: its linears, not the whole model's.
    linears = [
        n for n in backend.graphs[-1].graph.nodes if n.op == "call_function" and "linear" in str(n.target)
    ]
    assert 0 < len(linears) <= 7
    # The checkpoint's model is not the compiled copy and runs its layers uncompiled (the reference
    # decoder of the same benchmark must not get faster kernels than it had).
    assert regional.model is not ckpt.model
    assert all(getattr(layer, "_compiled_call_impl", None) is None for layer in ckpt.model.model.layers)
    assert all(a is b for a, b in zip(regional.model.parameters(), ckpt.model.parameters(), strict=True))
    before = len(backend.graphs)
    ReferenceDiffusion(ckpt, policy).generate(prompts[0], MAX_NEW)
    assert len(backend.graphs) == before


def test_ar_engine_compile_layers_decodes_like_eager(smoke_models, prompts):
    torch._dynamo.reset()
    ckpt = load_checkpoint(smoke_models[0])
    backend = CountingBackend()
    regional = CompiledAR(ckpt, mode="compile-layers", compile_backend=backend)
    eager = CompiledAR(ckpt, mode="eager")
    assert generate_all(regional, prompts[:2]) == generate_all(eager, prompts[:2])
    assert 1 <= len(backend.graphs) <= 3, len(backend.graphs)


def test_compiled_layers_share_weights_and_follow_in_place_updates():
    config = arch_config("tiny")
    model = random_model(config, "cpu", torch.float32)
    compiled = compile_layers(model, backend="eager")
    ids = torch.randint(0, config.vocab_size - 2, (1, 8))
    torch.testing.assert_close(compiled(ids), model(ids))
    with torch.no_grad():
        model.model.layers[0].mlp.down_proj.weight.mul_(2.0)  # an optimizer step writes in place
    torch.testing.assert_close(compiled(ids), model(ids))


def test_a_deep_model_compiles_one_layer_not_the_whole_forward():
    """What regional compilation hands the compiler for a 12-layer forward: one layer's graph (the
    cost of compiling is the graph's size), against the whole forward's twelve layers."""
    config = arch_config("tiny")
    config.num_hidden_layers = 12
    model = random_model(config, "cpu", torch.float32)
    ids = torch.randint(0, config.vocab_size - 2, (1, 16))
    cache = KVCache.allocate(config, 1, 64, "cpu", torch.float32)
    slots = torch.arange(16)
    mask = torch.ones(1, 16, 64, dtype=torch.bool)

    def forward(m):
        return m(ids, positions=slots[None], mask=mask, cache=cache, slots=slots)

    def nodes(backend):
        return sum(len(gm.graph.nodes) for gm in backend.graphs)

    torch._dynamo.reset()
    regional, whole = CountingBackend(), CountingBackend()
    with torch.inference_mode():
        want = forward(model)
        got = forward(compile_layers(model, regional))
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(torch.compile(forward, backend=whole, fullgraph=True)(model), want)
    assert len(regional.graphs) == 1
    assert 10 * nodes(regional) < nodes(whole), (nodes(regional), nodes(whole))
