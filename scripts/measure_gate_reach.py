"""What ORL version 2's gate and AEC would do on one rollout batch: the figures a choice of τ_gate or ρ needs.

docs/method.md §3 sends a masked position to CE when the rollout was uncertain there (c^(k) < τ_gate)
and anchors the confident rest with a capped KL; AEC is a squared hinge on state-averaged normalised
entropy, active when H̄_next > (1 − ρ)·H̄_source. On one rollout batch of a checkpoint (N prompts × K
rollouts, the states ORL would replay, before any update), this script measures for a grid of τ_gate
the gated share |C|/|M|, and for a grid of ρ the share of state pairs whose hinge is active and the
mean hinge. It trains nothing.

    python scripts/measure_gate_reach.py --ckpt /work/base/dlm --preset tiny --out gate_reach.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from orl.io import atomic_write_json
from orl.train.config import load_preset
from orl.train.distributed import World
from orl.train.losses import aec_parts, gate_split
from orl.train.orl import check_init
from orl.train.orl_rollouts import OrlStats, collect_states, rollout_prompts
from orl.train.replay import replay_logits

RHOS = (0.5, 0.4, 0.3, 0.25, 0.2, 0.1, 0.0)
TAU_GATES = (0.99, 0.95, 0.9, 0.8, 0.7, 0.5)


def gate_reach(
    ckpt_dir: str,
    preset_name: str,
    prompts: int | None = None,
    rhos=RHOS,
    tau_gates=TAU_GATES,
    batch: int = 64,
) -> dict:
    overrides = (
        {"orl": {"rollout_prompts": prompts, "isolation": "fallback"}}
        if prompts
        else {"orl": {"isolation": "fallback"}}
    )
    preset = load_preset(preset_name, overrides=overrides)
    cfg = preset.orl
    ckpt = check_init(ckpt_dir, preset)
    model, tokenizer = ckpt.model.eval(), ckpt.tokenizer
    if model.residual_adapter is None:
        model.add_residual_adapter()  # as train_orl starts: a fresh adapter decodes as the base model
    model.config.residual_alpha = cfg.residual_alpha
    stats = OrlStats()
    with torch.no_grad():
        states, retained = collect_states(
            model,
            tokenizer,
            rollout_prompts(preset, 0),
            preset,
            cfg.residual_alpha,
            stats,
            False,
            World(device=torch.device("cpu")),
        )
        if states is None:
            raise SystemExit(f"{ckpt_dir}: no rollout passed its tests: nothing ORL would replay")
        logits = torch.cat(
            [
                replay_logits(model, states.take(list(range(i, min(i + batch, len(states))))))
                for i in range(0, len(states), batch)
            ]
        )
    masked = float(states.masked.sum())
    gate_rows = [
        {
            "tau_gate": tau,
            "gated_share": float(gate_split(states.masked, states.confidence, tau)[1].sum()) / masked,
        }
        for tau in tau_gates
    ]
    aec_rows = []
    for rho in rhos:
        parts = aec_parts(logits, states.masked, states.step, states.source_entropy, rho)
        active, hinge = parts.stats()
        pairs = float(parts.paired.sum())
        aec_rows.append(
            {
                "rho": rho,
                "pairs": int(pairs),
                "aec_active_share": float(active) / max(pairs, 1.0),
                "aec_mean": float(hinge) / max(pairs, 1.0),
            }
        )
    return {
        "ckpt": str(ckpt_dir),
        "preset": preset_name,
        "prompts": cfg.rollout_prompts,
        "rollouts_per_prompt": cfg.rollouts_per_prompt,
        "tau_train": cfg.tau_train,
        "rollout_temperature": cfg.rollout_temperature,
        "states": len(states),
        "retained_fraction": retained,
        "rollout_tpf": stats.rollout_tpf[-1],
        "gate": gate_rows,
        "aec": aec_rows,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--ckpt", required=True, help="block-diffusion checkpoint (the base dLLM, or an ORL one)"
    )
    parser.add_argument(
        "--preset", default="tiny", help="training preset whose ORL settings apply (default: tiny)"
    )
    parser.add_argument(
        "--prompts", type=int, default=None, help="N (default: the preset's orl.rollout_prompts)"
    )
    parser.add_argument("--out", default=None, help="write the figures here as JSON")
    args = parser.parse_args()
    result = gate_reach(args.ckpt, args.preset, args.prompts)
    print(
        f"{args.ckpt}: {result['states']} states, retained {result['retained_fraction']:.2f}, "
        f"rollout TPF {result['rollout_tpf']:.2f}"
    )
    for row in result["gate"]:
        print(f"τ_gate {row['tau_gate']:.2f}: gated share {row['gated_share']:.3f}")
    for row in result["aec"]:
        print(
            f"ρ {row['rho']:.2f}: AEC active share {row['aec_active_share']:.3f}, mean {row['aec_mean']:.5f}"
        )
    if args.out:
        atomic_write_json(Path(args.out), result)
    print(json.dumps({"states": result["states"]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
