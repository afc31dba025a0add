"""`orl bench-engine`: dlmrt (compiled / graph-captured) vs dlmrt eager vs the reference decoder (Table 3).

Same checkpoint, same policy, same prompts, batch 1, one process; what is measured is
orl/eval/engine_bench.py's. One `engine_bench` record per engine; the last three printed lines
are `overhead=<x>`, `speedup_vs_eager=<x>`, `speedup_vs_reference=<x>`.
"""

from __future__ import annotations

from orl.commands.checks import out_file, positive_int
from orl.commands.choice_files import policy_arg
from orl.commands.common import chat_renderer, compile_notice, parse_device, torch_dtype
from orl.commands.flags import (
    SHORT_DIFFICULTIES,
    add_block_size_flag,
    add_chat_flag,
    add_model_args,
    add_policy_flag,
    add_progress_flag,
    add_split_flag,
    add_suite_file_flag,
    add_warmup_flag,
)
from orl.tasks import SUITES


def register(subparsers) -> None:
    from orl.engines.registry import DIFFUSION_ENGINES

    p = subparsers.add_parser(
        "bench-engine",
        help="benchmark dlmrt (compiled, eager) against the reference decoder; write records",
        description="Decode a suite's prompts at batch 1 with dlmrt compiled (CUDA graphs on a GPU), dlmrt "
        "eager and the reference decoder (same checkpoint and policy), in interleaved rounds: tokens/s, "
        "latency, TPF, dlmrt's overhead over its bare model forwards and its step time. Writes one "
        "engine_bench record per engine and prints overhead=, speedup_vs_eager= and speedup_vs_reference= "
        "as the last lines.",
    )
    p.add_argument("--ckpt", required=True, help="block-diffusion checkpoint directory")
    p.add_argument("--suite", default="tinycode", choices=SUITES, help="prompt suite")
    add_split_flag(p)
    add_suite_file_flag(p)
    p.add_argument("--difficulty", default="medium", choices=SHORT_DIFFICULTIES, help="TinyCode difficulty")
    p.add_argument("--limit", type=positive_int, default=32, help="first N problems of the suite")
    add_policy_flag(p, "threshold:0.9")
    p.add_argument(
        "--system", default=None, help="table row name stored in the records (default: model name)"
    )
    p.add_argument("--max-new-tokens", type=int, default=64, help="generation budget per prompt")
    p.add_argument("--no-residual", action="store_true", help="decode with the residual context off")
    add_block_size_flag(p)
    p.add_argument(
        "--ignore-eos",
        action="store_true",
        help="fixed-length speed runs: decode every prompt to --max-new-tokens whatever the model emits "
        "(docs/metrics.md); TPF and NFE are counted the same way",
    )
    p.add_argument(
        "--engines",
        default=",".join(DIFFUSION_ENGINES),
        help=f"comma-separated subset of {', '.join(DIFFUSION_ENGINES)}",
    )
    _add_measurement_flags(p)
    p.add_argument("--out", required=True, type=out_file, help="records file (.jsonl) to write")
    add_chat_flag(p)
    add_model_args(p)
    add_progress_flag(p)
    p.set_defaults(func=run_bench_engine)


def _add_measurement_flags(p) -> None:
    """How the engines are timed, and what else is measured on dlmrt's chunk."""
    add_warmup_flag(
        p, "requests per engine (besides one per compiled shape, where compilation and capture happen)"
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="interleaved passes over the prompts; each engine reports its median round (default: 5 on "
        "CUDA, where one pass lasts well under a second, else 1)",
    )
    p.add_argument("--repeats", type=int, default=50, help="chunk repetitions for dlmrt's step time")
    p.add_argument(
        "--sync-every",
        type=int,
        default=None,
        help="dlmrt steps per chunk between host reads (default: 1 on CPU, 2 on CUDA)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads; batch-1 steps of a tiny model gain little from more and suffer from "
        "oversubscription on a shared machine (0 = torch's default)",
    )
    p.add_argument(
        "--compile-backend", default="inductor", help="torch.compile backend of the compiled engine"
    )
    p.add_argument(
        "--profile",
        action="store_true",
        help="also count the kernels (CUDA) or operators (CPU) one dlmrt chunk launches per step, and print "
        "where their time goes",
    )
    p.add_argument(
        "--check-sync",
        action="store_true",
        help="CUDA only: check that no chunk synchronises with the host (sync debug mode 'error'); a sync "
        "found is recorded and makes the exit code 1",
    )


def _engines(spec: str) -> list[str]:
    from orl.engines.registry import DIFFUSION_ENGINES
    from orl.errors import InputError

    names = [n.strip() for n in spec.split(",") if n.strip()]
    if not names or any(n not in DIFFUSION_ENGINES for n in names):
        raise InputError(
            f"--engines: unknown or empty {spec!r}; expected names from {', '.join(DIFFUSION_ENGINES)}"
        )
    return names


def _check(args) -> None:
    from orl.errors import InputError

    for name in ("limit", "repeats", "rounds"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise InputError(f"--{name}: expected a positive integer, got {value}")
    if args.threads < 0:
        raise InputError(f"--threads: expected >= 0, got {args.threads}")
    if args.check_sync and not args.device.startswith("cuda"):
        raise InputError("--check-sync: needs --device cuda (it uses CUDA's sync debug mode)")


def run_bench_engine(args) -> int:
    import torch

    from orl.eval.engine_bench import (
        BenchPlan,
        bench_engines,
        bench_report,
        engine_bench_records,
        prepare_graph_profiling,
    )
    from orl.records import write_records
    from orl.tasks import load_suite

    _check(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    problems = load_suite(
        args.suite, split=args.split, path=args.suite_file, difficulty=args.difficulty, limit=args.limit
    )
    chat = chat_renderer(args)
    prompts = [chat(p["prompt"]) if chat else p["prompt"] for p in problems]
    ckpt, engines = _build(args)
    rounds = args.rounds or (5 if ckpt.model.embedding.device.type == "cuda" else 1)
    plan = BenchPlan(
        args.max_new_tokens,
        rounds,
        args.warmup,
        args.repeats,
        profile=args.profile,
        check_sync=args.check_sync,
        progress=not args.no_progress,
    )
    if args.profile:
        prepare_graph_profiling(ckpt.model.embedding.device)  # before any engine captures a CUDA graph
    if "dlmrt" in engines:
        compile_notice("dlmrt", parse_device(args.device), "bench-engine")
    results = bench_engines(engines, prompts, plan)
    write_records(
        args.out,
        engine_bench_records(
            engines,
            results,
            plan,
            suite=args.suite,
            n_problems=len(problems),
            system=args.system,
            chat_template=args.chat,
        ),
    )
    print("\n".join(bench_report(engines, results, len(prompts), check_sync=args.check_sync)))
    if ckpt.config.get("quantization_config"):
        from orl.kernels.quantize import weight_bytes

        print(f"weight_bytes_ratio={weight_bytes(ckpt.model)['weight_bytes_ratio']:.4f}")
    return 1 if any(r.host_sync for r in results.values()) else 0


def _build(args):
    """(checkpoint, {name: engine}) for --engines, every engine built by the registry on one loaded
    checkpoint."""
    from orl.decoding import Policy
    from orl.engines.dlmrt import DlmrtConfig
    from orl.engines.registry import diffusion_engine
    from orl.model.checkpoint import load_checkpoint

    names = _engines(args.engines)
    policy = Policy.parse(policy_arg(args.policy))
    ckpt = load_checkpoint(
        args.ckpt, device=parse_device(args.device), dtype=torch_dtype(args.dtype, args.device)
    )
    config = DlmrtConfig(sync_every=args.sync_every, compile_backend=args.compile_backend)
    return ckpt, {
        name: diffusion_engine(
            name,
            ckpt,
            policy=policy,
            residual=not args.no_residual,
            ignore_eos=args.ignore_eos,
            dlmrt_config=config,
            block_size=args.block_size,
        )
        for name in names
    }
