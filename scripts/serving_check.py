"""`make serving-check`: every serving row's call, constructed in the real vllm and sglang.

    .venv/bin/python scripts/serving_check.py --venvs .venv-serving

Writes small checkpoint folders (the config.json a server would read, and a tokenizer),
runs `orl serving-args` for all 9 (engine, method) pairs of orl/engines/serving.py METHODS
(and SGLang's speculative methods again with --verification relaxed: its acceptance thresholds),
and hands each engine's calls to scripts/check_serving_args.py run by the python of
<venvs>/<engine> (an environment with that package, built by the make target). Prints
what each side printed; exits 1 if any call failed to construct.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from orl.engines.serving import METHODS, SPECULATIVE_METHODS
from orl.io import atomic_write_json
from orl.tokenizer import train_bpe

CHECKER = Path(__file__).resolve().parent / "check_serving_args.py"
QWEN3 = {
    "hidden_size": 2560,
    "intermediate_size": 9728,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "rope_theta": 1000000,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
}
# What each folder's config.json says: the shapes of Qwen3-4B, its drafts and SDAR-4B (nothing is loaded).
CONFIGS = {
    "target": {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", **QWEN3},
    "draft": {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        **QWEN3,
        "hidden_size": 1024,
        "num_hidden_layers": 28,
    },
    "eagle3": {"architectures": ["LlamaForCausalLM"], "model_type": "llama", **QWEN3, "num_hidden_layers": 1},
    "dflash": {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        **QWEN3,
        "num_hidden_layers": 5,
        "block_size": 16,
    },
    "sdar": {
        "architectures": ["SDARForCausalLM"],
        "model_type": "sdar",
        **QWEN3,
        "block_size": 4,
        "mask_token_id": 151669,
    },
}
RELAXED_EXAMPLE = "relaxed:0.7"
DRAFTS = {"draft_model": "draft", "standalone": "draft", "eagle3": "eagle3", "dflash": "dflash"}


def write_folders(root: Path) -> dict[str, Path]:
    tokenizer = train_bpe(["def f(x):\n    return x + 1\n"] * 50, vocab_size=300)
    folders = {}
    for name, config in CONFIGS.items():
        folder = root / name
        atomic_write_json(folder / "config.json", config)
        tokenizer.save(folder / "tokenizer.json")
        folders[name] = folder
    return folders


def serving_args(engine: str, method: str, folders: dict[str, Path], root: Path, *extra: str) -> dict:
    argv = [
        sys.executable,
        "-m",
        "orl.cli",
        "serving-args",
        "--engine",
        engine,
        "--method",
        method,
        "--target",
        str(folders["sdar" if method == "dllm" else "target"]),
        *extra,
    ]
    if method in SPECULATIVE_METHODS:
        argv += ["--draft", str(folders[DRAFTS[method]])]
    if method == "dllm":
        argv += ["--policy", "strict-threshold:0.9", "--dllm-config", str(root / "dllm_algorithm.yaml")]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(
            f"orl serving-args --engine {engine} --method {method} failed: {done.stderr.strip()}"
        )
    return json.loads(done.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venvs", required=True, help="folder holding the vllm/ and sglang/ environments")
    args = parser.parse_args()
    failed = False
    with tempfile.TemporaryDirectory(prefix="orl-serving-check-") as tmp:
        root = Path(tmp)
        folders = write_folders(root)
        for engine, methods in METHODS.items():
            calls = [serving_args(engine, method, folders, root) for method in methods]
            if engine == "sglang":  # the relaxed lines' arguments (orl/engines/sglang.py relaxed_arguments)
                calls += [
                    serving_args(engine, method, folders, root, "--verification", RELAXED_EXAMPLE)
                    for method in methods
                    if method in SPECULATIVE_METHODS
                ]
            calls_file = root / f"{engine}-calls.json"
            atomic_write_json(calls_file, calls)
            python = Path(args.venvs) / engine / "bin" / "python"
            print(f"== {engine}: {len(calls)} calls from `orl serving-args`, checked by {python}", flush=True)
            done = subprocess.run(
                [str(python), str(CHECKER), str(calls_file)], capture_output=True, text=True, check=False
            )
            print("\n".join(line for line in done.stdout.splitlines() if line.startswith(("ok ", "FAIL "))))
            if done.returncode != 0:
                failed = True
                if "FAIL" not in done.stdout:  # the checker itself broke: show why
                    print(done.stderr[-3000:])
    print("serving-check: " + ("FAILED" if failed else "every call constructs in the real packages"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
