"""dlmrt: parity with the reference decoder, capturability, no host sync in a chunk, <eos>, bad input."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from orl.decoding import Policy
from orl.engines.capture import cache_bucket, compile_fullgraph
from orl.engines.dlmrt import DlmrtConfig, DlmrtEngine
from orl.engines.dlmrt.chunk import denoise_chunk, prefill, start_block_chunk
from orl.engines.dlmrt.state import DecodeState
from orl.engines.reference import ReferenceDiffusion
from orl.errors import CheckpointError, InputError
from orl.model.checkpoint import load_checkpoint

from .conftest import small_config

MAX_NEW = 32  # 4 blocks of the smoke preset's block size 8
POLICIES = ["fixed:1", "threshold:0.9", "factor:1.0"]


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture(scope="session")
def prompts():
    from orl.tasks import load_suite

    return [p["prompt"] for p in load_suite("tinycode", difficulty="easy", limit=5)]


@pytest.fixture(scope="session")
def dlm(smoke_models):
    """The trained smoke dLLM, residual off (α = 0 as converted) and on (α = 0.5)."""
    plain = load_checkpoint(smoke_models[1])
    residual = load_checkpoint(smoke_models[1])
    residual.model.config.residual_alpha = 0.5
    return {"off": plain, "on": residual}


def outputs(engine, prompts):
    return [(g.token_ids, g.nfe, g.tpf) for g in (engine.generate(p, MAX_NEW) for p in prompts)]


@pytest.fixture(scope="session")
def reference_outputs(dlm, prompts):
    cache = {}

    def get(policy: str, residual: str):
        if (policy, residual) not in cache:
            ref = ReferenceDiffusion(dlm[residual], Policy.parse(policy), residual=residual == "on")
            cache[policy, residual] = outputs(ref, prompts)
        return cache[policy, residual]

    return get


# ---------------------------------------------------------------------------------------
# Parity with the reference decoder (the oracle: full recompute, no cache)
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("residual", ["off", "on"])
@pytest.mark.parametrize("policy", POLICIES)
def test_tokens_nfe_and_tpf_equal_the_reference_decoder(dlm, prompts, reference_outputs, policy, residual):
    # S = 3 steps per chunk: blocks end mid-chunk, so the predicated no-op steps are exercised.
    engine = DlmrtEngine(
        dlm[residual],
        Policy.parse(policy),
        compiled=False,
        residual=residual == "on",
        config=DlmrtConfig(sync_every=3),
    )
    expected = reference_outputs(policy, residual)
    assert outputs(engine, prompts) == expected
    assert any(len(tokens) < MAX_NEW for tokens, _, _ in expected), "no prompt stopped early at <eos>"


def test_steps_per_chunk_changes_host_reads_not_results(dlm, prompts, reference_outputs):
    policy = Policy.parse("threshold:0.9")
    expected = reference_outputs("threshold:0.9", "off")
    for steps in (1, 2, 5):
        engine = DlmrtEngine(dlm["off"], policy, compiled=False, config=DlmrtConfig(sync_every=steps))
        gens = [engine.generate(p, MAX_NEW) for p in prompts]
        assert [(g.token_ids, g.nfe, g.tpf) for g in gens] == expected
        for g in gens:
            # Each chunk costs one host read; it runs S steps of which those with work count in NFE.
            assert g.extra["steps_run"] == steps * g.extra["host_reads"] >= g.nfe
            assert g.extra["host_reads"] >= -(-g.nfe // steps)


def test_residual_on_changes_the_computation_and_alpha_zero_equals_residual_off(dlm, prompts):
    policy = Policy.parse("threshold:0.9")
    off = DlmrtEngine(dlm["off"], policy, compiled=False, residual=False, log_steps=True)
    alpha_zero = DlmrtEngine(dlm["off"], policy, compiled=False, residual=True, log_steps=True)
    on = DlmrtEngine(dlm["on"], policy, compiled=False, residual=True, log_steps=True)
    logs_off = [off.generate(p, MAX_NEW) for p in prompts]
    logs_zero = [alpha_zero.generate(p, MAX_NEW) for p in prompts]
    logs_on = [on.generate(p, MAX_NEW) for p in prompts]
    assert [(g.token_ids, g.nfe, g.steps) for g in logs_zero] == [
        (g.token_ids, g.nfe, g.steps) for g in logs_off
    ]
    # With α > 0, steps k > 0 see a different input, so their distributions change.
    later_entropy = [[s.mean_entropy for s in g.steps if s.step > 0] for g in logs_on]
    later_entropy_off = [[s.mean_entropy for s in g.steps if s.step > 0] for g in logs_off]
    assert later_entropy != later_entropy_off


def test_step_logs_match_the_reference_decoders(dlm, prompts):
    policy = Policy.parse("threshold:0.9")
    ref = ReferenceDiffusion(dlm["on"], policy, log_steps=True)
    engine = DlmrtEngine(dlm["on"], policy, compiled=False, log_steps=True, config=DlmrtConfig(sync_every=2))
    for prompt in prompts[:2]:
        a, b = ref.generate(prompt, MAX_NEW), engine.generate(prompt, MAX_NEW)
        assert len(b.steps) == b.nfe == a.nfe
        for x, y in zip(a.steps, b.steps, strict=True):
            assert (x.block, x.step, x.committed, x.masked_before) == (
                y.block,
                y.step,
                y.committed,
                y.masked_before,
            )
            assert x.mean_entropy == pytest.approx(y.mean_entropy, abs=1e-4)
            assert x.mean_confidence == pytest.approx(y.mean_confidence, abs=1e-4)


# ---------------------------------------------------------------------------------------
# Capture: fullgraph compilation, and no host synchronisation inside a chunk
# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def captured_engine(dlm):
    """Residual on, S = 2, through torch.compile(fullgraph=True); the aot_eager backend captures the
    graph (dynamo + functionalisation, where a graph break is an error) without inductor's C++ build."""
    config = DlmrtConfig(sync_every=2, mode="compile", compile_backend="aot_eager")
    return DlmrtEngine(dlm["on"], Policy.parse("threshold:0.9"), config=config)


def test_chunks_compile_with_fullgraph_and_decode_like_eager(captured_engine, dlm, prompts):
    eager = DlmrtEngine(
        dlm["on"], Policy.parse("threshold:0.9"), compiled=False, config=DlmrtConfig(sync_every=2)
    )
    assert captured_engine.mode == "compile"
    assert outputs(captured_engine, prompts) == outputs(eager, prompts)


def test_one_compilation_per_shape_serves_every_threshold(dlm, prompts):
    graphs = []

    def counting_backend(gm, example_inputs):  # torch.compile calls this once per graph it compiles
        graphs.append(gm)
        return gm.forward

    config = DlmrtConfig(sync_every=2, mode="compile", compile_backend=counting_backend)
    for tau in ("0.5", "0.7", "0.9"):
        engine = DlmrtEngine(dlm["off"], Policy.parse(f"threshold:{tau}"), config=config)
        for prompt in prompts[:2]:
            engine.generate(prompt, MAX_NEW)
    assert len(graphs) == 3  # prefill (symbolic prompt length), block-start chunk, chunk: once each


def test_a_graph_break_in_the_chunk_is_an_error_not_a_fallback(dlm, prompts):
    engine = DlmrtEngine(dlm["off"], Policy.parse("fixed:1"), compiled=False)
    engine.generate(prompts[0], MAX_NEW)
    state = next(iter(engine._slots.values())).state

    def chunk_with_host_read(s: DecodeState) -> None:
        denoise_chunk(engine.model, engine.spec, s)
        if s.masked.any():  # Python branching on a tensor value: the loop is no longer capturable
            s.nfe.add_(0)

    with pytest.raises(torch._dynamo.exc.Unsupported), torch.inference_mode():
        compile_fullgraph(chunk_with_host_read, backend="eager")(state)


def run_without_host_data(fn, state: DecodeState) -> None:
    """Run fn on a copy of the state made of fake tensors: shapes and dtypes but no data.

    Anything that needs a value on the host (.item(), .tolist(), bool(), int(), Python
    branching on a tensor, nonzero / boolean-mask indexing, .numpy()) raises, so a chunk
    that completes here cannot synchronise with the device.
    """
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    fake = {f.name: getattr(state, f.name) for f in dataclasses.fields(state)}
    fake = {k: (mode.from_tensor(v) if isinstance(v, torch.Tensor) else v) for k, v in fake.items()}
    cache = state.cache
    fake["cache"] = type(cache)(
        [mode.from_tensor(t) for t in cache.k], [mode.from_tensor(t) for t in cache.v]
    )
    with torch.inference_mode(), mode:
        fn(DecodeState(**fake))


@pytest.fixture
def block_state(dlm, prompts):
    engine = DlmrtEngine(
        dlm["on"],
        Policy.parse("threshold:0.9"),
        compiled=False,
        log_steps=True,
        config=DlmrtConfig(sync_every=3),
    )
    engine.generate(prompts[0], MAX_NEW)
    return engine, next(iter(engine._slots.values())).state


def test_no_host_sync_inside_either_chunk(block_state):
    engine, state = block_state
    run_without_host_data(lambda s: start_block_chunk(engine.model, engine.spec, s), state)
    run_without_host_data(lambda s: denoise_chunk(engine.model, engine.spec, s), state)


@pytest.mark.parametrize(
    "leak",
    [
        lambda s: s.masked.any().item(),
        lambda s: s.status.tolist(),
        lambda s: bool(s.masked.any()),
        lambda s: s.tokens[s.masked],
    ],
)
def test_the_no_sync_check_catches_an_injected_host_read(block_state, leak):
    engine, state = block_state

    def leaky_chunk(s: DecodeState) -> None:
        denoise_chunk(engine.model, engine.spec, s)
        leak(s)

    from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException

    with pytest.raises((DataDependentOutputException, DynamicOutputShapeException)):
        run_without_host_data(leaky_chunk, state)


@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs CUDA: sync debug mode and CUDA graph capture"
)
def test_cuda_chunk_has_no_sync_and_graph_replay_matches_eager(smoke_models, prompts):
    ckpt = load_checkpoint(smoke_models[1], device="cuda")
    policy = Policy.parse("threshold:0.9")
    graph = DlmrtEngine(ckpt, policy, config=DlmrtConfig(sync_every=3, mode="cudagraph"))
    eager = DlmrtEngine(ckpt, policy, config=DlmrtConfig(sync_every=3, mode="eager"))
    assert outputs(graph, prompts) == outputs(eager, prompts)
    from orl.eval.engine_bench import host_sync_in_chunk

    assert (
        host_sync_in_chunk(eager, prompts[0], MAX_NEW) is None
    )  # the first host sync inside the chunks, if any


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown where CUDA is missing")
def test_bench_engine_on_cuda_says_cuda_is_missing_and_measures_nothing(smoke_models, tmp_path, capsys):
    from orl.cli import main

    out = tmp_path / "bench.jsonl"
    assert main(["bench-engine", "--ckpt", str(smoke_models[1]), "--device", "cuda", "--out", str(out)]) == 2
    assert "CUDA is not available" in capsys.readouterr().err and not out.exists()
    assert main(["bench-engine", "--ckpt", str(smoke_models[1]), "--check-sync", "--out", str(out)]) == 2
    assert "--check-sync: needs --device cuda" in capsys.readouterr().err


def test_bench_engine_rounds_medians_step_time_and_profile_on_the_cpu(smoke_models, tmp_path, capsys):
    from orl.cli import main
    from orl.records import load_records

    out = tmp_path / "bench.jsonl"
    argv = [
        "bench-engine",
        "--ckpt",
        str(smoke_models[1]),
        "--limit",
        "3",
        "--rounds",
        "3",
        "--repeats",
        "2",
        "--max-new-tokens",
        "32",
        "--engines",
        "dlmrt-eager,reference",
        "--profile",
        "--out",
        str(out),
        "--no-progress",
    ]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "identical to reference: 3/3" in printed and "profile (eager):" in printed
    records = load_records(out)
    assert [r["engine"] for r in records] == ["dlmrt-eager", "reference"]
    for record in records:
        rounds = record["extra"]["tokens_per_s_rounds"]
        assert len(rounds) == 3 and sorted(rounds)[1] == pytest.approx(record["metrics"]["tokens_per_s"])
        assert record["metrics"]["latency_p90_s"] >= record["metrics"]["latency_median_s"] > 0
    eager = records[0]
    assert eager["metrics"]["step_time_s"] > 0 and eager["extra"]["kernels_per_step"] > 0
    assert eager["extra"]["mode"] == "eager" and eager["extra"]["sync_every"] == 1
    assert main(argv[:-4] + ["--rounds", "0", "--out", str(out)]) == 2


def test_cudnn_attention_is_left_out_on_cuda_only():
    from orl.model.attention import avoid_per_length_attention_plans

    # The flag is process-wide and an earlier CUDA test's engine leaves it off: start from "on" and
    # put back whatever was there.
    before = torch.backends.cuda.cudnn_sdp_enabled()
    torch.backends.cuda.enable_cudnn_sdp(True)
    try:
        avoid_per_length_attention_plans(torch.device("cpu"))
        assert torch.backends.cuda.cudnn_sdp_enabled()
        avoid_per_length_attention_plans(torch.device("cuda"))  # only flips a flag: no GPU needed
        assert not torch.backends.cuda.cudnn_sdp_enabled()
    finally:
        torch.backends.cuda.enable_cudnn_sdp(before)


@pytest.mark.slow
def test_inductor_compiled_engine_matches_the_reference(dlm, prompts, reference_outputs):
    engine = DlmrtEngine(
        dlm["on"], Policy.parse("threshold:0.9"), compiled=True, config=DlmrtConfig(sync_every=2)
    )
    assert engine.mode == "compile"
    assert outputs(engine, prompts) == reference_outputs("threshold:0.9", "on")


# ---------------------------------------------------------------------------------------
# <eos>, the cache, and bad input
# ---------------------------------------------------------------------------------------


class EosAt(torch.nn.Module):
    """A model that predicts <eos> with certainty at one absolute position (a test double)."""

    def __init__(self, inner, position: int, eos_id: int):
        super().__init__()
        self.inner, self.position, self.eos_id = inner, position, eos_id
        self.config = inner.config

    @property
    def embedding(self) -> torch.Tensor:
        return self.inner.embedding

    def residual_term(self, z: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return self.inner.residual_term(z, weight)

    def forward(self, input_ids=None, *, inputs_embeds=None, positions=None, **kwargs):
        logits = self.inner(input_ids, inputs_embeds=inputs_embeds, positions=positions, **kwargs)
        b, t = logits.shape[:2]
        if positions is None:
            positions = torch.arange(t, device=logits.device).expand(b, t)
        positions = positions[:, positions.shape[1] - t :]  # the positions whose logits came back
        boost = F.one_hot(torch.tensor(self.eos_id), logits.shape[-1]).to(logits.dtype) * 100.0
        return logits + (positions == self.position).to(logits.dtype)[..., None] * boost


@pytest.fixture(scope="session")
def random_dlm_dir(tokenizer, tmp_path_factory):
    from orl.model.checkpoint import save_checkpoint
    from orl.model.transformer import Transformer

    torch.manual_seed(0)
    model = Transformer(small_config(tokenizer, attention_mode="block-causal", block_size=8))
    return save_checkpoint(model, tokenizer, tmp_path_factory.mktemp("random_dlm"))


def test_eos_fills_the_rest_of_its_block_and_stops_generation(random_dlm_dir, prompts):
    ckpt = load_checkpoint(random_dlm_dir)
    eos, B = ckpt.tokenizer.eos_id, ckpt.model.config.block_size
    P = len(ckpt.tokenizer.encode(prompts[0]))
    ckpt.model = EosAt(ckpt.model, position=P + B + 3, eos_id=eos)  # <eos> at offset 3 of block 1
    policy = Policy.parse("fixed:1")
    dl = DlmrtEngine(ckpt, policy, compiled=False, config=DlmrtConfig(sync_every=3)).generate(
        prompts[0], 4 * B
    )
    ref = ReferenceDiffusion(ckpt, policy).generate(prompts[0], 4 * B)
    # Block 0: B steps. Block 1: step 0 commits <eos> at offset 3 and fills offsets 4.., then
    # 3 steps for offsets 0..2; then generation stops (blocks 2 and 3 are never started).
    assert dl.extra["block_nfe"] == [B, 4]
    assert dl.nfe == ref.nfe == B + 4
    assert dl.token_ids == ref.token_ids and len(dl.token_ids) == B + 4
    assert dl.token_ids[-1] == eos and eos not in dl.token_ids[:-1]
    assert dl.text == ckpt.tokenizer.decode_completion(dl.token_ids)


def test_cache_length_is_a_bounded_set_of_buckets():
    assert cache_bucket(100, 16, 256, 256) == 256
    assert cache_bucket(100, 8, 160, 64) == 112  # 64 * 7/4
    assert cache_bucket(150, 8, 160, 64) == 160  # capped at the context
    assert cache_bucket(640, 16, 40960, 256) == 640  # 128 prompt + 512 new tokens: not 1024 slots
    assert cache_bucket(3000, 16, 40960, 256) == 3072
    rungs = {octave * k // 4 for octave in (256 * 2**i for i in range(7)) for k in (5, 6, 7, 8)}
    assert {cache_bucket(n, 16, 40960, 256) for n in range(1, 40960, 7)} == {256} | rungs | {40960}
    # A step reads under 25% more slots than the request fills (plus the block rounding).
    assert all(cache_bucket(n, 16, 40960, 256) < 1.25 * n + 16 for n in range(257, 40960, 7))


def test_each_cache_bucket_compiles_once_and_decodes_like_one_large_bucket(dlm, prompts):
    graphs = []

    def counting_backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    policy = Policy.parse("threshold:0.9")
    small = DlmrtEngine(
        dlm["off"],
        policy,
        config=DlmrtConfig(mode="compile", compile_backend=counting_backend, min_cache_len=32),
    )
    large = DlmrtEngine(dlm["off"], policy, compiled=False)
    lengths, new_graphs = [], []
    for prompt in prompts[:3] * 2:
        before = len(graphs)
        got, want = small.generate(prompt, MAX_NEW), large.generate(prompt, MAX_NEW)
        assert (got.token_ids, got.nfe) == (want.token_ids, want.nfe)
        assert got.extra["cache_len"] < want.extra["cache_len"]
        lengths.append(got.extra["cache_len"])
        new_graphs.append(len(graphs) - before)
    assert len(set(lengths)) >= 2, lengths  # the prompts land on different rungs
    # Compilations per request: prefill, chunk and block-start chunk on a rung's first request, as
    # on a power-of-two bucket's; nothing for a rung seen before.
    first_seen = [lengths.index(n) == i for i, n in enumerate(lengths)]
    assert new_graphs == [3 if new else 0 for new in first_seen], (lengths, new_graphs)


def test_engine_reuses_its_buffers_and_runners_across_requests(dlm, prompts):
    engine = DlmrtEngine(dlm["off"], Policy.parse("fixed:1"), compiled=False)
    for p in prompts:
        engine.generate(p, MAX_NEW)
    assert len(engine._slots) == 1


def test_bare_forward_replay_runs_the_requests_forwards_on_its_own_buffers(dlm, prompts):
    from orl.engines.dlmrt.forwards import BareForwards

    # Small buckets: a request that stops early would fit a smaller bucket than the one it ran in.
    engine = DlmrtEngine(
        dlm["off"], Policy.parse("threshold:0.9"), compiled=False, config=DlmrtConfig(min_cache_len=16)
    )
    bare = BareForwards(engine)
    counter = ForwardCounter(engine.model)
    for prompt in prompts:
        generation = engine.generate(prompt, MAX_NEW)
        slots, before = set(engine._slots), counter.calls
        assert bare(generation) > 0
        assert set(engine._slots) == slots  # no new buffers: the replay used the request's own
        assert counter.calls - before == 1 + generation.nfe  # the prefill and every counted step
    assert any(len(g) < MAX_NEW for g in [engine.generate(p, MAX_NEW).token_ids for p in prompts])


class ForwardCounter:
    def __init__(self, model):
        self.calls = 0
        model.register_forward_pre_hook(self)

    def __call__(self, module, args):
        self.calls += 1


@pytest.fixture
def counted(smoke_models):
    ckpt = load_checkpoint(smoke_models[1])
    return ckpt, ForwardCounter(ckpt.model)


def test_prompt_longer_than_the_context_fails_before_any_forward(counted):
    ckpt, counter = counted
    engine = DlmrtEngine(ckpt, Policy.parse("fixed:1"), compiled=False)
    with pytest.raises(InputError, match="max_position_embeddings"):
        engine.generate("def f(x):\n    return x + 1\n" * 200, MAX_NEW)
    with pytest.raises(InputError, match="max_position_embeddings"):  # fits alone, not with the new tokens
        engine.generate("x", ckpt.model.config.max_position_embeddings)
    assert counter.calls == 0


@pytest.mark.parametrize("bad", [0, -4, 2.5])
def test_max_new_tokens_must_be_a_positive_integer(counted, bad):
    ckpt, counter = counted
    with pytest.raises(InputError, match="max_new_tokens"):
        DlmrtEngine(ckpt, Policy.parse("fixed:1"), compiled=False).generate("def f(x):", bad)
    assert counter.calls == 0


def test_unknown_policy_is_rejected_by_the_generate_command(smoke_models, capsys):
    from orl.cli import main

    code = main(
        [
            "generate",
            "--ckpt",
            str(smoke_models[1]),
            "--engine",
            "dlmrt-eager",
            "--policy",
            "greedy:2",
            "--prompt",
            "def f(x):",
        ]
    )
    assert code == 2
    assert "unknown policy 'greedy'" in capsys.readouterr().err


def test_checkpoint_without_a_mask_token_is_rejected(smoke_models):
    ar = load_checkpoint(smoke_models[0])
    with pytest.raises(CheckpointError, match="config.json: mask_token_id"):
        DlmrtEngine(ar, Policy.parse("fixed:1"))


def test_bench_engine_command_writes_records_and_prints_the_figures(smoke_models, tmp_path, capsys):
    from orl.cli import main
    from orl.records import load_records

    out = tmp_path / "bench.jsonl"
    code = main(
        [
            "bench-engine",
            "--ckpt",
            str(smoke_models[1]),
            "--limit",
            "2",
            "--difficulty",
            "easy",
            "--max-new-tokens",
            "16",
            "--engines",
            "dlmrt-eager,reference",
            "--warmup",
            "1",
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert code == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-3].startswith("overhead=") and float(lines[-3].split("=")[1]) > 0
    assert lines[-2] == "speedup_vs_eager=n/a"  # the compiled engine was not in --engines
    assert lines[-1] == "speedup_vs_reference=n/a"
    records = {r["engine"]: r for r in load_records(out)}
    assert set(records) == {"dlmrt-eager", "reference"}
    eager, ref = records["dlmrt-eager"], records["reference"]
    assert eager["kind"] == "engine_bench" and eager["n_problems"] == 2
    assert eager["metrics"]["tpf"] == ref["metrics"]["tpf"] and eager["extra"]["identical_outputs"] == 2
    assert eager["metrics"]["overhead"] > 0 and eager["metrics"]["speedup_vs_reference"] > 0


def test_prefill_writes_the_prompt_and_sets_up_block_zero(dlm, prompts):
    engine = DlmrtEngine(dlm["off"], Policy.parse("fixed:1"), compiled=False)
    ids = engine.ckpt.tokenizer.encode(prompts[0])
    state = engine.slot(len(ids) + MAX_NEW).state
    with torch.inference_mode():
        prefill(engine.model, engine.spec, state, torch.tensor([ids]))
    assert state.seq[0, : len(ids)].tolist() == ids
    assert int(state.start) == int(state.mask_origin) == len(ids)
    assert state.masked.all() and (state.tokens == engine.spec.mask_id).all() and int(state.nfe) == 0


def test_profiling_is_prepared_for_cuda_graphs_on_cuda_only(monkeypatch):
    import torch.profiler._utils as profiler_utils

    from orl.eval.kernel_profile import prepare_graph_profiling

    calls = []
    monkeypatch.setattr(profiler_utils, "_init_for_cuda_graphs", lambda: calls.append(1))
    prepare_graph_profiling(torch.device("cpu"))
    assert calls == []
    prepare_graph_profiling(torch.device("cuda"))  # only sets up tracing: no GPU touched by the stand-in
    assert calls == [1]
