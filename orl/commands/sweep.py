"""`orl sweep`: a threshold sweep through a dLLM engine, pass@1 and TPF per τ, and its AUP."""

from __future__ import annotations

from orl.commands.common import add_model_args, add_progress_flag, model_field, parse_device, torch_dtype


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "sweep", help="threshold sweep through dlmrt: pass@1 and TPF per τ, plus AUP",
        description="Evaluate threshold(τ) decoding for each τ on a suite; writes one 'sweep' record per τ "
        "(pass@1, TPF, tokens/s) and one 'aup' record, and prints one line per τ.",
    )
    p.add_argument("--ckpt", required=True, help="block-diffusion checkpoint")
    p.add_argument("--suite", default="tinycode", choices=["tinycode", "humaneval"])
    p.add_argument("--thresholds", default="0.5,0.6,0.7,0.8,0.9,0.95", help="comma-separated τ values")
    p.add_argument("--engine", default="dlmrt", choices=["dlmrt", "dlmrt-eager", "reference"])
    p.add_argument("--limit", type=int, default=None, help="only the first N problems")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--system", default=None, help="table row name stored in the records")
    p.add_argument("--out", required=True, help="records file (.jsonl)")
    add_model_args(p)
    add_progress_flag(p)
    p.set_defaults(func=run_sweep)


def run_sweep(args) -> int:
    from orl.engines.policy import Policy
    from orl.engines.registry import build_engine
    from orl.eval.aup import aup_or_none
    from orl.eval.quality import evaluate_quality
    from orl.records import make_record, write_records
    from orl.tasks import load_suite

    device = parse_device(args.device)
    problems = load_suite(args.suite, limit=args.limit)
    taus = [float(t) for t in args.thresholds.split(",") if t.strip()]
    records, points = [], []
    for tau in taus:
        policy = Policy.parse(f"threshold:{tau}")
        engine = build_engine(args.engine, args.ckpt, policy=policy, device=device, dtype=torch_dtype(args.dtype))
        engine.generate(problems[0]["prompt"], args.max_new_tokens)  # warm-up: compilation is not timed
        result = evaluate_quality(engine, problems, args.max_new_tokens, progress=not args.no_progress)
        model = model_field(engine.ckpt)
        system = args.system or model["name"]
        tokens_per_s = result.tokens / result.wall_s if result.wall_s else None
        records.append(make_record(
            "sweep", system=system, engine=args.engine, model=model, policy=policy.as_record(), suite=args.suite,
            n_problems=len(problems), metrics={"pass_at_1": result.pass_at_1, "tpf": result.tpf,
                                               "tokens_per_s": tokens_per_s, "nfe_mean": result.nfe_mean},
            per_problem=result.per_problem))
        points.append((result.tpf, result.pass_at_1))
        print(f"tau={tau:g} pass@1={result.pass_at_1:.4f} tpf={result.tpf:.3f} tokens_per_s={tokens_per_s:.1f}",
              flush=True)
    area, note = aup_or_none(points)  # undefined (None, why) e.g. for a model whose TPF < 1
    records.append(make_record("aup", system=records[0]["system"], engine=args.engine, model=records[0]["model"],
                               suite=args.suite, n_problems=len(problems), metrics={"aup": area},
                               extra={"points": [{"tau": t, "tpf": p[0], "pass_at_1": p[1]}
                                                 for t, p in zip(taus, points, strict=True)], "note": note}))
    write_records(args.out, records)
    print(f"aup={area:.4f}" if area is not None else f"aup=undefined ({note})")
    return 0
