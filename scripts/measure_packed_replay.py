"""Training-step speed of ORL's replay, shared-clean-context packing against unpacked, at K = 4, 8, 16.

For each K, one rollout batch of the preset's N prompts x K sampled rollouts (S states per block) is
captured from --init and replayed by the same ORL update (gated CE + λ·AEC, forward + backward) with
each state on its own row and its own copy of the context, then with the states of one block sharing
one clean context, packed (orl/train/bench_replay.py). The speedup is the ratio of step times on the
same states in the same process. A benchmark record, not a test.

    python scripts/measure_packed_replay.py --init CKPT --preset tiny --ks 4,8,16 \
        --out results/training/packed_replay_cpu.json
"""

from __future__ import annotations

import argparse
import time

import torch

from orl.io import atomic_write_json
from orl.records.environment import capture_environment
from orl.train.bench_replay import bench_replay
from orl.train.config import load_preset


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--init", required=True, help="block-diffusion checkpoint the rollouts decode with")
    p.add_argument("--preset", default="tiny")
    p.add_argument("--ks", default="4,8,16", help="rollouts per prompt to measure at")
    p.add_argument("--prompts", type=int, default=None, help="N (default: the preset's orl.rollout_prompts)")
    p.add_argument("--steps", type=int, default=3, help="timed updates per layout (after one warm-up)")
    p.add_argument(
        "--pack-tokens",
        type=int,
        default=0,
        help="tokens per packed row (default 0: as wide as the longest segment; wider rows pay for the "
        "masked attention across the row)",
    )
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    overrides = {"orl": {"rollout_prompts": args.prompts}} if args.prompts else None
    preset = load_preset(args.preset, overrides=overrides)
    rows = []
    for k in (int(v) for v in args.ks.split(",")):
        t0 = time.perf_counter()
        unpacked, packed = bench_replay(
            preset,
            args.init,
            steps=args.steps,
            pack_tokens=args.pack_tokens,
            device=args.device,
            rollouts_per_prompt=k,
        )
        rows.append(
            {
                "rollouts_per_prompt": k,
                "states": packed["states"],
                "segments_packed": packed["segments"],
                "input_tokens_unpacked": unpacked["input_tokens"],
                "input_tokens_packed": packed["input_tokens"],
                "step_time_s_unpacked": unpacked["step_time_s"],
                "step_time_s_packed": packed["step_time_s"],
                "speedup": unpacked["step_time_s"] / packed["step_time_s"],
                "padding_fraction_unpacked": unpacked["padding_fraction"],
                "padding_fraction_packed": packed["padding_fraction"],
                "wall_s": time.perf_counter() - t0,
            }
        )
        print(
            f"K={k}: {packed['states']} states in {packed['segments']} segments; step "
            f"{unpacked['step_time_s']:.3f} s unpacked, {packed['step_time_s']:.3f} s packed: "
            f"{rows[-1]['speedup']:.2f}x",
            flush=True,
        )
    atomic_write_json(
        args.out,
        {
            "what": "ORL replay update time, shared-clean-context packing vs one state per row "
            "(docs/method.md §3)",
            "init": args.init,
            "preset": args.preset,
            "rollout_prompts": preset.orl.rollout_prompts,
            "states_per_block": preset.orl.states_per_block,
            "steps": args.steps,
            "pack_tokens": args.pack_tokens,
            "device": args.device,
            "threads": torch.get_num_threads(),
            "environment": capture_environment(),
            "rows": rows,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
