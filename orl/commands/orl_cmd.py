"""`orl train-orl`, `orl sweep` and `orl entropy-profile`: ORL post-training and its measurements."""

from __future__ import annotations

import argparse

from orl.commands.common import add_progress_flag, model_field


def register(subparsers) -> None:
    from orl.train.orl import ABLATIONS

    register_more(subparsers)
    p = subparsers.add_parser(
        "train-orl", help="ORL post-training of a block-diffusion checkpoint (or one of its ablations)",
        description="On-policy residual learning (METHOD.md §3): rollouts of the current model with residual "
        "context, self-generated targets that pass their unit tests, replay with CE + λ·AEC, rollouts refreshed "
        "every R steps. --ablation selects a Table 5 variant.",
    )
    p.add_argument("--preset", default="tiny", choices=["smoke", "tiny"], help="training preset (default: tiny)")
    p.add_argument("--config", default=None, help="YAML overriding preset fields (section orl: ...)")
    p.add_argument("--init", required=True, help="block-diffusion checkpoint to start from (output of orl convert)")
    p.add_argument("--out", required=True, help="output checkpoint directory; resumes an unfinished run")
    p.add_argument("--ablation", default="none", choices=ABLATIONS, help="Table 5 variant (default: none = ORL)")
    p.add_argument("--record", default=None, help="also write a 'train' record (.jsonl) with cost figures")
    p.add_argument("--system", default=None, help="table row name for the record")
    p.add_argument("--halt-after-checkpoint", type=int, default=None, help=argparse.SUPPRESS)
    add_progress_flag(p)
    p.set_defaults(func=run_train_orl)

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
    add_progress_flag(p)
    p.set_defaults(func=run_sweep)

    p = subparsers.add_parser(
        "entropy-profile", help="mean entropy of still-masked positions per denoising step",
        description="Decode the suite with a policy and record, per step index within a block, the mean entropy "
        "of the positions still masked at that step (the 'uncertainty drops faster' figure).",
    )
    p.add_argument("--ckpt", required=True)
    p.add_argument("--suite", default="tinycode", choices=["tinycode", "humaneval"])
    p.add_argument("--policy", default="fixed:1")
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--system", default=None)
    p.add_argument("--out", required=True)
    add_progress_flag(p)
    p.set_defaults(func=run_entropy_profile)


def register_more(subparsers) -> None:
    p = subparsers.add_parser(
        "operating-point", help="choose the matched-accuracy threshold from a sweep",
        description="Matched accuracy (METHOD.md §4): the fastest threshold of --sweep whose pass@1 is at least "
        "the --reference record's pass@1 minus --tolerance. Writes {policy, tau, pass_at_1, tpf, ...} as JSON "
        "(usable as --policy @FILE) and, with --quality-out, the chosen sweep point as a 'quality' record.",
    )
    p.add_argument("--sweep", required=True, help="records of `orl sweep`")
    p.add_argument("--reference", required=True, help="quality record of the reference system (e.g. fixed:1)")
    p.add_argument("--tolerance", type=float, default=0.01, help="pass@1 tolerance (default 0.01 = 1 point)")
    p.add_argument("--out", required=True, help="operating point JSON")
    p.add_argument("--quality-out", default=None, help="also write the chosen point as a quality record")
    p.set_defaults(func=run_operating_point)

    p = subparsers.add_parser(
        "bench-replay", help="ORL replay train-step throughput with and without compute-balanced packing",
        description="Capture rollout states from --init, then time replay optimizer steps (forward + backward) "
        "on the same states padded one per row and packed into fixed-token rows; writes two 'train' records "
        "(extra.packing false/true) with step_tokens_per_s.",
    )
    p.add_argument("--preset", default="tiny", choices=["smoke", "tiny"])
    p.add_argument("--init", required=True, help="block-diffusion checkpoint")
    p.add_argument("--steps", type=int, default=10, help="timed steps per layout (default 10)")
    p.add_argument("--pack-tokens", type=int, default=512, help="tokens per packed row (default 512)")
    p.add_argument("--system", default="dLLM + ORL")
    p.add_argument("--out", required=True)
    p.set_defaults(func=run_bench_replay)


def run_operating_point(args) -> int:
    from orl.errors import InputError
    from orl.eval.operating_point import choose_operating_point
    from orl.io import atomic_write_json
    from orl.records import load_records, make_record, write_records

    sweep = [r for r in load_records(args.sweep) if r["kind"] == "sweep" and r["status"] == "measured"]
    reference = [r for r in load_records(args.reference) if r["kind"] == "quality" and r["status"] == "measured"]
    if not sweep or not reference:
        raise InputError(f"{args.sweep if not sweep else args.reference}: no measured "
                         f"{'sweep' if not sweep else 'quality'} record")
    points = [(r["policy"]["params"]["tau"], r["metrics"]["pass_at_1"], r["metrics"]["tpf"]) for r in sweep]
    point = choose_operating_point(points, reference[0]["metrics"]["pass_at_1"], args.tolerance)
    atomic_write_json(args.out, point.to_dict())
    if args.quality_out:
        chosen = next(r for r in sweep if r["policy"]["params"]["tau"] == point.tau)
        record = make_record(
            "quality", system=chosen["system"], engine=chosen["engine"], model=chosen["model"],
            policy=chosen["policy"], suite=chosen["suite"], n_problems=chosen["n_problems"],
            metrics={k: v for k, v in chosen["metrics"].items() if k in ("pass_at_1", "tpf", "nfe_mean")},
            per_problem=chosen["per_problem"],
            extra={"source": f"{args.sweep}: sweep point tau={point.tau:g}", "matched": point.matched,
                   "reference_pass_at_1": point.reference_pass_at_1, "tolerance": point.tolerance},
        )
        write_records(args.quality_out, [record])
    status = "matched" if point.matched else "NOT matched (most accurate point used)"
    print(f"operating point {point.policy}: pass@1={point.pass_at_1:.4f} tpf={point.tpf:.3f} "
          f"(reference {point.reference_pass_at_1:.4f} - {point.tolerance}; {status})")
    return 0


def run_bench_replay(args) -> int:
    from orl.records import make_record, write_records
    from orl.train.bench_replay import bench_replay
    from orl.train.config import load_preset

    preset = load_preset(args.preset)
    results = bench_replay(preset, args.init, steps=args.steps, pack_tokens=args.pack_tokens)
    from orl.model.checkpoint import load_checkpoint

    model = model_field(load_checkpoint(args.init))
    records = [make_record("train", system=args.system, engine="dlmrt", model=model,
                           metrics={"step_tokens_per_s": r["step_tokens_per_s"], "step_time_s": r["step_time_s"]},
                           extra={"packing": r["packing"], "rows_per_step": r["rows"], "padding_fraction":
                                  r["padding_fraction"], "states_per_step": r["states"]})
               for r in results]
    write_records(args.out, records)
    for r in results:
        print(f"packing={r['packing']}: {r['step_tokens_per_s']:.0f} real tokens/s, {r['step_time_s']:.3f} s/step, "
              f"padding {r['padding_fraction']:.1%}")
    print(f"packing_speedup={results[1]['step_tokens_per_s'] / results[0]['step_tokens_per_s']:.3f}")
    return 0


def run_train_orl(args) -> int:
    from orl.records import make_record, write_records
    from orl.train.config import load_preset
    from orl.train.loop import is_finished
    from orl.train.orl import check_init, train_orl

    preset = load_preset(args.preset, args.config)
    check_init(args.init, preset)
    if is_finished(args.out) and not args.record:
        print(f"{args.out}: already trained (delete it to retrain)")
        return 0
    if is_finished(args.out):
        import json
        from pathlib import Path

        summary = json.loads((Path(args.out) / "train_summary.json").read_text())
    else:
        summary = train_orl(preset, args.init, args.out, ablation=args.ablation, progress=not args.no_progress,
                            halt_after_checkpoint=args.halt_after_checkpoint)
    print(f"wrote {args.out}: {summary['steps']} steps, {summary['refreshes']} rollouts, "
          f"{summary['self_generated_tokens']:,} self-generated tokens, {summary['wall_s']:.1f} s")
    if args.record:
        from orl.model.checkpoint import load_checkpoint

        ckpt = load_checkpoint(args.out)
        record = make_record(
            "train", system=args.system or f"ORL ({args.ablation})", engine="dlmrt", model=model_field(ckpt),
            metrics={"self_generated_tokens": summary["self_generated_tokens"], "train_wall_s": summary["wall_s"]},
            extra={k: summary[k] for k in ("ablation", "refreshes", "rollout_tpf", "rollout_pass_rate",
                                           "replay_states", "replay_state_bytes", "rollout_s", "steps",
                                           "reference_targets", "residual_alpha")},
            config={"preset": preset.digest(), "ablation": args.ablation},
        )
        write_records(args.record, [record])
    return 0


def run_sweep(args) -> int:
    from orl.engines.policy import Policy
    from orl.engines.registry import build_engine
    from orl.eval.aup import aup_or_none
    from orl.eval.quality import evaluate_quality
    from orl.records import make_record, write_records
    from orl.tasks import load_suite

    problems = load_suite(args.suite, limit=args.limit)
    taus = [float(t) for t in args.thresholds.split(",") if t.strip()]
    records, points = [], []
    for tau in taus:
        policy = Policy.parse(f"threshold:{tau}")
        engine = build_engine(args.engine, args.ckpt, policy=policy)
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


def run_entropy_profile(args) -> int:
    from orl.engines.policy import Policy
    from orl.engines.registry import build_engine
    from orl.eval.quality import generate_all
    from orl.records import make_record, write_records
    from orl.tasks import load_suite

    problems = load_suite(args.suite, limit=args.limit)
    policy = Policy.parse(args.policy)
    engine = build_engine("reference", args.ckpt, policy=policy, log_steps=True)
    generations = generate_all(engine, problems, args.max_new_tokens, progress=not args.no_progress)
    sums: dict[int, list[float]] = {}
    for gen in generations:
        for log in gen.steps or []:
            if log.masked_before:
                sums.setdefault(log.step, []).append(log.mean_entropy)
    per_step = [sum(v) / len(v) for _, v in sorted(sums.items())]
    counts = [len(v) for _, v in sorted(sums.items())]
    model = model_field(engine.ckpt)
    record = make_record("entropy", system=args.system or model["name"], engine="reference", model=model,
                         policy=policy.as_record(), suite=args.suite, n_problems=len(problems), metrics={},
                         extra={"mean_entropy_per_step": per_step, "states_per_step": counts})
    write_records(args.out, [record])
    print("mean entropy per step: " + " ".join(f"{h:.3f}" for h in per_step[:16]))
    return 0
