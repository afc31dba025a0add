"""`orl bench-latency`: the batch-1 latency protocol (METHOD.md §4) for one table row, as a record."""

from __future__ import annotations

from pathlib import Path

from orl.commands.common import add_engine_args, add_progress_flag, build_from_args, model_block
from orl.tasks import SUITES

SPECULATIVE_ENGINES = ("hf-assisted", "dflash")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "bench-latency", help="batch-1 latency of an engine over a task suite, written as a 'latency' record",
        description="Run W warm-up requests (plus one per compiled shape), then one greedy request per prompt of "
        "the suite, one at a time (synchronised on GPU); write one 'latency' record with median and p90 latency, "
        "tokens/s, counted TPF and NFE (and acceptance length / draft forwards for speculative rows). A row that "
        "cannot run here (vllm / sglang without CUDA) gets a 'not run: <reason>' record and exit code 0. Prints "
        "'median_s=<x> p90_s=<x> tokens_per_s=<x> tpf=<x>' last.",
    )
    add_engine_args(p, None)
    p.add_argument("--suite", default="tinycode", choices=SUITES, help="prompt suite")
    p.add_argument("--difficulty", default="medium", help="TinyCode difficulty (default: medium)")
    p.add_argument("--limit", type=int, default=None, help="only the first N prompts")
    p.add_argument("--warmup", type=int, default=3, help="warm-up requests, not measured (default: 3)")
    p.add_argument("--ignore-eos", action="store_true", help="speed runs: generate every request to "
                   "--max-new-tokens whatever the model emits (as serving benchmarks do; METHOD.md §4)")
    p.add_argument("--system", default=None, help="table row name stored in the record (default: derived)")
    p.add_argument("--out", required=True, help="records file (.jsonl) to write")
    add_progress_flag(p)
    p.set_defaults(func=run_bench_latency)


def speculative_metrics(engine_name: str, generations) -> dict[str, float]:
    """acceptance_length and draft_forwards_mean of a speculative row ({} for other rows).

    Where the engine reports its own acceptance length (vLLM's 1 + accepted / drafts,
    SGLang's tokens / verifications) that is used; otherwise it is the counted
    tokens per target forward, which for greedy verification is the mean number of
    tokens each verification commits, bonus token included.
    """
    reported = [g.extra.get("acceptance_length") for g in generations if g.extra]
    reported = [value for value in reported if value is not None]
    speculative = engine_name in SPECULATIVE_ENGINES or bool(reported) or any(g.draft_forwards for g in generations)
    if not speculative or not generations:
        return {}
    metrics = {"draft_forwards_mean": sum(g.draft_forwards for g in generations) / len(generations)}
    if engine_name in ("vllm", "sglang"):
        if reported:
            metrics["acceptance_length"] = sum(reported) / len(reported)
        return metrics
    nfe = sum(g.nfe for g in generations)
    if nfe:
        metrics["acceptance_length"] = sum(g.num_tokens for g in generations) / nfe
    return metrics


def acceptance_rate(generations) -> float | None:
    """Accepted / drafted tokens where the engine reports both (dflash, vLLM), else None."""
    drafted = accepted = 0
    for g in generations:
        extra = g.extra or {}
        drafted += extra.get("drafted_tokens", extra.get("spec_num_draft_tokens", 0)) or 0
        accepted += extra.get("accepted_tokens", extra.get("spec_num_accepted_tokens", 0)) or 0
    return accepted / drafted if drafted else None


def run_bench_latency(args) -> int:
    from orl.engines.base import EngineUnavailable
    from orl.eval.latency import measure_latency, timings_as_dicts
    from orl.model.checkpoint import checkpoint_digest, read_json_config
    from orl.records import make_record, not_run, write_records
    from orl.tasks import load_suite

    problems = load_suite(args.suite, difficulty=args.difficulty, limit=args.limit)
    prompts = [problem["prompt"] for problem in problems]
    extra = {"max_new_tokens": args.max_new_tokens, "device": args.device, "draft": args.draft,
             "draft_sha256": checkpoint_digest(args.draft) if args.draft else None, "ignore_eos": args.ignore_eos}
    try:
        engine = build_from_args(args)
    except EngineUnavailable as exc:
        config = read_json_config(Path(args.ckpt) / "config.json", "a checkpoint needs config.json")
        model = {"name": config.get("orl_model_name") or Path(args.ckpt).name, "ckpt": str(args.ckpt),
                 "ckpt_sha256": checkpoint_digest(args.ckpt), "precision": "unknown"}
        system = args.system or f"{model['name']} ({args.engine})"
        record = not_run("latency", system=system, engine=args.engine, reason=str(exc), suite=args.suite,
                         n_problems=len(prompts), extra=extra, model=model)
        write_records(args.out, [record])
        print(f"{system}: not run: {exc}")
        return 0

    info = engine.describe()
    model = model_block(info)
    system = args.system or f"{model['name']} ({args.engine})"
    run = measure_latency(engine, prompts, args.max_new_tokens, warmup=args.warmup, progress=not args.no_progress)
    summary = run.summary
    metrics = summary.metrics()
    if summary.nfe == 0:
        # The engine could not count its forwards (sglang's dLLM backend): no TPF rather than a wrong one.
        metrics.pop("tpf")
        metrics.pop("nfe_mean")
    metrics["prefill_forwards_mean"] = sum(t.prefill_forwards for t in run.timings) / len(run.timings)
    metrics.update(speculative_metrics(args.engine, run.generations))
    rate = acceptance_rate(run.generations)
    if rate is not None:
        metrics["acceptance_rate"] = rate
    extra.update(warmup=run.warmup, device=info.device, **info.settings, per_request=timings_as_dicts(run.timings))
    if any(g.extra for g in run.generations):
        extra["engine_extra"] = [g.extra for g in run.generations]
    record = make_record("latency", system=system, engine=info.name, model=model, metrics=metrics,
                         policy=info.policy, suite=args.suite, n_problems=len(prompts), extra=extra)
    write_records(args.out, [record])
    parts = [f"{system}: {summary.n_requests} requests after {run.warmup} warm-up, {summary.tokens} tokens, "
             f"NFE {summary.nfe}"]
    if "acceptance_length" in metrics:
        parts.append(f"acceptance length {metrics['acceptance_length']:.3f}")
    if "draft_forwards_mean" in metrics:
        parts.append(f"draft forwards/request {metrics['draft_forwards_mean']:.2f}")
    print(", ".join(parts))
    line = summary.last_line()
    print(line if summary.nfe else line.rsplit(" tpf=", 1)[0] + " tpf=n/a")
    return 0
