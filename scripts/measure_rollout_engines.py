"""Time one ORL refresh's rollout with each rollout engine on the same prompts (`--rollout-engine`).

    python scripts/measure_rollout_engines.py --ckpt results/tiny/ckpt/dlm --prompts 8 \
        --cpu-linear onednn --out results/training/rollout_engines_cpu.json

The prompts are the ORL stage's first refresh (orl.train.orl_rollouts.rollout_prompts, seed 0), each
orl.rollouts_per_prompt times, decoded in the token-budget groups collect_states uses, with
threshold(τ_train), the residual on, and train-orl's sampling seeds at --temperature (0, greedy, by
default: dlmrt's rollout samples nothing). The engines: the recompute rollout without its context reuse
("recompute-full": every row's whole sequence at every step), the recompute rollout (train-orl's
default: a block's later steps reuse the context's keys and values), and dlmrt eager and compiled. Each
runs the whole set twice: the first pass includes compilation, the second is warm. Printed and written:
wall per pass, completion tokens per second, how many completions equal recompute-full's, and whether
the recompute rollout's captured states equal recompute-full's bit for bit.
"""

from __future__ import annotations

import argparse
import time

import torch

from orl.decoding import Policy, decode_rule
from orl.decoding.rollout import RecomputeRollout
from orl.engines.dlmrt.rollout import DlmrtRollout
from orl.io import atomic_write_json
from orl.kernels.onednn import use_onednn_linears
from orl.model.checkpoint import load_checkpoint
from orl.records.environment import capture_environment
from orl.train.config import load_preset
from orl.train.orl_rollouts import decode_rollout_groups, rollout_prompts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--ckpt", required=True, help="block-diffusion checkpoint (e.g. results/tiny/ckpt/dlm)"
    )
    parser.add_argument("--preset", default="tiny")
    parser.add_argument(
        "--prompts", type=int, default=8, help="prompts of the first refresh to decode (each K times)"
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--temperature",
        type=float,
        default=0.0,
        help="sampling temperature (train-orl: orl.rollout_temperature); dlmrt decodes greedily and is "
        "left out above 0",
    )
    parser.add_argument(
        "--cpu-linear",
        choices=("aten", "onednn"),
        default="aten",
        help="the linears' path (the tiny profile trains with onednn: config train_config.cpu_linear)",
    )
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    preset = load_preset(args.preset)
    ckpt = load_checkpoint(args.ckpt)
    model, tok = ckpt.model.eval(), ckpt.tokenizer
    if args.cpu_linear == "onednn":
        use_onednn_linears(model)
    model.config.residual_alpha = preset.orl.residual_alpha  # as train_orl sets it
    # The refresh's rows: each prompt K times (orl.rollouts_per_prompt), as collect_states decodes them.
    prompts_k = rollout_prompts(preset, 0)[: args.prompts]
    problems = [p for p in prompts_k for _ in range(preset.orl.rollouts_per_prompt)]
    rule = decode_rule(model.config, tok.eos_ids, Policy("threshold", preset.orl.tau_train), residual=True)
    engines = {
        "recompute-full": RecomputeRollout(reuse_context=False),
        "recompute": RecomputeRollout(),
        "dlmrt-eager": DlmrtRollout(tok, mode="eager"),
        "dlmrt": DlmrtRollout(tok),
    }
    if args.temperature > 0:
        print("dlmrt decodes greedily: left out at --temperature > 0", flush=True)
        engines = {k: v for k, v in engines.items() if not k.startswith("dlmrt")}
    rows, reference, reference_states = [], None, None
    for name, rollout in engines.items():
        for attempt in ("first", "warm"):
            t0 = time.perf_counter()
            completions, states = [], []
            groups = decode_rollout_groups(
                rollout,
                model,
                tok,
                problems,
                preset,
                rule,
                seed=preset.orl.seed,
                update=0,
                temperature=args.temperature,
            )
            for _, _, result in groups:
                completions += result.completion_ids
                states.append(result.states)
            wall = time.perf_counter() - t0
            reference = reference or completions
            reference_states = reference_states or states
            tokens = sum(len(c) for c in completions)
            same = sum(a == b for a, b in zip(completions, reference, strict=True))
            row = {
                "engine": name,
                "pass": attempt,
                "wall_s": wall,
                "tokens": tokens,
                "tokens_per_s": tokens / wall,
                "same_as_recompute_full": same,
                "prompts": len(problems),
            }
            if name.startswith("recompute"):
                row["states_equal_recompute_full"] = all(
                    not a.differing(b) for a, b in zip(states, reference_states, strict=True)
                )
            rows.append(row)
            print(
                f"{name:15s} {attempt:5s} {wall:7.2f} s  {tokens / wall:8.1f} tok/s  "
                f"{same}/{len(problems)} as recompute-full"
                + (
                    f", states equal: {row['states_equal_recompute_full']}"
                    if name.startswith("recompute")
                    else ""
                ),
                flush=True,
            )
    warm = {r["engine"]: r["wall_s"] for r in rows if r["pass"] == "warm"}
    ratios = {name: warm["recompute-full"] / wall for name, wall in warm.items()}
    print("warm speed vs recompute-full: " + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items()))
    atomic_write_json(
        args.out,
        {
            "ckpt": args.ckpt,
            "threads": args.threads,
            "cpu_linear": args.cpu_linear,
            "temperature": args.temperature,
            "rows": rows,
            "warm_speed_vs_recompute_full": ratios,
            "env": capture_environment(),
        },
    )


if __name__ == "__main__":
    main()
