"""`orl bench-replay`: ORL replay train-step throughput with and without compute-balanced packing."""

from __future__ import annotations

from orl.commands.common import model_field, parse_device
from orl.commands.flags import add_model_args
from orl.rows import PACKING, ROW
from orl.train.config import PRESETS


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "bench-replay",
        help="ORL replay train-step throughput with and without shared-context packing",
        description="Capture one ORL rollout batch from --init (N prompts x K rollouts, S states per "
        "block), then time replay updates (forward + backward) on the same states one per row with their "
        "own context, and packed with a shared clean context per block; writes two 'train' records "
        "(extra.packing false/true) with step_tokens_per_s.",
    )
    p.add_argument(
        "--preset", default="tiny", choices=PRESETS, help="training preset whose replay batches are timed"
    )
    p.add_argument("--init", required=True, help="block-diffusion checkpoint")
    p.add_argument("--steps", type=int, default=10, help="timed steps per layout (default: 10)")
    p.add_argument("--pack-tokens", type=int, default=512, help="tokens per packed row (default: 512)")
    p.add_argument(
        "--rollouts-per-prompt",
        type=int,
        default=None,
        help="K of the rollout batch replayed (default: the preset's orl.rollouts_per_prompt)",
    )
    p.add_argument("--system", default=ROW[PACKING].system, help="table row name stored in the records")
    p.add_argument("--out", required=True, help="records file (.jsonl) to write")
    add_model_args(p, dtype=False)
    p.set_defaults(func=run_bench_replay)


def run_bench_replay(args) -> int:
    from orl.model.checkpoint import load_checkpoint
    from orl.records import write_records
    from orl.train.bench_replay import bench_replay
    from orl.train.config import load_preset
    from orl.train.orl_record import replay_lines, replay_records

    preset = load_preset(args.preset)
    results = bench_replay(
        preset,
        args.init,
        steps=args.steps,
        pack_tokens=args.pack_tokens,
        device=parse_device(args.device),
        rollouts_per_prompt=args.rollouts_per_prompt,
    )
    model = model_field(load_checkpoint(args.init))
    write_records(args.out, replay_records(results, system=args.system, model=model))
    print("\n".join(replay_lines(results)))
    return 0
