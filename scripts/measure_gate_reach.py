"""Where the AEC gate changes the objective: the AEC loss it removes, for a grid of contraction factors ρ.

METHOD.md §3 gates L_AEC by g_i = 1[sg(c_i^(k)) < τ_gate]. A closed position only changes the
objective if its relu term is non-zero, i.e. if H^(k) > ρ·H^(k-1) there. In the tiny ORL runs
at ρ = 0.8 the gate closed on about two thirds of the AEC positions but removed no loss at
all (train records: extra.gate_removed_aec is 0 at every step), so "AEC without gate" trains
with ORL's gradients. This script measures, on one rollout of a checkpoint (the states ORL
would replay), how much AEC loss the gate removes at each ρ of a grid, and for other gate
thresholds τ_gate with --tau-gates: the figures a choice of ρ or τ_gate (a METHOD decision)
needs. It trains nothing.

    python scripts/measure_gate_reach.py --ckpt results/tiny/ckpt/dlm --prompts 64 --out gate_reach.json
    python scripts/measure_gate_reach.py --ckpt results/tiny/ckpt/dlm --tau-gates 0.9,0.7,0.5,0.3
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from orl.io import atomic_write_json
from orl.train.config import load_preset
from orl.train.distributed import World
from orl.train.losses import aec_parts
from orl.train.orl import OrlStats, check_init, collect_states, rollout_prompts
from orl.train.replay import replay_logits

RHOS = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2)


def gate_reach(ckpt_dir: str, preset_name: str, prompts: int, rhos=RHOS, tau_gates=None, batch: int = 64) -> dict:
    preset = load_preset(preset_name, overrides={"orl": {"rollout_prompts": prompts}})
    cfg = preset.orl
    ckpt = check_init(ckpt_dir, preset)
    model, tokenizer = ckpt.model.eval(), ckpt.tokenizer
    model.config.residual_alpha = cfg.residual_alpha  # as train_orl decodes its rollouts
    stats = OrlStats()
    with torch.no_grad():
        states = collect_states(model, tokenizer, rollout_prompts(preset, 0), preset, cfg.residual_alpha, stats,
                                False, World(device=torch.device("cpu")))
        if states is None:
            raise SystemExit(f"{ckpt_dir}: no rollout passed its tests: nothing ORL would replay")
        logits = torch.cat([replay_logits(model, states.take(list(range(i, min(i + batch, len(states))))),
                                          pack_tokens=cfg.pack_tokens) for i in range(0, len(states), batch)])
    rows = []
    for tau_gate in tau_gates or (cfg.aec_gate,):
        for rho in rhos:
            parts = aec_parts(logits, states.masked, states.step > 0, states.prev_entropy, rho, tau_gate)
            closed, removed, positions = (float(t) for t in parts.gate_sums())  # what training logs per step
            total = float(parts.terms(gated=False)[0])  # the ungated AEC sum
            rows.append({"tau_gate": tau_gate, "rho": rho, "aec_positions": int(positions),
                         "closed_fraction": closed / positions, "aec_loss": total / positions,
                         "removed_aec": removed / positions, "removed_share": removed / total if total else 0.0})
    return {"ckpt": str(ckpt_dir), "preset": preset_name, "prompts": prompts, "tau_gate": cfg.aec_gate,
            "tau_train": cfg.tau_train, "states": len(states), "rollout_pass_rate": stats.pass_rate[-1], "rows": rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ckpt", required=True, help="block-diffusion checkpoint (the base dLLM, or an ORL one)")
    parser.add_argument("--preset", default="tiny", help="training preset whose ORL settings apply (default: tiny)")
    parser.add_argument("--prompts", type=int, default=64, help="training prompts rolled out (default: 64)")
    parser.add_argument("--tau-gates", default=None,
                        help="comma-separated gate thresholds to measure (default: the preset's aec_gate)")
    parser.add_argument("--out", default=None, help="write the figures here as JSON")
    args = parser.parse_args()
    tau_gates = [float(t) for t in args.tau_gates.split(",")] if args.tau_gates else None
    result = gate_reach(args.ckpt, args.preset, args.prompts, tau_gates=tau_gates)
    print(f"{args.ckpt}: {result['states']} states from {args.prompts} prompts (pass rate "
          f"{result['rollout_pass_rate']:.2f}), the preset's τ_gate {result['tau_gate']}")
    print(f"{'τ_gate':>6} {'rho':>5} {'closed':>8} {'AEC loss':>10} {'removed':>10} {'share':>7}")
    for row in result["rows"]:
        print(f"{row['tau_gate']:6.2f} {row['rho']:5.2f} {row['closed_fraction']:8.3f} {row['aec_loss']:10.5f} {row['removed_aec']:10.5f} "
              f"{row['removed_share']:7.3f}")
    if args.out:
        atomic_write_json(Path(args.out), result)
    print(json.dumps({"max_removed_share": max(r["removed_share"] for r in result["rows"])}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
