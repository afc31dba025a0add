"""ar-compiled: greedy tokens equal ReferenceAR's and transformers' (hf), TPF 1, one compilation per
cache bucket, no host sync inside a decode chunk, <eos> and budget handling, bad input."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from orl.engines.ar import ARState, CompiledAR, decode_chunk
from orl.engines.reference import ReferenceAR
from orl.errors import CheckpointError
from orl.model.checkpoint import load_checkpoint

MAX_NEW = 24


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def prompts():
    from orl.tasks import tinycode

    return [p["prompt"] for p in tinycode.eval_problems("easy")[:4]]


@pytest.fixture(scope="module", params=["smoke", "random"])
def ar(request, smoke_models, ar_ckpt_dir):
    """Two AR checkpoints: the trained smoke model and a random one with large weights (sharp logits)."""
    return load_checkpoint(smoke_models[0] if request.param == "smoke" else ar_ckpt_dir)


def _outputs(engine, prompts, max_new=MAX_NEW):
    return [(g.token_ids, g.nfe) for g in (engine.generate(p, max_new) for p in prompts)]


@pytest.mark.parametrize("steps", [1, 3])
def test_greedy_tokens_and_nfe_equal_the_reference_and_hf(ar, prompts, steps):
    from orl.engines.hf import load_hf_engine

    expected = _outputs(ReferenceAR(ar), prompts)
    engine = CompiledAR(ar, mode="eager", sync_every=steps)
    gens = [engine.generate(p, MAX_NEW) for p in prompts]
    assert [(g.token_ids, g.nfe) for g in gens] == expected
    # The prefill yields the first token: n tokens cost one prefill and n - 1 decode forwards.
    assert all(g.nfe == g.num_tokens - 1 and g.nfe_prefill == 1 for g in gens)
    hf = load_hf_engine(ar.path)
    assert [g.token_ids for g in gens] == [t for t, _ in _outputs(hf, prompts)]


def test_compiled_step_decodes_like_eager_with_one_compilation_per_cache_bucket(smoke_models, prompts):
    """fullgraph compilation (a graph break would be an error); the counting backend sees each graph it
    compiles: per cache length one decode chunk and one prefill, whatever the prompt's length."""
    # Dynamo remembers, per code object and process, which sizes it has seen change (automatic dynamic
    # shapes): an engine compiled earlier in this worker (test_sitting's) would make the new bucket's
    # prefill reuse a graph and the count below depend on test order.
    torch._dynamo.reset()
    ckpt = load_checkpoint(smoke_models[0])
    graphs: list[int] = []

    def counting_backend(gm, example_inputs):
        graphs.append(len(gm.graph.nodes))
        return gm.forward

    engine = CompiledAR(
        ckpt, mode="compile", sync_every=2, min_cache_len=64, compile_backend=counting_backend
    )
    eager = CompiledAR(ckpt, mode="eager", sync_every=2, min_cache_len=64)
    assert _outputs(engine, prompts) == _outputs(eager, prompts)
    assert {engine.compile_key(p, MAX_NEW) for p in prompts} == {64}
    assert len(graphs) == 2  # the prefill (symbolic length) and the decode chunk
    assert engine.compile_key(prompts[0], 100) == 128
    assert engine.generate(prompts[0], 100).token_ids == eager.generate(prompts[0], 100).token_ids
    assert len(graphs) == 4 and sorted(engine._slots) == [64, 128]  # the new bucket's prefill and chunk
    assert engine.describe().settings["mode"] == "compile"


def test_end_token_mid_chunk_stops_and_cuts_like_the_reference(ar, prompts):
    """An end token produced inside a chunk of S steps ends the text there; later steps are not counted."""
    tokens = ReferenceAR(ar).generate(prompts[0], MAX_NEW).token_ids
    ckpt = dataclasses.replace(ar, tokenizer=dataclasses.replace(ar.tokenizer))
    ckpt.tokenizer.eos_ids = (*ar.tokenizer.eos_ids, tokens[4])  # the 5th token now ends the text
    expected = ReferenceAR(ckpt).generate(prompts[0], MAX_NEW)
    assert expected.token_ids == tokens[: tokens.index(tokens[4]) + 1]
    for steps in (1, 3):
        gen = CompiledAR(ckpt, mode="eager", sync_every=steps).generate(prompts[0], MAX_NEW)
        assert (gen.token_ids, gen.nfe) == (expected.token_ids, expected.nfe)


def test_ignore_eos_generates_exactly_the_budget(ar, prompts):
    for steps in (1, 4):
        gen = CompiledAR(ar, mode="eager", sync_every=steps, ignore_eos=True).generate(prompts[1], 10)
        assert len(gen.token_ids) == gen.nfe + gen.nfe_prefill == 10
        assert gen.token_ids == ReferenceAR(ar, ignore_eos=True).generate(prompts[1], 10).token_ids


def test_no_host_sync_inside_a_decode_chunk(smoke_models):
    """The chunk runs on fake tensors (shapes, no data): a .item() or a branch on a value would raise."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    ckpt = load_checkpoint(smoke_models[0])
    state = ARState.allocate(ckpt.model, 256)
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    cache = type(state.cache)(
        [mode.from_tensor(t) for t in state.cache.k], [mode.from_tensor(t) for t in state.cache.v]
    )
    fake = ARState(cache=cache, seq=mode.from_tensor(state.seq), pos=mode.from_tensor(state.pos))
    with mode, torch.inference_mode():
        decode_chunk(ckpt.model, fake, 3)


def test_a_diffusion_checkpoint_is_refused(smoke_models):
    with pytest.raises(CheckpointError, match="block-diffusion"):
        CompiledAR(load_checkpoint(smoke_models[1]))


def test_registry_builds_it(smoke_models):
    from orl.engines.kinds import ENGINE_NAMES
    from orl.engines.registry import build_engine

    assert "ar-compiled" in ENGINE_NAMES
    engine = build_engine("ar-compiled", smoke_models[0])
    assert isinstance(engine, CompiledAR) and engine.describe().name == "ar-compiled"
    assert engine.mode == "compile"  # the CPU default: inductor
