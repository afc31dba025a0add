"""How close a batch-1 block forward's matmuls can come to the copy-bandwidth floor on this CPU.

A dlmrt step multiplies a block of B rows (16 by default) by every weight of the model. This
times that product for Qwen3-0.6B's weight shapes in fp32 three ways, each against its floor
(weight bytes / the copy bandwidth measured here, orl/eval/scale.py):
- aten's `linear` (what the model runs);
- MKL's packed sgemm (`torch.ops.mkl._mkl_linear` on a weight whose panel layout was built
  once by `_mkl_reorder_linear_weight`);
- oneDNN on its packed weight (orl.kernels.onednn, what dlmrt's `cpu_linear` "onednn" runs).
A forward reads each weight once from memory, so every shape is timed on `--cache-mb` worth of
distinct copies of its weight, one after the other: a projection timed alone would sit in the
last-level cache and look faster than it runs in a forward. `--fused` takes the shapes dlmrt runs
with oneDNN (q/k/v and gate/up concatenated, orl/model/fusion.py). `--residual` also times ORL's
residual context z = P @ E (the block's distributions over the vocabulary times the embedding matrix),
in fp32 and bf16, through torch's matmul and through oneDNN on E's packed transpose (what dlmrt runs
with oneDNN linears), against the time to read E.

    python scripts/cpu_gemm_floor.py [--rows 16] [--threads 0] [--fused] [--residual] [--cache-mb 128]
"""

from __future__ import annotations

import argparse
import time

import torch

from orl.eval.scale import copy_bandwidth
from orl.kernels.onednn import onednn_linear, onednn_matmul

# (in_features, out_features, how many per forward) of Qwen3-0.6B: 28 layers, tied LM head.
SHAPES = [(1024, 2048, 28), (1024, 1024, 56), (2048, 1024, 28), (1024, 3072, 56), (3072, 1024, 28),
          (1024, 151936, 1)]  # fmt: skip
FUSED_SHAPES = [(1024, 4096, 28), (2048, 1024, 28), (1024, 6144, 28), (3072, 1024, 28), (1024, 151936, 1)]


def seconds(fn, copies: int, repeats: int = 20) -> float:
    """Mean seconds of fn(i) over `repeats` calls after a warm-up, i cycling through the weight copies."""
    for i in range(max(3, copies)):
        fn(i % copies)
    start = time.perf_counter()
    for i in range(repeats):
        fn(i % copies)
    return (time.perf_counter() - start) / repeats


def three_ways(x: torch.Tensor, ws: list[torch.Tensor]) -> tuple[float, float, float]:
    """Seconds of x @ w.T through aten, MKL packed and oneDNN packed, w cycling through the copies `ws`."""
    rows, copies = x.shape[0], len(ws)
    packed = [torch.ops.mkl._mkl_reorder_linear_weight(w, rows) for w in ws]
    aten = seconds(lambda i: torch.nn.functional.linear(x, ws[i]), copies)
    mkl = seconds(lambda i: torch.ops.mkl._mkl_linear(x, packed[i], ws[i], None, rows), copies)
    onednn = seconds(lambda i: onednn_linear(x, ws[i]), copies)
    return aten, mkl, onednn


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=16, help="rows of the activation (a block's tokens)")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    parser.add_argument("--fused", action="store_true", help="q/k/v and gate/up as one weight each (dlmrt)")
    parser.add_argument(
        "--cache-mb", type=int, default=128, help="distinct weight copies per shape, at least this many MB"
    )
    parser.add_argument("--residual", action="store_true", help="also time ORL's residual context z = P @ E")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    bandwidth = copy_bandwidth("cpu")
    print(f"copy bandwidth {bandwidth / 1e9:.2f} GB/s, {torch.get_num_threads()} threads, {args.rows} rows")
    generator = torch.Generator().manual_seed(0)
    totals = {"aten": 0.0, "mkl": 0.0, "onednn": 0.0, "floor": 0.0}
    for k, n, count in FUSED_SHAPES if args.fused else SHAPES:
        x = torch.randn(args.rows, k, generator=generator)
        copies = min(count, max(1, -(-args.cache_mb * 2**20 // (4 * k * n))))
        ws = [torch.randn(n, k, generator=generator) * 0.02 for _ in range(copies)]
        aten, mkl, onednn = three_ways(x, ws)
        w = ws[0]
        floor = w.numel() * w.element_size() / bandwidth
        print(
            f"{k:>5} x {n:<6} x{count:<3} aten {aten * 1e3:8.3f} ms ({aten / floor:.2f}x floor)   "
            f"mkl packed {mkl * 1e3:8.3f} ms ({mkl / floor:.2f}x)   onednn {onednn * 1e3:8.3f} ms "
            f"({onednn / floor:.2f}x)"
        )
        totals["aten"] += aten * count
        totals["mkl"] += mkl * count
        totals["onednn"] += onednn * count
        totals["floor"] += floor * count
    print(
        f"per forward: aten {totals['aten'] * 1e3:.1f} ms, mkl packed {totals['mkl'] * 1e3:.1f} ms, "
        f"onednn {totals['onednn'] * 1e3:.1f} ms, floor {totals['floor'] * 1e3:.1f} ms"
    )
    if args.residual:
        time_residual(args.rows, bandwidth, generator)
    return 0


def time_residual(rows: int, bandwidth: float, generator: torch.Generator) -> None:
    """z = P @ E at Qwen3-0.6B's vocabulary and width, through matmul and through oneDNN, fp32 and bf16."""
    vocab, hidden = SHAPES[-1][1], SHAPES[-1][0]
    probs = torch.softmax(torch.randn(rows, vocab, generator=generator), dim=-1)
    embedding = torch.randn(vocab, hidden, generator=generator) * 0.02
    for dtype in (torch.float32, torch.bfloat16):
        p, e = probs.to(dtype), embedding.to(dtype)
        matmul = seconds(lambda _, p=p, e=e: p @ e, 1, repeats=5)
        onednn = seconds(lambda _, p=p, e=e: onednn_matmul(p, e), 1, repeats=5)
        floor = e.numel() * e.element_size() / bandwidth
        print(
            f"z = P @ E, {rows} x {vocab} by {vocab} x {hidden}, {str(dtype).removeprefix('torch.')}: matmul "
            f"{matmul * 1e3:.1f} ms ({matmul / floor:.2f}x reading E), onednn {onednn * 1e3:.1f} ms "
            f"({onednn / floor:.2f}x)"
        )


if __name__ == "__main__":
    raise SystemExit(main())
