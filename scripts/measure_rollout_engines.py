"""Time one ORL refresh's rollout with each rollout engine on the same prompts (`--rollout-engine`).

    python scripts/measure_rollout_engines.py --ckpt results/tiny/ckpt/dlm --prompts 64 \
        --out results/training/rollout_engines_cpu.json

The prompts are the ORL stage's first refresh (orl.train.orl_rollouts.rollout_prompts, seed 0), decoded
in the short / long groups collect_states uses, with threshold(τ_train) and the residual on. Each engine runs
the whole set twice: the first pass includes compilation, the second is warm. Printed and written:
wall per pass, completion tokens per second, and how many completions equal the recompute rollout's.
"""

from __future__ import annotations

import argparse
import time

import torch

from orl.decoding import Policy, decode_rule
from orl.decoding.rollout import RecomputeRollout
from orl.engines.dlmrt.rollout import DlmrtRollout
from orl.io import atomic_write_json
from orl.model.checkpoint import load_checkpoint
from orl.records.environment import capture_environment
from orl.train.config import load_preset
from orl.train.orl_rollouts import rollout_groups, rollout_prompts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--ckpt", required=True, help="block-diffusion checkpoint (e.g. results/tiny/ckpt/dlm)"
    )
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--prompts", type=int, default=64, help="prompts of the first refresh to decode")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    preset = load_preset(args.preset)
    ckpt = load_checkpoint(args.ckpt)
    model, tok = ckpt.model.eval(), ckpt.tokenizer
    model.config.residual_alpha = preset.orl.residual_alpha  # as train_orl sets it
    problems = rollout_prompts(preset, 0)[: args.prompts]
    rule = decode_rule(model.config, tok.eos_ids, Policy("threshold", preset.orl.tau_train), residual=True)
    engines = {
        "recompute": RecomputeRollout(),
        "dlmrt-eager": DlmrtRollout(tok, mode="eager"),
        "dlmrt": DlmrtRollout(tok),
    }
    rows, reference = [], None
    for name, rollout in engines.items():
        for attempt in ("first", "warm"):
            t0 = time.perf_counter()
            completions = []
            for indices, budget in rollout_groups(problems, preset):
                prompts = [tok.encode(problems[i]["prompt"]) for i in indices]
                completions += rollout(
                    model, prompts, rule, max_new_tokens=budget, pad_id=tok.pad_id
                ).completion_ids
            wall = time.perf_counter() - t0
            reference = reference or completions
            tokens = sum(len(c) for c in completions)
            same = sum(a == b for a, b in zip(completions, reference, strict=True))
            rows.append(
                {
                    "engine": name,
                    "pass": attempt,
                    "wall_s": wall,
                    "tokens": tokens,
                    "tokens_per_s": tokens / wall,
                    "same_as_recompute": same,
                    "prompts": len(problems),
                }
            )
            print(
                f"{name:12s} {attempt:5s} {wall:7.2f} s  {tokens / wall:8.1f} tok/s  "
                f"{same}/{len(problems)} as recompute",
                flush=True,
            )
    warm = {r["engine"]: r["wall_s"] for r in rows if r["pass"] == "warm"}
    ratios = {name: warm["recompute"] / wall for name, wall in warm.items()}
    print("warm speed vs recompute: " + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items()))
    atomic_write_json(
        args.out,
        {
            "ckpt": args.ckpt,
            "threads": args.threads,
            "rows": rows,
            "warm_speed_vs_recompute": ratios,
            "env": capture_environment(),
        },
    )


if __name__ == "__main__":
    main()
