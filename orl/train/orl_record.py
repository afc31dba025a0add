"""The `train` record of an ORL run, from its train_summary.json (Table 5 reads its cost and its
settings), and `orl bench-replay`'s two `train` records of the replay step with and without packing."""

from __future__ import annotations

import json
from pathlib import Path

from orl.records import make_record

# What the train record keeps of the run's summary besides its cost (Table 5 reads both).
SUMMARY_EXTRA = (
    "ablation",
    "method_version",
    "seed",
    "refreshes",
    "rollouts",
    "rollout_tpf",
    "rollout_pass_rate",
    "replay_states",
    "replay_state_bytes",
    "rollout_s",
    "steps",
    "reference_targets",
    "residual_alpha",
    "residual",
    "gate_tau",
    "gate_applied",
    "aec_applied",
    "rollout_prompts",
    "rollouts_per_prompt",
    "states_per_block",
    "updates_without_retained",
    "rollout_engine",
    "cpu_linear",
    "world_size",
    "device",
    "device_hours",
    "peak_memory_bytes_per_rank",
)


def cost_metrics(summary: dict) -> dict:
    """The train record's metrics: self-generated tokens, wall, the run's mean gated share, AEC active share
    and retained fraction, and per device the tokens/s and peak memory (largest rank); GPU-hours (world
    size x wall) only where the devices are GPUs."""
    metrics = {
        "self_generated_tokens": summary["self_generated_tokens"],
        "train_wall_s": summary["wall_s"],
        "gated_share": summary["gated_share_mean"],
        "aec_active_share": summary["aec_active_share_mean"],
        "retained_fraction": summary["retained_fraction_mean"],
    }
    if summary.get("device") == "cuda":
        metrics["train_gpu_hours"] = summary["device_hours"]
    if summary.get("tokens_per_s_per_device"):
        metrics["train_tokens_per_s"] = summary["tokens_per_s_per_device"]
    if summary.get("peak_memory_bytes_per_rank"):
        metrics["peak_memory_bytes"] = max(summary["peak_memory_bytes_per_rank"])
    return metrics


def orl_train_record(
    summary: dict,
    *,
    system: str,
    model: dict,
    preset_digest: str,
    ablation: str | None,
    seed: int,
    isolation: str,
) -> dict:
    """The run's `train` record: its cost metrics, what SUMMARY_EXTRA keeps and the per-update means.
    `isolation`: the preset's, where a summary of an older run does not name it."""
    extra = {
        **{k: summary.get(k) for k in SUMMARY_EXTRA},
        **(summary.get("per_update") or {}),
        "isolation": summary.get("isolation", isolation),
    }
    return make_record(
        "train",
        system=system,
        engine="dlmrt",
        model=model,
        metrics=cost_metrics(summary),
        extra=extra,
        config={"preset": preset_digest, "ablation": ablation, "seed": seed},
    )


def summary_lines(summary: dict, out: str) -> tuple[str, str | None]:
    """(what the run did, in one line; a warning when no rollout completion was retained, else None)."""
    done = (
        f"wrote {out}: {summary['steps']} updates, {summary['refreshes']} rollout batches, "
        f"{summary['self_generated_tokens']:,} self-generated tokens, {summary['wall_s']:.1f} s"
    )
    if summary["self_generated_tokens"]:
        return done, None
    return done, (
        f"warning: {out}: no rollout completion passed its tests, so no self-generated token was "
        "retained"
        + (
            "; the reference solutions stood in as targets (orl.use_reference_for_failed)"
            if summary.get("reference_targets")
            else "; ORL trained on nothing of its own"
        )
    )


def read_summary(out_dir: str | Path) -> dict:
    """A finished run's OUT/train_summary.json (what `orl train-orl --record` reports on a trained folder)."""
    return json.loads((Path(out_dir) / "train_summary.json").read_text())


def replay_records(results: list[dict], *, system: str, model: dict) -> list[dict]:
    """`orl bench-replay`'s two `train` records (orl/train/bench_replay.py's results: unpacked, packed), the
    replay step's tokens/s and time with the layout's figures."""
    return [
        make_record(
            "train",
            system=system,
            engine="dlmrt",
            model=model,
            metrics={"step_tokens_per_s": r["step_tokens_per_s"], "step_time_s": r["step_time_s"]},
            extra={
                "packing": r["packing"],
                "rows_per_step": r["rows"],
                "padding_fraction": r["padding_fraction"],
                "states_per_step": r["states"],
                "rollouts_per_prompt": r["rollouts_per_prompt"],
                "segments": r["segments"],
                "input_tokens": r["input_tokens"],
            },
        )
        for r in results
    ]


def replay_lines(results: list[dict]) -> list[str]:
    """What `orl bench-replay` prints: each layout's tokens/s, step time and padding, then
    `packing_speedup=<x>` last."""
    return [
        f"packing={r['packing']}: {r['step_tokens_per_s']:.0f} real tokens/s, {r['step_time_s']:.3f} s/step, "
        f"padding {r['padding_fraction']:.1%}"
        for r in results
    ] + [f"packing_speedup={results[1]['step_tokens_per_s'] / results[0]['step_tokens_per_s']:.3f}"]
