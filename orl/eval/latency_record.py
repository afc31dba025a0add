"""One table row's latency run as a record: the protocol of orl/eval/latency.py, the speculative
metrics of orl/eval/speculative.py, and what a row that cannot run here records instead.

What `orl bench-latency` writes (Tables 1 and 2, and a serving stack's line of Table 3).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from orl.engines.base import Engine, EngineInfo, forward_metrics
from orl.eval.latency import SuiteRun, measure_latency, timings_as_dicts
from orl.eval.speculative import acceptance_rate, speculative_metrics
from orl.model.provenance import model_block, model_name
from orl.records import make_record, not_run


def latency_metrics(run: SuiteRun, info: EngineInfo) -> dict:
    """The protocol's metrics, the forward counts (orl/engines/forwards.py), and a speculative row's
    acceptance figures."""
    summary = run.summary
    metrics = {**forward_metrics(run.generations), **summary.metrics()}
    if summary.nfe == 0:
        # The engine could not count its forwards (sglang's dLLM backend): no TPF rather than a wrong one.
        for name in ("tpf", "nfe_mean", "tpf_prefill", "tpf_commit"):
            metrics.pop(name, None)
    metrics.update(speculative_metrics(info, run.generations))
    rate = acceptance_rate(run.generations)
    if rate is not None:
        metrics["acceptance_rate"] = rate
    return metrics


def latency_record(
    engine: Engine,
    prompts: Sequence[str],
    *,
    kind: str,
    row_engine: str,
    suite: str,
    system: str | None,
    max_new_tokens: int,
    warmup: int,
    progress: bool = True,
    extra: dict | None = None,
) -> tuple[dict, SuiteRun]:
    """Time `engine` over `prompts` (rendered already) and close it; (the record, the run).

    `row_engine`: the row's engine name, in the default system name '<model> (<row_engine>)';
    `extra`: the caller's settings (budget, draft, chat template), completed with the run's own.
    """
    info = engine.describe()
    try:
        run = measure_latency(engine, prompts, max_new_tokens, warmup=warmup, progress=progress)
    finally:
        engine.close()  # a server's processes and GPU memory
    record = run_record(info, run, kind=kind, row_engine=row_engine, suite=suite, system=system, extra=extra)
    return record, run


def run_record(
    info: EngineInfo,
    run: SuiteRun,
    *,
    kind: str,
    row_engine: str,
    suite: str,
    system: str | None,
    extra: dict | None = None,
) -> dict:
    """The record of a measured run of the engine `info` describes (latency_record's, and one of a
    sitting's: orl/commands/bench_sitting.py)."""
    model = info.model_block()
    extra = {
        **(extra or {}),
        "warmup": run.warmup,
        "device": info.device,
        **info.settings,
        "per_request": timings_as_dicts(run.timings),
    }
    if any(g.extra for g in run.generations):
        extra["engine_extra"] = [g.extra for g in run.generations]
    return make_record(
        kind,
        system=system or f"{model['name']} ({row_engine})",
        engine=info.name,
        model=model,
        metrics=latency_metrics(run, info),
        policy=info.policy,
        suite=suite,
        n_problems=len(run.timings),
        extra=extra,
    )


def latency_lines(record: dict, run: SuiteRun) -> list[str]:
    """What `orl bench-latency` prints: a summary line, then the interface's last line."""
    summary, metrics = run.summary, record["metrics"]
    parts = [
        f"{record['system']}: {summary.n_requests} requests after {run.warmup} warm-up, {summary.tokens} "
        f"tokens, NFE {summary.nfe}"
    ]
    if "acceptance_length" in metrics:
        parts.append(f"acceptance length {metrics['acceptance_length']:.3f}")
    if "draft_forwards_mean" in metrics:
        parts.append(f"draft forwards/request {metrics['draft_forwards_mean']:.2f}")
    line = summary.last_line()
    return [", ".join(parts), line if summary.nfe else line.rsplit(" tpf=", 1)[0] + " tpf=n/a"]


def not_run_latency_record(
    kind: str,
    ckpt: str | Path,
    *,
    row_engine: str,
    reason: str,
    suite: str,
    n_problems: int,
    system: str | None,
    extra: dict,
) -> dict:
    """The record of a row that cannot run here (EngineUnavailable: no CUDA, no package, a server that
    did not start), its model named from the checkpoint's config.json without loading it."""
    from orl.model.checkpoint import read_json_config

    config = read_json_config(Path(ckpt) / "config.json", "a checkpoint needs config.json")
    model = model_block(model_name(config, ckpt), ckpt=ckpt)
    return not_run(
        kind,
        system=system or f"{model['name']} ({row_engine})",
        engine=row_engine,
        reason=reason,
        suite=suite,
        n_problems=n_problems,
        extra=extra,
        model=model,
    )


def latency_settings(
    max_new_tokens: int, device: str, draft: str | None, ignore_eos: bool, chat_template: bool
) -> dict:
    """The caller's settings a latency record carries in `extra` (latency_record completes them with the
    run's own): the budget, the device asked for, the draft checkpoint and its digest, the end token ignored
    or not, the chat template used or not."""
    from orl.model.checkpoint import checkpoint_digest

    return {
        "max_new_tokens": max_new_tokens,
        "device": device,
        "draft": draft,
        "draft_sha256": checkpoint_digest(draft) if draft else None,
        "ignore_eos": ignore_eos,
        "chat_template": chat_template,
    }
