"""`orl train-orl`: ORL post-training of a block-diffusion checkpoint, or one of its Table 5 ablations."""

from __future__ import annotations

import sys

from orl.commands.common import model_field, parse_device
from orl.commands.flags import add_model_args, add_progress_flag
from orl.commands.train_ar import add_cpu_linear_flag
from orl.train.config import PRESETS


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "train-orl",
        help="ORL post-training of a block-diffusion checkpoint (or one of its ablations)",
        description="On-policy residual learning (docs/method.md §3, version 2): K rollouts per prompt of "
        "the current model with its residual adapter, verified trajectories only, replay of S states per "
        "block with gated CE, a capped KL anchor to the initial model and AEC, one update per rollout "
        "batch. --ablation selects a Table 5 variant.",
    )
    _add_run_flags(p)
    _add_record_flags(p)
    add_cpu_linear_flag(p)
    add_model_args(p, dtype=False)
    add_progress_flag(p)
    p.set_defaults(func=run_train_orl)


def _add_run_flags(p) -> None:
    """What is trained, from what, where to."""
    from orl.train.orl_variants import ABLATIONS

    p.add_argument("--preset", default="tiny", choices=PRESETS, help="training preset (default: tiny)")
    p.add_argument("--config", default=None, help="YAML overriding preset fields (section orl: ...)")
    p.add_argument(
        "--init", required=True, help="block-diffusion checkpoint to start from (output of orl convert)"
    )
    p.add_argument("--out", required=True, help="output checkpoint directory; resumes an unfinished run")
    p.add_argument(
        "--ablation", default="none", choices=ABLATIONS, help="Table 5 variant (default: none = ORL)"
    )
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help="the ORL stage's seed: rollout prompt slices, replay batches, torch's generator (default: the "
        "preset's orl.seed); part of the resume check and written to the record (extra.seed)",
    )


def _add_record_flags(p) -> None:
    """The record, the sandbox of the rewards and the rollout decoder."""
    from orl.engines.kinds import ROLLOUT_ENGINES

    p.add_argument("--record", default=None, help="also write a 'train' record (.jsonl) with cost figures")
    p.add_argument("--system", default=None, help="table row name for the record")
    p.add_argument(
        "--isolation",
        default=None,
        choices=["bwrap", "fallback"],
        help="sandbox of the rollout rewards (default: the preset's orl.isolation, bwrap; fallback: the "
        "weaker sandbox, named in the summary and the record)",
    )
    p.add_argument(
        "--rollout-engine",
        default="recompute",
        choices=ROLLOUT_ENGINES,
        help="what decodes the rollouts: recompute (default: the batch together, full recompute, replay "
        "reproduces its logits exactly), dlmrt (the KV-cache engine, compiled / graph-captured, one prompt "
        "at a time: for GPUs) or dlmrt-eager; written to the record (extra.rollout_engine) and, when not "
        "recompute, part of the resume check",
    )


def run_train_orl(args) -> int:
    from orl.train.config import check_training_counts, load_preset
    from orl.train.loop import is_finished
    from orl.train.orl_record import read_summary, summary_lines

    orl_overrides = {
        **({"isolation": args.isolation} if args.isolation else {}),
        **({"seed": args.seed} if args.seed is not None else {}),
    }
    preset = load_preset(args.preset, args.config, {"orl": orl_overrides} if orl_overrides else None)
    check_training_counts(preset, "orl")
    device = parse_device(args.device)
    if is_finished(args.out) and not args.record:
        print(f"{args.out}: already trained (delete it to retrain)")
        return 0
    summary = read_summary(args.out) if is_finished(args.out) else _train(args, preset, device)
    if summary is None:
        return 0  # rank 0 reports and writes the record
    done, warning = summary_lines(summary, args.out)
    print(done)
    if warning:
        print(warning, file=sys.stderr)
    if args.record:
        _write_record(args, summary, preset)
    return 0


def _train(args, preset, device: str) -> dict | None:
    """Train in the training world (torchrun's ranks, or this process); the summary on rank 0, else None."""
    from orl.engines.registry import rollout_decoder
    from orl.train.distributed import training_world
    from orl.train.orl import check_init, train_orl

    with training_world(device) as world:
        init = check_init(args.init, preset, world.device)  # loaded once, on this rank's device
        summary = train_orl(
            preset,
            init,
            args.out,
            ablation=args.ablation,
            world=world,
            progress=not args.no_progress,
            rollout=rollout_decoder(args.rollout_engine, init),
            cpu_linear=args.cpu_linear,
        )
    return summary if world.main else None


def _write_record(args, summary: dict, preset) -> None:
    """The run's `train` record (orl/train/orl_record.py), its model block from the trained checkpoint."""
    from orl.model.checkpoint import load_checkpoint
    from orl.records import write_records
    from orl.train.orl_record import orl_train_record

    write_records(
        args.record,
        [
            orl_train_record(
                summary,
                system=args.system or f"ORL ({args.ablation})",
                model=model_field(load_checkpoint(args.out)),
                preset_digest=preset.digest(),
                ablation=args.ablation,
                seed=preset.orl.seed,
                isolation=preset.orl.isolation,
            )
        ],
    )
