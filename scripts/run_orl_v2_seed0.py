"""ORL version 2 and each Table 5 ablation at one seed, one after another, with their sweeps and operating
points, summarised per run (docs/method.md §3): gated share, AEC active share, retained fraction, TPF and
pass@1
at the operating point (matched to the AR target's greedy pass@1), wall time.

    python scripts/run_orl_v2_seed0.py --dlm /work/base/dlm --ar /work/base/ar --preset tiny \
        --work /work/runs29 --summary results/training/orl_v2_seed0

Each step is an `orl` command in its own process (the same commands the DAG runs); a step whose output
exists is skipped, so the script resumes. Checkpoints and logs stay under --work; the summary (JSON and
Markdown) is small.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from orl.io import atomic_write_json, atomic_write_text
from orl.train.orl_variants import ABLATIONS


def run(args: list, log: Path) -> float:
    """One `orl` command, stdout and stderr to `log`; its wall time. Stops the script if it fails."""
    t0 = time.perf_counter()
    with log.open("w") as f:
        code = subprocess.call(
            [sys.executable, "-m", "orl.cli", *map(str, args)], stdout=f, stderr=subprocess.STDOUT
        )
    if code:
        raise SystemExit(f"{log}: `orl {' '.join(map(str, args))}` exited {code}")
    return time.perf_counter() - t0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dlm", required=True, help="the base dLLM ORL starts from")
    p.add_argument(
        "--ar", required=True, help="the AR target (its greedy pass@1 is the operating point's reference)"
    )
    p.add_argument("--preset", default="tiny")
    p.add_argument("--config", default=None, help="YAML overriding preset fields")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ablations", default=",".join(ABLATIONS))
    p.add_argument("--suite", default="tinycode")
    p.add_argument("--thresholds", default="0.5,0.7,0.8,0.9,0.95")
    p.add_argument("--limit", type=int, default=None, help="only the first N problems of the suite")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--tolerance", type=float, default=0.01)
    p.add_argument("--isolation", default=None, choices=["bwrap", "fallback"])
    p.add_argument("--work", required=True, help="checkpoints, records and logs")
    p.add_argument("--summary", required=True, help="folder for summary.json and summary.md")
    args = p.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    limit = ["--limit", args.limit] if args.limit else []
    isolation = ["--isolation", args.isolation] if args.isolation else []
    reference = work / f"quality_ar_{args.suite}.jsonl"
    if not reference.exists():
        run(
            [
                "eval-quality",
                "--ckpt",
                args.ar,
                "--engine",
                "reference",
                "--suite",
                args.suite,
                *limit,
                "--max-new-tokens",
                args.max_new_tokens,
                "--system",
                "AR (reference)",
                "--out",
                reference,
                "--no-progress",
                *isolation,
            ],
            work / "quality_ar.log",
        )
    ar = json.loads(reference.read_text().splitlines()[0])
    rows = []
    for ablation in args.ablations.split(","):
        name = f"orl-{ablation}_seed{args.seed}"
        ckpt, record = work / name, work / f"train_{name}.jsonl"
        config = ["--config", args.config] if args.config else []
        wall = None
        if not record.exists():
            wall = run(
                [
                    "train-orl",
                    "--preset",
                    args.preset,
                    *config,
                    "--init",
                    args.dlm,
                    "--out",
                    ckpt,
                    "--ablation",
                    ablation,
                    "--seed",
                    args.seed,
                    "--record",
                    record,
                    "--no-progress",
                    *isolation,
                ],
                work / f"train_{name}.log",
            )
        sweep, point, quality = (
            work / f"sweep_{name}.jsonl",
            work / f"oppoint_{name}.json",
            work / f"op_{name}.jsonl",
        )
        if not sweep.exists():
            run(
                [
                    "sweep",
                    "--ckpt",
                    ckpt,
                    "--suite",
                    args.suite,
                    "--thresholds",
                    args.thresholds,
                    *limit,
                    "--max-new-tokens",
                    args.max_new_tokens,
                    "--system",
                    name,
                    "--out",
                    sweep,
                    "--no-progress",
                ],
                work / f"sweep_{name}.log",
            )
        if not point.exists():
            run(
                [
                    "operating-point",
                    "--sweep",
                    sweep,
                    "--reference",
                    reference,
                    "--tolerance",
                    args.tolerance,
                    "--out",
                    point,
                    "--quality-out",
                    quality,
                ],
                work / f"oppoint_{name}.log",
            )
        train = json.loads(record.read_text().splitlines()[0])
        chosen = json.loads(point.read_text())
        summary = json.loads((ckpt / "train_summary.json").read_text())
        rows.append(
            {
                "ablation": ablation,
                "seed": args.seed,
                "updates": summary["steps"],
                "rollouts_per_update": summary["rollout_prompts"] * summary["rollouts_per_prompt"],
                "gated_share": train["metrics"]["gated_share"],
                "aec_active_share": train["metrics"]["aec_active_share"],
                "retained_fraction": train["metrics"]["retained_fraction"],
                "updates_without_retained": summary["updates_without_retained"],
                "aec_mean": summary["aec_mean_mean"],
                "kl_anchor_mean": summary["kl_anchor_mean_mean"],
                "adapter_norm_last": (summary["per_update"]["adapter_norm"] or [0.0])[-1],
                "tau": chosen.get("tau"),
                "tpf": chosen.get("tpf"),
                "pass_at_1": chosen.get("pass_at_1"),
                "matched": chosen.get("matched"),
                "edge": chosen.get("edge"),
                "train_wall_s": summary["wall_s"],
                "train_process_s": wall,
                "rollout_s": summary["rollout_s"],
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    out = Path(args.summary)
    out.mkdir(parents=True, exist_ok=True)
    result = {
        "what": "ORL version 2 and its ablations at one seed (scripts/run_orl_v2_seed0.py)",
        "dlm": args.dlm,
        "ar": args.ar,
        "preset": args.preset,
        "suite": args.suite,
        "limit": args.limit,
        "thresholds": args.thresholds,
        "ar_pass_at_1": ar["metrics"]["pass_at_1"],
        "runs": rows,
    }
    atomic_write_json(out / "summary.json", result)
    head = (
        "| ablation | gated share | AEC active | retained | τ | TPF | pass@1 | matched | train wall s |\n"
        "|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = [
        f"| {r['ablation']} | {r['gated_share']:.3f} | {r['aec_active_share']:.3f} | "
        f"{r['retained_fraction']:.3f} | {r['tau']} | {r['tpf']:.2f} | {r['pass_at_1']:.3f} | "
        f"{r['matched']} | "
        f"{r['train_wall_s']:.0f} |"
        for r in rows
    ]
    atomic_write_text(
        out / "summary.md",
        f"# ORL v2, seed {args.seed}, {args.preset} ({args.suite}; AR pass@1 "
        f"{ar['metrics']['pass_at_1']:.3f})\n\n" + head + "\n".join(lines) + "\n",
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
