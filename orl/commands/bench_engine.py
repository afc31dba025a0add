"""`orl bench-engine`: dlmrt compiled vs dlmrt eager vs the reference decoder, and dlmrt's overhead.

Same checkpoint, same policy, same TinyCode test prompts, batch 1, one process.
For each engine: tokens/s, TPF, NFE. For dlmrt: engine overhead = generation wall
time / time of the bare model forwards it counted, replayed in the same execution
mode (engines/dlmrt/bench.py). One `engine_bench` record per engine; the last three
printed lines are `overhead=<x>`, `speedup_vs_eager=<x>`, `speedup_vs_reference=<x>`.
"""

from __future__ import annotations

import argparse

from orl.commands.common import (
    add_model_args,
    add_progress_flag,
    model_field,
    parse_device,
    policy_arg,
    torch_dtype,
)

BENCH_ENGINES = ("dlmrt", "dlmrt-eager", "reference")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "bench-engine", help="benchmark dlmrt (compiled, eager) against the reference decoder; write records",
        description="Decode TinyCode test prompts at batch 1 with dlmrt compiled, dlmrt eager and the reference "
        "decoder (same checkpoint and policy); measure tokens/s, TPF and dlmrt's overhead over its bare model "
        "forwards. Writes one engine_bench record per engine and prints overhead=, speedup_vs_eager= and "
        "speedup_vs_reference= as the last lines.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--ckpt", required=True, help="block-diffusion checkpoint directory")
    p.add_argument("--limit", type=int, default=32, help="first N TinyCode test problems")
    p.add_argument("--difficulty", default="medium", help="TinyCode difficulty")
    p.add_argument("--policy", default="threshold:0.9", help="commit policy: fixed:K, threshold:T or factor:F, "
                   "or @FILE.json from `orl operating-point`")
    p.add_argument("--system", default=None, help="table row name stored in the records (default: model name)")
    p.add_argument("--max-new-tokens", type=int, default=64, help="generation budget per prompt")
    p.add_argument("--no-residual", action="store_true", help="decode with the residual context off")
    p.add_argument("--engines", default=",".join(BENCH_ENGINES), help="comma-separated subset of "
                   f"{', '.join(BENCH_ENGINES)}")
    p.add_argument("--warmup", type=int, default=2, help="discarded requests per engine (compilation happens here)")
    p.add_argument("--sync-every", type=int, default=None, help="dlmrt steps per chunk between host reads "
                   "(default: 1 on CPU, 2 on CUDA)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads; batch-1 steps of a tiny model gain "
                   "little from more and suffer from oversubscription on a shared machine (0 = torch's default)")
    p.add_argument("--compile-backend", default="inductor", help="torch.compile backend of the compiled engine")
    add_model_args(p)
    p.add_argument("--out", required=True, help="records file (.jsonl) to write")
    add_progress_flag(p)
    p.set_defaults(func=run_bench_engine)


def _engines(spec: str) -> list[str]:
    from orl.errors import InputError

    names = [n.strip() for n in spec.split(",") if n.strip()]
    unknown = [n for n in names if n not in BENCH_ENGINES]
    if unknown or not names:
        raise InputError(f"--engines: unknown or empty {spec!r}; expected names from {', '.join(BENCH_ENGINES)}")
    return names


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num and den else None


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def run_bench_engine(args) -> int:
    import torch
    from tqdm import tqdm

    from orl.engines.dlmrt import DlmrtConfig, DlmrtEngine
    from orl.engines.dlmrt.bench import BareForwards, run_suite
    from orl.engines.policy import Policy
    from orl.engines.reference import ReferenceDiffusion
    from orl.errors import InputError
    from orl.model.checkpoint import load_checkpoint
    from orl.records import make_record, write_records
    from orl.tasks import load_suite

    names = _engines(args.engines)
    policy = Policy.parse(policy_arg(args.policy))
    if args.limit is not None and args.limit < 1:
        raise InputError(f"--limit: expected a positive integer, got {args.limit}")
    if args.threads < 0:
        raise InputError(f"--threads: expected >= 0, got {args.threads}")
    if args.threads:
        torch.set_num_threads(args.threads)
    problems = load_suite("tinycode", difficulty=args.difficulty, limit=args.limit)
    prompts = [p["prompt"] for p in problems]
    device = parse_device(args.device)
    ckpt = load_checkpoint(args.ckpt, device=device, dtype=torch_dtype(args.dtype))
    residual = not args.no_residual
    config = DlmrtConfig(sync_every=args.sync_every, compile_backend=args.compile_backend)

    runs = {}
    for name in names:
        if name == "reference":
            engine, bare = ReferenceDiffusion(ckpt, policy, residual=residual), None
        else:
            engine = DlmrtEngine(ckpt, policy, compiled=name == "dlmrt", residual=residual, config=config)
            bare = BareForwards(engine)
        bar = tqdm(total=len(prompts), desc=name, disable=args.no_progress, leave=False)
        runs[name] = run_suite(engine, prompts, args.max_new_tokens, warmup=args.warmup, bare=bare,
                               progress=lambda _name, _i, bar=bar: bar.update(1))
        bar.close()

    base = runs.get("reference") or runs[names[0]]
    compiled, eager, reference = runs.get("dlmrt"), runs.get("dlmrt-eager"), runs.get("reference")
    speedup_vs_eager = _ratio(compiled and compiled.tokens_per_s, eager and eager.tokens_per_s)
    speedup_vs_reference = _ratio(compiled and compiled.tokens_per_s, reference and reference.tokens_per_s)
    records = []
    for name, run in runs.items():
        metrics = run.metrics()
        if name == "dlmrt":
            metrics.update({k: v for k, v in (("speedup_vs_eager", speedup_vs_eager),
                                               ("speedup_vs_reference", speedup_vs_reference)) if v is not None})
        elif name == "dlmrt-eager" and reference is not None:
            metrics["speedup_vs_reference"] = run.tokens_per_s / reference.tokens_per_s
        same = sum(a.token_ids == b.token_ids and a.nfe == b.nfe for a, b in zip(run.generations, base.generations, strict=True))
        extra = {"max_new_tokens": args.max_new_tokens, "residual": residual, "warmup": args.warmup,
                 "threads": torch.get_num_threads(), "device": device, "compared_to": base.name,
                 "identical_outputs": same}
        if name != "reference":
            first = run.generations[0].extra
            extra.update(mode=first["mode"], sync_every=first["sync_every"], compile_backend=args.compile_backend,
                         steps_run=sum(g.extra["steps_run"] for g in run.generations),
                         host_reads=sum(g.extra["host_reads"] for g in run.generations),
                         overhead_definition="generation wall / bare forwards (prefill + counted steps) "
                         "replayed in the same execution mode")
        system = args.system or f"{model_field(ckpt)['name']} ({name})"
        records.append(make_record("engine_bench", system=system, engine=name,
                                   model=model_field(ckpt), metrics=metrics, policy=policy.as_record(),
                                   suite="tinycode", n_problems=len(problems), extra=extra))
        print(f"{name:12s} tokens/s {run.tokens_per_s:9.1f}  TPF {run.tpf:.3f}  NFE/req {run.nfe / len(prompts):6.2f}"
              f"  wall {run.total_wall_s:7.2f}s  overhead {_fmt(run.overhead)}  identical to {base.name}: "
              f"{same}/{len(prompts)}")
    write_records(args.out, records)
    overhead = compiled.overhead if compiled else (eager.overhead if eager else None)
    print(f"overhead={_fmt(overhead)}")
    print(f"speedup_vs_eager={_fmt(speedup_vs_eager)}")
    print(f"speedup_vs_reference={_fmt(speedup_vs_reference)}")
    if ckpt.config.get("quantization_config"):
        from orl.kernels.quantize import weight_bytes

        print(f"weight_bytes_ratio={weight_bytes(ckpt.model)['weight_bytes_ratio']:.4f}")
    return 0
