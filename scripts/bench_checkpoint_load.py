"""Peak memory and load time of a ~1 GB bf16 sharded Qwen3 checkpoint (issue 13's loader benchmark).

    .venv/bin/python scripts/bench_checkpoint_load.py [--dir /tmp/orl-bench-qwen3-1g] [--rounds 3]
        [--baseline REV] [--json OUT.json]

1. Builds, once, a random-weight Qwen3 checkpoint with transformers (hidden 1024,
   12 layers, vocab 151936, untied: 1.0 GB in bf16) saved with
   save_pretrained(max_shard_size="300MB"), plus a Qwen-style tokenizer, and a
   single-file copy of the same weights (what the loader before issue 13 could read).
2. Peak resident memory of `orl generate --dtype bfloat16 --engine reference`
   (/usr/bin/time -v), against the target 1.25 x weight bytes + 0.7 GB.
3. Load time (load_checkpoint to bfloat16, each in a fresh process), with the
   checkpoint's files evicted from the page cache first (cold: posix_fadvise
   DONTNEED on each file, which touches nothing else on the machine) and not (warm).
4. With --baseline REV: the same memory and time for REV's orl/model/checkpoint.py
   (e.g. the commit before issue 13) on the single-file copy, with the same greedy loop.
Everything is measured on this machine in this run; compare ratios, not absolute numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
PROMPT = "def add(a, b):\n    return"

# A fresh process: load, then 8 greedy tokens with full recompute (what the reference AR decoder does).
LOAD_AND_DECODE = r"""
import importlib.util, sys, time, torch
module_path, ckpt_dir, decode = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
if module_path == "-":
    from orl.model.checkpoint import load_checkpoint
else:
    spec = importlib.util.spec_from_file_location("baseline_checkpoint", module_path)
    baseline = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = baseline
    spec.loader.exec_module(baseline)
    load_checkpoint = baseline.load_checkpoint
start = time.perf_counter()
ckpt = load_checkpoint(ckpt_dir, dtype=torch.bfloat16)
print(f"load_s={time.perf_counter() - start:.3f}")
if decode:
    seq = torch.tensor([ckpt.tokenizer.encode(sys.argv[4])])
    with torch.inference_mode():
        for _ in range(8):
            seq = torch.cat([seq, ckpt.model(seq)[:, -1:].argmax(-1)], dim=1)
    print("decoded", seq.shape[1])
"""


def build(root: Path) -> tuple[Path, Path]:
    """The sharded checkpoint and its single-file copy (built once; reused when present)."""
    sharded, single = root / "sharded", root / "single"
    if not (sharded / "config.json").is_file():
        import torch
        from transformers import Qwen3Config, Qwen3ForCausalLM

        sys.path.insert(0, str(REPO))
        from tests.real_checkpoints import ENDOFTEXT, IM_END, build_qwen_tokenizer

        config = Qwen3Config(
            vocab_size=151936,
            hidden_size=1024,
            intermediate_size=3072,
            num_hidden_layers=12,
            num_attention_heads=16,
            num_key_value_heads=8,
            head_dim=128,
            rope_theta=1e6,
            max_position_embeddings=40960,
            tie_word_embeddings=False,
            bos_token_id=ENDOFTEXT,
            eos_token_id=IM_END,
            pad_token_id=ENDOFTEXT,
        )
        torch.manual_seed(0)
        tmp = root / "sharded.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        Qwen3ForCausalLM(config).to(torch.bfloat16).save_pretrained(str(tmp), max_shard_size="300MB")
        build_qwen_tokenizer(tmp, with_mask=False)
        tmp.rename(sharded)
    if not (single / "config.json").is_file():
        from safetensors.torch import load_file, save_file

        tmp = root / "single.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        state = {}
        for shard in sorted(sharded.glob("model-*.safetensors")):
            state.update(load_file(shard))
        save_file(state, tmp / "model.safetensors", metadata={"format": "pt"})
        del state
        for path in sharded.iterdir():
            if not path.name.startswith("model"):
                shutil.copy(path, tmp / path.name)
        tmp.rename(single)
    return sharded, single


def weight_bytes(ckpt: Path) -> int:
    return sum(p.stat().st_size for p in ckpt.glob("*.safetensors"))


def evict(ckpt: Path) -> None:
    """Drop this checkpoint's files from the page cache (only these files)."""
    for path in ckpt.iterdir():
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def timed(command: list[str]) -> tuple[str, float]:
    """Run under /usr/bin/time -v: (stdout, peak RSS in bytes)."""
    proc = subprocess.run(["/usr/bin/time", "-v", *command], capture_output=True, text=True, cwd=REPO)
    if proc.returncode:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(command)}\n{proc.stdout}\n{proc.stderr}")
    rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr).group(1))
    return proc.stdout, rss_kb * 1024


def load_run(module: str, ckpt: Path, decode: bool) -> tuple[float, float]:
    out, rss = timed([PYTHON, "-c", LOAD_AND_DECODE, module, str(ckpt), "1" if decode else "0", PROMPT])
    return float(re.search(r"load_s=([0-9.]+)", out).group(1)), rss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="/tmp/orl-bench-qwen3-1g", help="where the checkpoints are built")
    parser.add_argument("--rounds", type=int, default=3, help="load-time repetitions, cold and warm")
    parser.add_argument(
        "--baseline", default=None, metavar="REV", help="git revision of the loader to compare"
    )
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args()
    sharded, single = build(Path(args.dir))
    weights = weight_bytes(sharded)
    target = 1.25 * weights + 0.7e9
    results: dict = {"weight_bytes": weights, "target_peak_rss_bytes": target}

    orl = str(Path(PYTHON).parent / "orl")
    _, rss = timed(
        [
            orl,
            "generate",
            "--ckpt",
            str(sharded),
            "--engine",
            "reference",
            "--dtype",
            "bfloat16",
            "--prompt",
            PROMPT,
            "--max-new-tokens",
            "8",
        ]
    )
    results["orl_generate_peak_rss_bytes"] = rss
    print(f"weights {weights / 1e9:.3f} GB; target peak RSS {target / 1e9:.3f} GB")
    print(
        f"orl generate --dtype bfloat16 --engine reference (sharded): peak RSS {rss / 1e9:.3f} GB "
        f"= {rss / weights:.2f} x weights ({'within' if rss <= target else 'OVER'} target)"
    )

    variants = [("this loader, sharded", "-", sharded), ("this loader, single file", "-", single)]
    tmpdir = None
    if args.baseline:
        tmpdir = tempfile.mkdtemp(prefix="orl-baseline-")
        source = subprocess.run(
            ["git", "show", f"{args.baseline}:orl/model/checkpoint.py"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        module = Path(tmpdir) / "baseline_checkpoint.py"
        module.write_text(source)
        variants.append((f"loader at {args.baseline}, single file", str(module), single))
    for name, module, ckpt in variants:
        _, peak = load_run(module, ckpt, decode=True)
        cold, warm = [], []
        for _ in range(args.rounds):
            evict(ckpt)
            cold.append(load_run(module, ckpt, decode=False)[0])
            warm.append(load_run(module, ckpt, decode=False)[0])
        results[name] = {"peak_rss_bytes_load_and_8_tokens": peak, "load_s_cold": cold, "load_s_warm": warm}
        print(
            f"{name}: load + 8 greedy tokens peak RSS {peak / 1e9:.3f} GB ({peak / weights:.2f} x weights); "
            f"load to bf16 cold {min(cold):.2f}-{max(cold):.2f} s, warm {min(warm):.2f}-{max(warm):.2f} s "
            f"({args.rounds} rounds)"
        )
    if tmpdir:
        shutil.rmtree(tmpdir, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
