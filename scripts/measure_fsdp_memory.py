"""Peak memory per rank of `orl convert` at world size 1 (one process) and 2 (torchrun, FSDP2, gloo).

The training-at-scale issue asks that FSDP2 at world size 2 peak below the single process. The smoke
and tiny models are too small to show it (a few MB of state against ~0.4 GB of torch in every
process), so this builds a ~50M-parameter AR model of the smoke preset's vocabulary (2 steps of
`orl train-ar`, only to have a checkpoint), then converts it for the same steps and global batch at
world size 1 and 2 and reads each run's train_summary.json (peak_memory_bytes_per_rank: the peak
resident set of each process on a CPU, CUDA's allocator peak on a GPU).

    python scripts/measure_fsdp_memory.py --work /tmp/fsdp-mem [--out results/fsdp_memory.jsonl]

Prints one line per world size and the ratio; with --out, writes them as `train` records.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from orl.model.provenance import model_block
from orl.records import make_record, write_records

# A model big enough that parameters, gradients and AdamW state (16 bytes per parameter in fp32)
# outweigh the per-process baseline: about 50M parameters, 0.8 GB of training state.
SIZE = """\
model: {hidden_size: 768, intermediate_size: 2048, num_hidden_layers: 8, num_attention_heads: 12,
        num_key_value_heads: 4, head_dim: 64, max_position_embeddings: 256}
ar: {steps: 2, batch_size: 8, lr: 0.001, warmup_steps: 1, checkpoint_every: 2, seed: 0}
convert: {steps: %(steps)d, batch_size: 8, lr: 0.001, warmup_steps: 1, checkpoint_every: %(steps)d, seed: 2}
"""


def run(command: list[str], log: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with log.open("w") as handle:
        done = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, env=env)
    if done.returncode:
        sys.exit(f"{' '.join(command)} failed ({done.returncode}); see {log}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", required=True, help="scratch folder (checkpoints, logs)")
    parser.add_argument("--steps", type=int, default=6, help="conversion steps of each run (default: 6)")
    parser.add_argument("--out", default=None, help="also write the figures as 'train' records (.jsonl)")
    args = parser.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    config = work / "size.yaml"
    config.write_text(SIZE % {"steps": args.steps})
    orl = [sys.executable, "-m", "orl.cli"]
    common = ["--preset", "smoke", "--config", str(config), "--no-progress"]
    if not (work / "ar" / "config.json").exists():
        run([*orl, "train-ar", *common, "--out", str(work / "ar")], work / "train_ar.log")
    summaries = {}
    for world in (1, 2):
        out = work / f"convert-world{world}"
        launch = orl if world == 1 else [sys.executable, "-m", "torch.distributed.run", "--standalone",
                                         "--nproc-per-node", str(world), "-m", "orl.cli"]  # fmt: skip
        if not (out / "config.json").exists():
            run(
                [*launch, "convert", *common, "--init", str(work / "ar"), "--out", str(out)],
                work / f"world{world}.log",
            )
        summaries[world] = json.loads((out / "train_summary.json").read_text())
    records = []
    for world, summary in summaries.items():
        peaks = summary["peak_memory_bytes_per_rank"]
        print(
            f"world size {world}: peak memory per rank {', '.join(f'{p / 1e9:.3f} GB' for p in peaks)}; "
            f"{summary['steps']} steps, {summary['tokens']:,} tokens, wall {summary['wall_s']:.1f} s, "
            f"final loss {summary['final_loss']:.4f}"
        )
        records.append(make_record(
            "train", system=f"orl convert, world size {world}", engine="torch",
            model=model_block("smoke-50M", "float32"),
            metrics={"peak_memory_bytes": max(peaks), "train_wall_s": summary["wall_s"],
                     "train_tokens_per_s": summary["tokens_per_s_per_device"]},
            extra={"world_size": world, "peak_memory_bytes_per_rank": peaks, "steps": summary["steps"],
                   "final_loss": summary["final_loss"], "script": "scripts/measure_fsdp_memory.py"},
        ))  # fmt: skip
    ratio = max(summaries[2]["peak_memory_bytes_per_rank"]) / max(summaries[1]["peak_memory_bytes_per_rank"])
    print(f"largest rank at world size 2 / single process: {ratio:.3f}")
    if args.out:
        write_records(args.out, records)
    return 0


if __name__ == "__main__":
    sys.exit(main())
