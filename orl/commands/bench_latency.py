"""`orl bench-latency`: the batch-1 latency protocol (METHOD.md §4) for one table row, as a record."""

from __future__ import annotations

from pathlib import Path

from orl.commands.common import add_model_args, add_progress_flag, parse_device, policy_arg, torch_dtype

SPECULATIVE_ENGINES = ("hf-assisted", "dflash")


def register(subparsers) -> None:
    from orl.engines.registry import ENGINE_NAMES

    p = subparsers.add_parser(
        "bench-latency", help="batch-1 latency of an engine over a task suite, written as a 'latency' record",
        description="Run W warm-up requests, then one greedy request per prompt of the suite, one at a time "
        "(synchronised on GPU); write one 'latency' record with median and p90 latency, tokens/s, counted TPF "
        "and NFE (and acceptance length / draft forwards for speculative rows). A row that cannot run here "
        "(vllm / sglang without CUDA) gets a 'not run: <reason>' record and exit code 0. Prints "
        "'median_s=<x> p90_s=<x> tokens_per_s=<x> tpf=<x>' last.",
    )
    p.add_argument("--engine", required=True, choices=ENGINE_NAMES, help="engine or baseline to measure")
    p.add_argument("--ckpt", required=True, help="checkpoint directory (the AR target for speculative rows)")
    p.add_argument("--draft", default=None, help="draft model (hf-assisted, vllm) or block-diffusion drafter (dflash)")
    p.add_argument("--policy", default="fixed:1", type=policy_arg, help="dLLM commit policy: fixed:K, "
                   "threshold:T, factor:F, or @FILE.json (an operating-point file) (default: fixed:1)")
    p.add_argument("--suite", default="tinycode", choices=["tinycode", "humaneval"], help="prompt suite")
    p.add_argument("--difficulty", default="medium", help="TinyCode difficulty (default: medium)")
    p.add_argument("--limit", type=int, default=None, help="only the first N prompts")
    p.add_argument("--warmup", type=int, default=3, help="warm-up requests, not measured (default: 3)")
    p.add_argument("--max-new-tokens", type=int, default=64, help="generation budget per request (default: 64)")
    p.add_argument("--system", default=None, help="table row name stored in the record (default: derived)")
    add_model_args(p)
    p.add_argument("--no-residual", action="store_true", help="decode dLLMs with the residual context off")
    p.add_argument("--out", required=True, help="records file (.jsonl) to write")
    add_progress_flag(p)
    p.set_defaults(func=run_bench_latency)


class RecordingEngine:
    """Passes requests through to an engine and keeps every Generation (for fields the summary drops)."""

    def __init__(self, engine):
        self.engine = engine
        self.name = getattr(engine, "name", "engine")
        self.device = getattr(engine, "device", None)  # the latency protocol synchronises on CUDA devices
        self.generations = []

    def generate(self, prompt: str, max_new_tokens: int):
        generation = self.engine.generate(prompt, max_new_tokens)
        self.generations.append(generation)
        return generation


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


def _model_block(engine, ckpt_dir: str) -> dict:
    """The record's `model` block, from the engine's loaded checkpoint or from config.json."""
    from orl.commands.common import model_field
    from orl.model.checkpoint import checkpoint_digest, read_config

    ckpt = getattr(engine, "ckpt", None)
    if ckpt is not None:
        return model_field(ckpt)
    name = read_config(ckpt_dir).get("orl_model_name") or Path(ckpt_dir).name
    return {"name": name, "ckpt": str(ckpt_dir), "ckpt_sha256": checkpoint_digest(ckpt_dir),
            "precision": str(getattr(engine, "precision", None) or "unknown")}


def _policy_block(engine, policy) -> dict | None:
    if hasattr(engine, "policy_record"):
        return engine.policy_record()
    ckpt = getattr(engine, "ckpt", None)
    return policy.as_record() if ckpt is not None and ckpt.is_diffusion else None


def run_bench_latency(args) -> int:
    from orl.engines.base import EngineUnavailable
    from orl.engines.policy import Policy
    from orl.engines.registry import build_engine
    from orl.eval.latency import measure_latency, timings_as_dicts
    from orl.model.checkpoint import checkpoint_digest
    from orl.records import make_record, not_run, write_records
    from orl.tasks import load_suite

    policy = Policy.parse(args.policy)
    problems = load_suite(args.suite, difficulty=args.difficulty, limit=args.limit)
    prompts = [problem["prompt"] for problem in problems]
    extra = {"max_new_tokens": args.max_new_tokens, "warmup": args.warmup, "device": args.device,
             "draft": args.draft, "draft_sha256": checkpoint_digest(args.draft) if args.draft else None}
    try:
        engine = build_engine(args.engine, args.ckpt, policy=policy, draft_dir=args.draft,
                              device=parse_device(args.device), dtype=torch_dtype(args.dtype),
                              residual=not args.no_residual)
    except EngineUnavailable as exc:
        model = _model_block(None, args.ckpt)
        system = args.system or f"{model['name']} ({args.engine})"
        record = not_run("latency", system=system, engine=args.engine, reason=str(exc), suite=args.suite,
                         n_problems=len(prompts), extra=extra, model=model)
        write_records(args.out, [record])
        print(f"{system}: not run: {exc}")
        return 0

    model = _model_block(engine, args.ckpt)
    system = args.system or f"{model['name']} ({args.engine})"
    recorder = RecordingEngine(engine)
    timings, summary = measure_latency(recorder, prompts, args.max_new_tokens, warmup=args.warmup,
                                       progress=not args.no_progress)
    measured = recorder.generations[args.warmup:]
    metrics = summary.metrics()
    if summary.nfe == 0:
        # The engine could not count its forwards (sglang's dLLM backend): no TPF rather than a wrong one.
        metrics.pop("tpf")
        metrics.pop("nfe_mean")
    metrics["prefill_forwards_mean"] = sum(t.prefill_forwards for t in timings) / len(timings)
    metrics.update(speculative_metrics(args.engine, measured))
    rate = acceptance_rate(measured)
    if rate is not None:
        metrics["acceptance_rate"] = rate
    extra["per_request"] = timings_as_dicts(timings)
    if any(g.extra for g in measured):
        extra["engine_extra"] = [g.extra for g in measured]
    record = make_record(
        "latency", system=system, engine=args.engine, model=model, metrics=metrics,
        policy=_policy_block(engine, policy), suite=args.suite, n_problems=len(prompts), extra=extra,
    )
    write_records(args.out, [record])
    parts = [f"{system}: {summary.n_requests} requests after {args.warmup} warm-up, {summary.tokens} tokens, "
             f"NFE {summary.nfe}"]
    if "acceptance_length" in metrics:
        parts.append(f"acceptance length {metrics['acceptance_length']:.3f}")
    if "draft_forwards_mean" in metrics:
        parts.append(f"draft forwards/request {metrics['draft_forwards_mean']:.2f}")
    print(", ".join(parts))
    line = summary.last_line()
    print(line if summary.nfe else line.rsplit(" tpf=", 1)[0] + " tpf=n/a")
    return 0
