"""The latency protocol's arithmetic and sequencing, on a deterministic fake engine."""

from __future__ import annotations

import pytest
import torch

from orl import timing
from orl.engines.base import Engine, EngineInfo, Generation
from orl.errors import InputError
from orl.eval import latency
from orl.eval.latency import RequestTiming, measure_latency, percentile, summarize


class FakeEngine:
    """Deterministic engine: prompt i yields len(prompt) tokens in ceil(tokens / tpf) forwards.

    Its clock is fake too: each request advances a counter the test reads through a
    patched perf_counter, so the wall times are known exactly.
    """

    name = "fake"

    def __init__(
        self,
        tpf: int,
        seconds_per_forward: float,
        clock: list[float],
        device: str = "cpu",
        shapes: dict[str, int] | None = None,
    ):
        self.tpf, self.spf, self.clock, self.device = tpf, seconds_per_forward, clock, torch.device(device)
        self.shapes = shapes or {}  # prompt -> compiled shape it runs in (None: nothing compiled)
        self.prompts_seen: list[str] = []

    def describe(self) -> EngineInfo:
        return EngineInfo(self.name, "fake", None, "float32", str(self.device))

    def compile_key(self, prompt: str, max_new_tokens: int):
        return self.shapes.get(prompt)

    def close(self) -> None:
        pass

    def generate(self, prompt: str, max_new_tokens: int) -> Generation:
        self.prompts_seen.append(prompt)
        tokens = min(len(prompt), max_new_tokens)
        nfe = -(-tokens // self.tpf)
        self.clock[0] += nfe * self.spf
        return Generation(token_ids=list(range(tokens)), text="x" * tokens, nfe=nfe, nfe_prefill=1,
                          wall_time_s=nfe * self.spf)  # fmt: skip


@pytest.fixture
def clock(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(timing.time, "perf_counter", lambda: now[0])  # the one timer's clock
    return now


def test_fake_engine_is_an_engine(clock):
    assert isinstance(FakeEngine(2, 0.1, clock), Engine)


def test_protocol_numbers(clock):
    engine = FakeEngine(tpf=2, seconds_per_forward=0.5, clock=clock)
    prompts = ["a" * 4, "b" * 8, "c" * 2, "d" * 6]  # 4, 8, 2, 6 tokens -> 2, 4, 1, 3 forwards
    run = measure_latency(engine, prompts, max_new_tokens=100, warmup=3, progress=False)
    timings, summary = run.timings, run.summary
    # Warm-up requests cycle over the prompts and are not measured.
    assert engine.prompts_seen == prompts[:3] + prompts
    assert [t.wall_s for t in timings] == [1.0, 2.0, 0.5, 1.5]
    assert [t.nfe for t in timings] == [2, 4, 1, 3]
    assert summary.n_requests == 4 and summary.warmup == 3
    assert summary.median_s == pytest.approx(1.25)
    assert summary.p90_s == pytest.approx(1.5 + 0.7 * 0.5)  # linear interpolation between 1.5 and 2.0
    assert summary.tokens_per_s == pytest.approx(20 / 5.0)  # Σ tokens / Σ time
    assert summary.tpf == pytest.approx(20 / 10)  # Σ tokens / Σ NFE
    metrics = summary.metrics()
    assert metrics["latency_median_s"] == summary.median_s and metrics["nfe_mean"] == 2.5
    assert summary.last_line() == "median_s=1.25 p90_s=1.85 tokens_per_s=4 tpf=2"


def test_tokens_per_s_is_a_ratio_of_sums_not_a_mean_of_rates():
    timings = [RequestTiming(wall_s=1.0, tokens=100, nfe=50), RequestTiming(wall_s=9.0, tokens=100, nfe=50)]
    summary = summarize(timings)
    assert summary.tokens_per_s == pytest.approx(20.0)  # the mean of rates would be 55.6


def test_gpu_engines_are_synchronised_around_each_request(clock, monkeypatch):
    calls = []
    engine = FakeEngine(tpf=1, seconds_per_forward=0.1, clock=clock, device="cuda:0")
    assert callable(latency.synchronizer(engine.device))  # built (not called: no GPU needed)
    monkeypatch.setattr(
        latency, "synchronizer", lambda device: lambda: calls.append(len(engine.prompts_seen))
    )
    measure_latency(engine, ["aa", "bbb"], max_new_tokens=8, warmup=1, progress=False)
    assert calls == [0, 1, 1, 2, 2, 3]  # before and after each of the 3 requests


def test_cpu_engine_needs_no_synchronisation(clock):
    assert latency.synchronizer(FakeEngine(1, 0.1, clock).device) is None


def test_warm_up_covers_every_compiled_shape_of_the_suite(clock):
    prompts = ["a", "bb", "ccc", "dddd"]
    engine = FakeEngine(1, 0.1, clock, shapes={"a": 256, "bb": 256, "ccc": 512, "dddd": 256})
    run = measure_latency(engine, prompts, max_new_tokens=8, warmup=1, progress=False)
    assert engine.prompts_seen == ["a", "ccc"] + prompts  # "ccc" compiles the second shape before timing
    assert run.warmup == 2 and len(run.timings) == 4


def test_after_request_runs_outside_the_timing_and_gives_the_overhead(clock):
    engine = FakeEngine(tpf=1, seconds_per_forward=1.0, clock=clock)

    def bare(generation):
        clock[0] += 100.0  # far slower than the request: it must not be in the request's time
        return generation.nfe * 0.5

    run = measure_latency(
        engine, ["aa", "bbbb"], max_new_tokens=8, warmup=0, after_request=bare, progress=False
    )
    assert [t.wall_s for t in run.timings] == [2.0, 4.0]
    assert run.overhead == pytest.approx(6.0 / 3.0)


def test_percentile_edges():
    assert percentile([3.0], 90) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 50) == 3.0
    assert percentile([5.0, 1.0], 0) == 1.0 and percentile([5.0, 1.0], 100) == 5.0
    with pytest.raises(InputError):
        percentile([], 50)


@pytest.mark.parametrize("prompts, warmup, max_new, message", [
    ([], 1, 8, "prompt set is empty"),
    (["a"], -1, 8, "warmup must be >= 0"),
    (["a"], 0, 0, "max_new_tokens must be a positive integer"),
])  # fmt: skip
def test_bad_protocol_arguments(clock, prompts, warmup, max_new, message):
    with pytest.raises(InputError, match=message):
        measure_latency(FakeEngine(1, 0.1, clock), prompts, max_new, warmup=warmup, progress=False)
