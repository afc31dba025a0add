"""`orl bench-scale`: a random-weight model of a real architecture against the hardware floor (Table 3b).

Rows, batch 1, fixed-length generations (the end token is ignored): dlmrt (compiled; CUDA graphs on
a GPU), dlmrt eager, the reference decoder, and transformers' own AR model of the same shapes. Each
`scale_bench` record carries the time per forward, tokens/s, TPF, kernels per step (dlmrt) and the
floor of orl/eval/scale.py (for the dlmrt rows also the compute floor and the roofline); the last
printed line is `floor_ratio=<dlmrt time per forward / bandwidth floor>`.
"""

from __future__ import annotations

from orl.commands.common import parse_device, parse_policy, torch_dtype
from orl.commands.flags import add_model_args, add_progress_flag, add_warmup_flag
from orl.engines.kinds import SCALE_ENGINES, SCALE_RESIDUALS
from orl.kernels import CPU_LINEARS
from orl.model.archs import ARCHS


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "bench-scale",
        help="random-weight real-size model: time per forward against the bandwidth floor",
        description="Build a random-weight model with a real checkpoint's shapes (nothing downloaded) and "
        "time it at batch 1 on fixed-length generations in dlmrt (compiled / graph-captured and eager), the "
        "reference decoder and transformers' AR model of the same size. Writes one 'scale_bench' record per "
        "engine with time per forward, tokens/s, kernels per step and the floor (weight + KV bytes read per "
        "forward over the copy bandwidth measured in the same run); prints floor_ratio=<x> for the dlmrt "
        "row last. Speed only: random weights decode nonsense.",
    )
    _add_run_flags(p)
    _add_engine_flags(p)
    p.add_argument("--out", required=True, help="records file (.jsonl) to write")
    add_model_args(p)
    add_progress_flag(p)
    p.set_defaults(func=run_bench_scale)


def _add_run_flags(p) -> None:
    """The architecture, the policy and the requests every engine decodes."""
    p.add_argument(
        "--arch", required=True, choices=sorted(ARCHS), help="architecture (shapes of the real config)"
    )
    p.add_argument(
        "--block",
        type=int,
        default=None,
        help="block size for qwen3-* / tiny (default: 16; sdar-* fix theirs)",
    )
    p.add_argument(
        "--policy", default="fixed:1", help="commit policy; fixed:K commits K tokens per step (TPF K)"
    )
    p.add_argument(
        "--max-new-tokens", type=int, default=256, help="tokens generated per request (end token ignored)"
    )
    p.add_argument("--prompt-len", type=int, default=128, help="random prompt tokens per request")
    p.add_argument("--requests", type=int, default=2, help="timed requests per engine")
    add_warmup_flag(p, "requests per engine (compilation, capture)")


def _add_engine_flags(p) -> None:
    """Which engines run, how dlmrt's step and the machine's floor are measured."""
    p.add_argument(
        "--engines",
        default=",".join(SCALE_ENGINES),
        help=f"comma-separated subset of {', '.join(SCALE_ENGINES)} (the reference decoder recomputes the "
        "whole context every step: slow)",
    )
    p.add_argument("--repeats", type=int, default=20, help="chunk repetitions for dlmrt's step time")
    p.add_argument(
        "--copy-mb", type=int, default=1024, help="size of the bandwidth-measuring copy (past every cache)"
    )
    p.add_argument(
        "--gemm-size",
        type=int,
        default=2048,
        help="side of the square matmul whose FLOP/s set the compute floor (default: 2048)",
    )
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    p.add_argument(
        "--cpu-linear",
        choices=CPU_LINEARS,
        default="auto",
        help="dlmrt's CPU matmuls: auto (default) times F.linear (MKL) and oneDNN on the model's shapes and "
        "takes the faster; aten or onednn force one (orl/kernels/onednn.py)",
    )
    p.add_argument(
        "--profile", action="store_true", help="count the kernels (CUDA) / operators (CPU) per dlmrt step"
    )
    p.add_argument(
        "--residual",
        choices=SCALE_RESIDUALS,
        default="adapter",
        help="the diffusion rows decode ORL's model: its residual context z = P @ E with the adapter "
        "(default; docs/method.md §2), v1's entropy-weighted form, or off (a base dLLM). With it on, each "
        "step reads the embedding table once more and the floor counts that read",
    )
    p.add_argument(
        "--no-fuse",
        action="store_true",
        help="dlmrt without fused q/k/v and gate/up GEMMs (7 linears a layer, not 4): the A/B of "
        "orl/model/fusion.py (by default fused, except on the CPU when its linears go through MKL)",
    )


def _check(args) -> list[str]:
    from orl.errors import InputError
    from orl.eval.scale_bench_run import scale_engine_names

    names = scale_engine_names(args.engines)
    for name in ("max_new_tokens", "prompt_len", "requests", "repeats", "copy_mb", "gemm_size"):
        if getattr(args, name) < 1:
            raise InputError(
                f"--{name.replace('_', '-')}: expected a positive integer, got {getattr(args, name)}"
            )
    return names


def run_bench_scale(args) -> int:
    import torch

    from orl.eval.scale_bench import ScaleRun
    from orl.eval.scale_bench_run import ScaleSetup, floor_ratio_line, scale_bench_run
    from orl.records import write_records

    names = _check(args)
    device = parse_device(args.device)
    setup = ScaleSetup(
        args.block,
        parse_policy(args.policy),
        device,
        torch_dtype(args.dtype, device) or torch.float32,
        args.requests,
        args.copy_mb,
        args.gemm_size,
        cpu_linear=args.cpu_linear,
        fuse=False if args.no_fuse else None,
        threads=args.threads,
        residual=args.residual,
    )
    timing = (args.arch, args.prompt_len, args.max_new_tokens, args.warmup, args.repeats)
    run = ScaleRun(*timing, profile=args.profile, progress=not args.no_progress)
    records = scale_bench_run(names, setup, run, report=lambda line: print(line, flush=True))
    write_records(args.out, records)
    print(floor_ratio_line(names, records))
    return 0
