"""GPU benchmark: Triton W4A16 vs dequantize-then-matmul vs bf16 nn.Linear at batch-1 block shapes.

    python -m orl.kernels.bench_gpu [--out results/nvfp4_kernel_bench.json] [--iters 200]

Rows are the M x K -> N matmuls one decoding step of a block-diffusion model runs
at batch 1: M is the number of rows in flight (1 for AR-style decoding, the block
size, 32, for a diffusion step, up to 64), K x N the layer shapes. Every timing is
the median of `--iters` launches measured with CUDA events after warm-up; each row
also records the kernel's relative error against the float32 reference, so a fast
but wrong configuration cannot pass unnoticed. The Triton kernel is timed with its
default tiles and with a small sweep of tile/split-K settings; both are reported.

On a machine without CUDA it says so and exits with status 2; with --out it
writes a record whose status is "not run: <reason>".
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from orl.io import atomic_write_json

SHAPES = ((1024, 1024), (2560, 9728), (9728, 2560), (4096, 4096))  # (K, N)
ROWS = (1, 16, 32, 64)
SWEEP = (  # block_n, block_k, split_k, num_warps
    (32, 128, 1, 4),
    (64, 128, 1, 4),
    (128, 128, 1, 8),
    (64, 256, 1, 4),
    (32, 128, 4, 4),
    (64, 128, 4, 4),
    (64, 256, 2, 4),
    (64, 128, 8, 4),
)


def time_cuda(fn, iters: int, warmup: int = 20) -> float:
    """Median milliseconds of `fn()` over `iters` runs, each bracketed by CUDA events."""
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


def environment() -> dict:
    import triton

    props = torch.cuda.get_device_properties(0)
    return {
        "gpu": props.name,
        "capability": list(torch.cuda.get_device_capability(0)),
        "sms": props.multi_processor_count,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def time_wall(fn, iters: int, warmup: int = 1) -> float:
    """Median milliseconds by the host clock: for dry runs of the script off the GPU."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def bench_shape(m: int, k: int, n: int, iters: int, *, device: str = "cuda", timer=time_cuda) -> dict:
    """One row of the table. `device` and `timer` exist so the tests can dry-run it on the CPU."""
    from orl.kernels.nvfp4 import dequantize_nvfp4, quantize_nvfp4
    from orl.kernels.reference import dequantize_matmul
    from orl.kernels.triton_w4a16 import default_tiles, w4a16_matmul

    gen = torch.Generator(device=device).manual_seed(m * 7919 + k * 31 + n)
    w = torch.randn(n, k, device=device, generator=gen) * 0.02
    x = torch.randn(m, k, device=device, generator=gen).to(torch.bfloat16)
    q = quantize_nvfp4(w, name="bench.weight")
    w_bf16 = w.to(torch.bfloat16)
    reference = x.float() @ dequantize_nvfp4(q).T

    def rel_err(y: torch.Tensor) -> float:
        return float((y.float() - reference).abs().max() / reference.abs().max())

    def triton_call(**tiles):
        return lambda: w4a16_matmul(x, q.packed, q.block_scale, q.tensor_scale, **tiles)

    row = {"m": m, "k": k, "n": n, "activation_dtype": "bfloat16"}
    row["bf16_linear_ms"] = timer(lambda: F.linear(x, w_bf16), iters)
    row["dequant_matmul_ms"] = timer(lambda: dequantize_matmul(x, q, compute_dtype=torch.bfloat16), iters)
    row["triton_default_tiles"] = default_tiles(m, n, k, x.device)
    row["triton_default_ms"] = timer(triton_call(), iters)
    row["triton_default_rel_err"] = rel_err(triton_call()())

    best = None
    sweep = []
    for block_n, block_k, split_k, warps in SWEEP:
        tiles = {"block_n": block_n, "block_k": block_k, "split_k": split_k, "num_warps": warps}
        try:
            ms = timer(triton_call(**tiles), iters)
            err = rel_err(triton_call(**tiles)())
        except Exception as exc:  # a tile that does not compile on this GPU is recorded, not fatal
            sweep.append({**tiles, "error": f"{type(exc).__name__}: {exc}"[:300]})
            continue
        sweep.append({**tiles, "ms": ms, "rel_err": err})
        if err < 1e-2 and (best is None or ms < best["ms"]):
            best = sweep[-1]
    row["triton_sweep"] = sweep
    row["triton_best"] = best
    row["triton_best_ms"] = best["ms"] if best else None
    best_ms = row["triton_best_ms"] or row["triton_default_ms"]
    row["speedup_vs_dequant"] = row["dequant_matmul_ms"] / best_ms
    row["speedup_vs_bf16"] = row["bf16_linear_ms"] / best_ms
    # Bytes the kernel must read at least: packed weights + scales + activations.
    min_bytes = q.nbytes() + x.numel() * x.element_size()
    row["triton_gbps"] = min_bytes / (best_ms * 1e-3) / 1e9
    return row


def print_table(rows: list[dict]) -> None:
    """One line per shape: times in microseconds, speedups of the best Triton tiles."""
    header = (
        f"{'M':>3} {'K':>5} {'N':>5} | {'bf16 us':>8} {'deq+mm us':>9} {'triton us':>9} {'best us':>8} | "
        f"{'x deq':>6} {'x bf16':>6} {'GB/s':>6} {'rel err':>8}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        best_us = (r["triton_best_ms"] or float("nan")) * 1e3
        print(
            f"{r['m']:>3} {r['k']:>5} {r['n']:>5} | {r['bf16_linear_ms'] * 1e3:>8.1f} "
            f"{r['dequant_matmul_ms'] * 1e3:>9.1f} {r['triton_default_ms'] * 1e3:>9.1f} {best_us:>8.1f} | "
            f"{r['speedup_vs_dequant']:>6.2f} {r['speedup_vs_bf16']:>6.2f} {r['triton_gbps']:>6.0f} "
            f"{r['triton_default_rel_err']:>8.1e}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m orl.kernels.bench_gpu",
        description="Time the NVFP4 Triton W4A16 kernel against dequantize-then-matmul and bf16 nn.Linear.",
    )
    parser.add_argument("--out", help="write the records to this JSON file")
    parser.add_argument("--iters", type=int, default=200, help="timed launches per measurement (median)")
    parser.add_argument("--rows", default=",".join(map(str, ROWS)), help="comma-separated M values")
    args = parser.parse_args(argv)

    if not torch.cuda.is_available():
        reason = "no CUDA device: this benchmark times GPU kernels and measures nothing on the CPU"
        print(f"bench_gpu: {reason}", file=sys.stderr)
        if args.out:
            atomic_write_json(args.out, {"benchmark": "nvfp4_w4a16_kernel", "status": f"not run: {reason}"})
        return 2

    rows = []
    for k, n in SHAPES:
        for m in (int(v) for v in args.rows.split(",")):
            rows.append(bench_shape(m, k, n, args.iters))
            print(f"done M={m} K={k} N={n}", file=sys.stderr)
    print_table(rows)
    record = {
        "benchmark": "nvfp4_w4a16_kernel",
        "status": "measured",
        "environment": environment(),
        "rows": rows,
    }
    if args.out:
        atomic_write_json(args.out, record)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
