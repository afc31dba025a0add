"""GPU benchmark: Triton W4A16 vs dequantize-then-matmul vs bf16 nn.Linear at batch-1 block shapes.

    python -m orl.kernels.bench_gpu [--shapes all|4b] [--rows 1,16,32,64] [--out FILE.json] [--iters 50]

Rows are the M x K -> N matmuls one decoding step of a block-diffusion model runs
at batch 1: M is the number of rows in flight (1 for AR-style decoding, the block
size, 32, for a diffusion step, up to 64), K x N the layer shapes. `--shapes 4b`
restricts the rows to Qwen3-4B's linear layers at M = 16 and 32.

How a candidate is timed, and why. dlmrt runs these matmuls inside captured CUDA
graphs, where the host's launch cost is gone; timing one eager launch between
CUDA events measures mostly that launch cost (tens of microseconds for Triton's
Python launcher, against a few microseconds of kernel). So `time_graph` captures
`calls` back-to-back calls of the candidate in one torch.cuda.CUDAGraph, replays
it `--iters` times, each replay between CUDA events, and reports the median
replay time divided by `calls`. The weights must come from memory, not from the
L2 cache, as in a real forward pass: the calls cycle through enough distinct
copies of the weight (packed, scales) that the copies together are at least
twice the L2 (`copies_to_flush`), for bf16 and NVFP4 alike. The old figure, one
eager launch between events, is kept as `*_launch_ms`.

Each candidate also records its relative error against the float32 reference, so
a fast but wrong configuration cannot pass unnoticed. The Triton kernel is timed
with its default settings and a small sweep; the best correct one is reported,
with the bytes each path must move and the achieved GB/s. `w4a16_vs_bf16` is the
best W4A16 time over the bf16 nn.Linear time (issue 32's target: <= 0.5).

On a machine without CUDA it says so and exits with status 2; with --out it
writes a record whose status is "not run: <reason>". `bench_shape` takes the
timers as arguments so the tests can dry-run it on the CPU under Triton's
interpreter with a host clock.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from orl.io import atomic_write_json

SHAPES = ((1024, 1024), (2560, 9728), (9728, 2560), (4096, 4096))  # (K, N)
ROWS = (1, 16, 32, 64)
# Qwen3-4B: hidden 2560, intermediate 9728, 32 query and 8 key/value heads of 128.
QWEN3_4B_SHAPES = (  # (K, N)
    (2560, 4096),  # q_proj
    (2560, 1024),  # k_proj, v_proj
    (2560, 6144),  # fused qkv
    (4096, 2560),  # o_proj
    (2560, 9728),  # gate_proj, up_proj
    (2560, 19456),  # fused gate_up
    (9728, 2560),  # down_proj
)
QWEN3_4B_ROWS = (16, 32)
SHAPE_SETS = {"all": (SHAPES, ROWS), "4b": (QWEN3_4B_SHAPES, QWEN3_4B_ROWS)}
SWEEP = (  # block_n, block_k, split_k, num_warps, num_stages, decode
    (64, 256, 1, 4, 3, "bits"),
    (32, 256, 1, 4, 3, "bits"),
    (128, 256, 1, 8, 3, "bits"),
    (64, 128, 1, 4, 4, "bits"),
    (64, 512, 1, 8, 2, "bits"),
    (64, 256, 2, 4, 3, "bits"),
    (64, 256, 4, 4, 3, "bits"),
    (32, 256, 8, 4, 3, "bits"),
    (64, 256, 4, 8, 4, "bits"),
    (64, 256, 2, 4, 3, "lut"),
    (64, 256, 1, 4, 3, "asm"),
    (64, 256, 4, 4, 3, "asm"),
)
SWEEP_KEYS = ("block_n", "block_k", "split_k", "num_warps", "num_stages", "decode")
GRAPH_CALLS = 20  # calls captured per graph at least (more when more weight copies are needed)
L2_FALLBACK_BYTES = 60 * 1024 * 1024  # H200's L2, when the device does not report its own
MAX_REL_ERR = 1e-2  # a candidate above this is recorded but never "best"


def copies_to_flush(bytes_per_copy: int, l2_bytes: int, factor: int = 2) -> int:
    """Distinct weight copies whose bytes together are at least `factor` x the L2 size.

    Cycling through them, each call's weight was last read at least (copies - 1)
    copies ago, so it has been evicted from the L2 and comes from memory.
    """
    if bytes_per_copy <= 0:
        raise ValueError(f"copies_to_flush: bytes_per_copy must be positive, got {bytes_per_copy}")
    return max(2, math.ceil(factor * l2_bytes / bytes_per_copy))


def calls_per_graph(copies: int, min_calls: int = GRAPH_CALLS) -> int:
    """Calls captured in one graph: at least `min_calls`, and every copy used at least once."""
    return max(min_calls, copies)


def device_l2_bytes(device: int = 0) -> int:
    """The GPU's L2 size from torch when it reports one, else H200's 60 MB."""
    size = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 0
    return int(size) if size > 0 else L2_FALLBACK_BYTES


def time_graph(fn, copies: int, iters: int, calls: int = GRAPH_CALLS) -> float:
    """Milliseconds per call of `fn(i)` (i = the weight copy) replayed from a CUDA graph.

    Warm-up (Triton compiles, the allocator grows, split-K counters are made) runs
    on a side stream outside the capture, as torch's graph recipe requires. One
    graph holds `calls_per_graph(copies, calls)` calls cycling through the copies;
    the median replay time over `iters` replays is divided by the calls in it.
    """
    n_calls = calls_per_graph(copies, calls)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(min(n_calls, copies)):
            fn(i)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(n_calls):
            fn(i % copies)
    graph.replay()  # first replay uploads the graph
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / n_calls)
    del graph
    return statistics.median(times)


def time_launch(fn, iters: int, warmup: int = 20) -> float:
    """Median milliseconds of one eager `fn()` between CUDA events: mostly the host's launch cost."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def time_wall(fn, copies: int, iters: int, calls: int = GRAPH_CALLS) -> float:
    """`time_graph`'s stand-in off the GPU: the same calls over the same copies, by the host clock."""
    n_calls = calls_per_graph(copies, calls)
    fn(0)
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        for i in range(n_calls):
            fn(i % copies)
        times.append((time.perf_counter() - start) * 1e3 / n_calls)
    return statistics.median(times)


def time_host(fn, iters: int) -> float:
    """`time_launch`'s stand-in off the GPU: median host milliseconds of `fn()`."""
    fn()
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def environment() -> dict:
    import triton

    props = torch.cuda.get_device_properties(0)
    return {
        "gpu": props.name,
        "capability": list(torch.cuda.get_device_capability(0)),
        "sms": props.multi_processor_count,
        "l2_bytes": device_l2_bytes(0),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def bench_shape(
    m: int,
    k: int,
    n: int,
    iters: int,
    *,
    device: str = "cuda",
    timer=time_graph,
    launch_timer=time_launch,
    l2_bytes: int | None = None,
    graph_calls: int = GRAPH_CALLS,
    sweep=SWEEP,
) -> dict:
    """One row of the table. `device`, the timers, `l2_bytes` and `graph_calls` exist so the
    tests can dry-run it on the CPU (time_wall, time_host, a tiny "L2", few calls)."""
    from orl.kernels.nvfp4 import NVFP4Tensor, dequantize_nvfp4, quantize_nvfp4
    from orl.kernels.reference import dequantize_matmul
    from orl.kernels.triton_w4a16 import default_tiles, w4a16_matmul

    if l2_bytes is None:
        l2_bytes = device_l2_bytes() if device == "cuda" else L2_FALLBACK_BYTES
    gen = torch.Generator(device=device).manual_seed(m * 7919 + k * 31 + n)
    w = torch.randn(n, k, device=device, generator=gen) * 0.02
    x = torch.randn(m, k, device=device, generator=gen).to(torch.bfloat16)
    q = quantize_nvfp4(w, name="bench.weight")
    w_bf16 = w.to(torch.bfloat16)
    reference = x.float() @ dequantize_nvfp4(q).T  # what every NVFP4 path should compute
    reference_bf16 = x.float() @ w_bf16.float().T  # what bf16 nn.Linear should compute

    # Distinct copies of each path's weight, together >= 2x the L2 (copies_to_flush).
    bf16_copies = copies_to_flush(w_bf16.numel() * w_bf16.element_size(), l2_bytes)
    nvfp4_copies = copies_to_flush(q.nbytes(), l2_bytes)
    w_bf16s = [w_bf16] + [w_bf16.clone() for _ in range(bf16_copies - 1)]
    qs = [q] + [
        NVFP4Tensor(q.packed.clone(), q.block_scale.clone(), q.tensor_scale.clone(), q.shape)
        for _ in range(nvfp4_copies - 1)
    ]

    def rel_err(y: torch.Tensor, ref: torch.Tensor = reference) -> float:
        return float((y.float() - ref).abs().max() / ref.abs().max())

    def triton_call(**settings):
        return lambda i: w4a16_matmul(x, qs[i].packed, qs[i].block_scale, qs[i].tensor_scale, **settings)

    def bf16_call(i):
        return F.linear(x, w_bf16s[i])

    def dequant_call(i):
        return dequantize_matmul(x, qs[i], compute_dtype=torch.bfloat16)

    row = {
        "m": m,
        "k": k,
        "n": n,
        "activation_dtype": "bfloat16",
        "l2_bytes": l2_bytes,
        "bf16_weight_copies": bf16_copies,
        "nvfp4_weight_copies": nvfp4_copies,
        "graph_calls_bf16": calls_per_graph(bf16_copies, graph_calls),
        "graph_calls_nvfp4": calls_per_graph(nvfp4_copies, graph_calls),
    }
    row["bf16_linear_ms"] = timer(bf16_call, bf16_copies, iters, graph_calls)
    row["bf16_linear_launch_ms"] = launch_timer(lambda: bf16_call(0), iters)
    row["bf16_linear_rel_err"] = rel_err(bf16_call(0), reference_bf16)
    row["dequant_matmul_ms"] = timer(dequant_call, nvfp4_copies, iters, graph_calls)
    row["dequant_matmul_rel_err"] = rel_err(dequant_call(0))
    defaults = default_tiles(m, n, k, x.device)
    row["triton_default_tiles"] = defaults
    row["triton_default_ms"] = timer(triton_call(), nvfp4_copies, iters, graph_calls)
    row["triton_default_launch_ms"] = launch_timer(lambda: triton_call()(0), iters)
    row["triton_default_rel_err"] = rel_err(triton_call()(0))

    default_entry = {**{key: defaults[key] for key in SWEEP_KEYS}, "default": True}
    default_entry.update(ms=row["triton_default_ms"], rel_err=row["triton_default_rel_err"])
    candidates = [default_entry]
    sweep_rows = []
    for values in sweep:
        settings = dict(zip(SWEEP_KEYS, values, strict=True))
        try:
            ms = timer(triton_call(**settings), nvfp4_copies, iters, graph_calls)
            err = rel_err(triton_call(**settings)(0))
        except Exception as exc:  # a setting that does not compile on this GPU is recorded, not fatal
            sweep_rows.append({**settings, "error": f"{type(exc).__name__}: {exc}"[:300]})
            continue
        sweep_rows.append({**settings, "ms": ms, "rel_err": err})
        candidates.append(sweep_rows[-1])
    correct = [c for c in candidates if c["rel_err"] < MAX_REL_ERR]
    best = min(correct, key=lambda c: c["ms"]) if correct else None
    row["triton_sweep"] = sweep_rows
    row["triton_best"] = best
    row["triton_best_ms"] = best["ms"] if best else None
    if best:
        # The best setting's launch figure, for comparison with the graph figure.
        best_settings = {key: best[key] for key in SWEEP_KEYS}
        row["triton_best_launch_ms"] = launch_timer(lambda: triton_call(**best_settings)(0), iters)
    best_ms = row["triton_best_ms"] or row["triton_default_ms"]
    row["speedup_vs_dequant"] = row["dequant_matmul_ms"] / best_ms
    row["speedup_vs_bf16"] = row["bf16_linear_ms"] / best_ms
    row["w4a16_vs_bf16"] = best_ms / row["bf16_linear_ms"]  # issue 32's target: <= 0.5

    # Bytes each path must move at least: its weight (packed + scales + per-tensor scale
    # for NVFP4), the activations read and the output written, all bf16.
    io_bytes = (m * k + m * n) * x.element_size()
    row["bf16_bytes"] = w_bf16.numel() * w_bf16.element_size() + io_bytes
    row["w4a16_bytes"] = q.nbytes() + io_bytes
    row["bf16_gbps"] = row["bf16_bytes"] / (row["bf16_linear_ms"] * 1e-3) / 1e9
    row["w4a16_gbps"] = row["w4a16_bytes"] / (best_ms * 1e-3) / 1e9
    row["triton_gbps"] = row["w4a16_gbps"]  # the earlier records' name for the same figure
    return row


def print_table(rows: list[dict]) -> None:
    """One line per shape: graph-replay times per call in microseconds, bandwidths, ratios."""
    header = (
        f"{'M':>3} {'K':>5} {'N':>5} | {'bf16 us':>8} {'deq+mm us':>9} {'triton us':>9} {'best us':>8} | "
        f"{'bf16 GB/s':>9} {'w4 GB/s':>8} {'w4/bf16':>7} {'x deq':>6} {'rel err':>8} | {'best settings'}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        best = r["triton_best"]
        best_us = (r["triton_best_ms"] or float("nan")) * 1e3
        settings = " ".join(f"{key}={best[key]}" for key in SWEEP_KEYS) if best else "none correct"
        print(
            f"{r['m']:>3} {r['k']:>5} {r['n']:>5} | {r['bf16_linear_ms'] * 1e3:>8.1f} "
            f"{r['dequant_matmul_ms'] * 1e3:>9.1f} {r['triton_default_ms'] * 1e3:>9.1f} {best_us:>8.1f} | "
            f"{r['bf16_gbps']:>9.0f} {r['w4a16_gbps']:>8.0f} {r['w4a16_vs_bf16']:>7.2f} "
            f"{r['speedup_vs_dequant']:>6.2f} {r['triton_default_rel_err']:>8.1e} | {settings}"
        )


def parse_rows(text: str) -> tuple[int, ...]:
    """'16,32' -> (16, 32); every value a positive integer."""
    try:
        rows = tuple(int(v) for v in text.split(","))
    except ValueError:
        rows = ()
    if not rows or min(rows) < 1:
        raise argparse.ArgumentTypeError(f"--rows: expected comma-separated positive integers, got {text!r}")
    return rows


def bench_rows(shapes: str, rows: tuple[int, ...] | None = None) -> list[tuple[int, int, int]]:
    """The (M, K, N) rows a run measures: a shape set, optionally with other M values."""
    set_shapes, set_rows = SHAPE_SETS[shapes]
    return [(m, k, n) for k, n in set_shapes for m in (rows or set_rows)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m orl.kernels.bench_gpu",
        description="Time the NVFP4 Triton W4A16 kernel against dequantize-then-matmul and bf16 nn.Linear "
        "(per call, replayed from CUDA graphs, weights not in L2).",
    )
    parser.add_argument("--out", help="write the records to this JSON file")
    parser.add_argument("--iters", type=int, default=50, help="timed graph replays (and launches) per figure")
    parser.add_argument(
        "--shapes",
        choices=sorted(SHAPE_SETS),
        default="all",
        help="all: the generic sweep (K x N 1024x1024 .. 4096x4096, M 1..64); "
        "4b: Qwen3-4B's linear layers at M 16 and 32",
    )
    parser.add_argument("--rows", type=parse_rows, help="comma-separated M values (default: the shape set's)")
    args = parser.parse_args(argv)

    if not torch.cuda.is_available():
        reason = "no CUDA device: this benchmark times GPU kernels and measures nothing on the CPU"
        print(f"bench_gpu: {reason}", file=sys.stderr)
        if args.out:
            atomic_write_json(args.out, {"benchmark": "nvfp4_w4a16_kernel", "status": f"not run: {reason}"})
        return 2

    rows = []
    started = time.perf_counter()
    for m, k, n in bench_rows(args.shapes, args.rows):
        rows.append(bench_shape(m, k, n, args.iters))
        print(f"done M={m} K={k} N={n} ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    print_table(rows)
    record = {
        "benchmark": "nvfp4_w4a16_kernel",
        "status": "measured",
        "timing": "per call: median CUDA-graph replay time / calls per graph; weights cycled over "
        "copies >= 2x L2; *_launch_ms: one eager launch between CUDA events (host launch cost)",
        "shapes": args.shapes,
        "environment": environment(),
        "rows": rows,
    }
    if args.out:
        atomic_write_json(args.out, record)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
