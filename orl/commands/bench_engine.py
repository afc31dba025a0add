"""`orl bench-engine`: dlmrt (compiled / graph-captured) vs dlmrt eager vs the reference decoder (Table 3).

Same checkpoint, same policy, same prompts, batch 1, one process; what is measured is
orl/eval/engine_bench.py's, run by orl/eval/engine_bench_run.py. One `engine_bench` record per engine; the
last three printed lines are `overhead=<x>`, `speedup_vs_eager=<x>`, `speedup_vs_reference=<x>`.
"""

from __future__ import annotations

from orl.commands import flags
from orl.commands.checks import positive_int
from orl.commands.choice_files import policy_arg
from orl.commands.common import chat_renderer, compile_notice, load_problems, parse_device, torch_dtype


def register(subparsers) -> None:
    from orl.engines.kinds import DIFFUSION_ENGINES

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
    flags.add_suite_flags(p)
    flags.add_shared(p, "--difficulty")
    p.add_argument("--limit", type=positive_int, default=32, help="first N problems of the suite")
    flags.add_policy_flag(p, "threshold:0.9")
    p.add_argument(
        "--system", default=None, help="table row name stored in the records (default: model name)"
    )
    p.add_argument("--max-new-tokens", type=int, default=64, help="generation budget per prompt")
    flags.add_shared(p, "--no-residual")
    flags.add_block_size_flag(p)
    p.add_argument(
        "--ignore-eos",
        action="store_true",
        help="fixed-length speed runs: decode every prompt to --max-new-tokens whatever the model emits "
        "(docs/metrics.md); TPF and NFE are counted the same way",
    )
    names = DIFFUSION_ENGINES
    p.add_argument("--engines", default=",".join(names), help="comma-separated subset of " + ", ".join(names))
    _add_timing_flags(p)
    _add_probe_flags(p)
    flags.add_shared(p, "--out")
    flags.add_chat_flag(p)
    flags.add_model_args(p)
    flags.add_progress_flag(p)
    p.set_defaults(func=run_bench_engine)


def _add_timing_flags(p) -> None:
    """How the engines are timed."""
    flags.add_warmup_flag(
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
        help="dlmrt steps per chunk between host reads (default: 1)",
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


def _add_probe_flags(p) -> None:
    """What else is measured on dlmrt's chunk."""
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
    from orl.decoding import Policy
    from orl.engines.dlmrt import DlmrtConfig
    from orl.eval.engine_bench import BenchPlan
    from orl.eval.engine_bench_run import EngineBenchSetup, engine_bench_run, engine_names
    from orl.records import write_records

    _check(args)
    problems = load_problems(args)
    setup = EngineBenchSetup(
        args.ckpt,
        engine_names(args.engines),
        Policy.parse(policy_arg(args.policy)),
        device=parse_device(args.device),
        dtype=torch_dtype(args.dtype, args.device),
        residual=not args.no_residual,
        ignore_eos=args.ignore_eos,
        block_size=args.block_size,
        dlmrt=DlmrtConfig(sync_every=args.sync_every, compile_backend=args.compile_backend),
        threads=args.threads,
    )
    if "dlmrt" in setup.engines:
        compile_notice("dlmrt", setup.device, "bench-engine")
    probes = {"profile": args.profile, "check_sync": args.check_sync, "progress": not args.no_progress}
    plan = BenchPlan(args.max_new_tokens, args.rounds or 0, args.warmup, args.repeats, **probes)
    run = engine_bench_run(
        setup, problems, plan, chat=chat_renderer(args), suite=args.suite, system=args.system
    )
    write_records(args.out, run.records)
    print("\n".join(run.lines))
    return 1 if run.host_sync else 0
