"""Training throughput of the tiny preset's AR and conversion stages, F.linear against oneDNN.

Runs `orl train-ar` and `orl convert` for a few steps with `--cpu-linear aten` and `--cpu-linear onednn`
in turn (A, B, A, B: the machine's load drifts, the ratio within a round is the figure), each a fresh
process, and reads tokens/s and the final loss from the run's train_summary.json. Also records what
`--cpu-linear auto` picks here (orl/kernels/onednn.py times the model's linear shapes). Trains nothing
that is kept: the runs go to a temporary folder.

    python scripts/measure_training_linears.py --steps 40 --rounds 2 \
        --out results/training/cpu_linear_amd-epyc.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from orl.io import atomic_write_json
from orl.kernels.onednn import choose_linear
from orl.model.checkpoint import load_checkpoint
from orl.records.environment import capture_environment
from orl.train.pretrain import TRAINING_ROWS

BACKENDS = ("aten", "onednn")


def run_stage(stage: str, backend: str, out: Path, steps: int, threads: int, init: Path | None) -> dict:
    """One short training run in its own process; its summary's throughput and final loss."""
    override = out.parent / f"{out.name}.yaml"
    section = "ar" if stage == "train-ar" else "convert"
    override.write_text(f"{section}: {{steps: {steps}, checkpoint_every: {steps}}}\n")
    args = [
        sys.executable,
        "-m",
        "orl.cli",
        stage,
        "--preset",
        "tiny",
        "--config",
        str(override),
        "--out",
        str(out),
        "--cpu-linear",
        backend,
        "--no-progress",
    ]
    if init is not None:
        args += ["--init", str(init)]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    done = subprocess.run(args, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{done.stderr[-2000:]}")
    summary = json.loads((out / "train_summary.json").read_text())
    return {
        "stage": section,
        "backend": summary["cpu_linear"],
        "steps": steps,
        "wall_s": summary["wall_s"],
        "tokens": summary["tokens"],
        "tokens_per_s": summary["tokens"] / summary["wall_s"],
        "final_loss": summary["final_loss"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=40, help="optimizer steps per run (default 40)")
    parser.add_argument("--rounds", type=int, default=2, help="A/B rounds (default 2)")
    parser.add_argument("--threads", type=int, default=2, help="OMP_NUM_THREADS of each run (the DAG's: 2)")
    parser.add_argument("--out", required=True, help="JSON file to write")
    args = parser.parse_args()

    rows = []
    with tempfile.TemporaryDirectory(prefix="cpu-linear-") as tmp:
        root = Path(tmp)
        for round_ in range(args.rounds):
            for backend in BACKENDS:
                ar = root / f"ar-{backend}-{round_}"
                rows.append(
                    {"round": round_, **run_stage("train-ar", backend, ar, args.steps, args.threads, None)}
                )
                print(json.dumps(rows[-1]), flush=True)
                # Every conversion starts from the first AR run: the same weights for both paths.
                init = root / "ar-aten-0"
                dlm = root / f"dlm-{backend}-{round_}"
                rows.append(
                    {"round": round_, **run_stage("convert", backend, dlm, args.steps, args.threads, init)}
                )
                print(json.dumps(rows[-1]), flush=True)
        torch.set_num_threads(args.threads)
        model = load_checkpoint(root / "ar-aten-0").model
        auto = choose_linear("auto", model, TRAINING_ROWS, torch.device("cpu"))

    ratios = {}
    for stage in ("ar", "convert"):
        per_round = []
        for round_ in range(args.rounds):
            speed = {
                r["backend"]: r["tokens_per_s"] for r in rows if r["stage"] == stage and r["round"] == round_
            }
            per_round.append(speed["onednn"] / speed["aten"])
        ratios[stage] = per_round
    result = {
        "what": "tiny preset training throughput, --cpu-linear onednn over aten, same rounds",
        "env": capture_environment(),
        "threads": args.threads,
        "rows": rows,
        "onednn_over_aten": ratios,
        "auto": auto.to_record(),
        "training_rows": TRAINING_ROWS,
    }
    atomic_write_json(args.out, result)
    for stage, per_round in ratios.items():
        print(f"{stage}: oneDNN / F.linear tokens/s = {', '.join(f'{r:.2f}' for r in per_round)}")
    print(f"auto picks {auto.describe()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
