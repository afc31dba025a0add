"""Our hf-assisted against vLLM's draft_model: the same greedy target, the same draft, the same k.

    .venv-vllm/bin/python scripts/compare_acceptance.py --ar results/tiny/ckpt/ar --draft
    results/tiny/ckpt/draft \
        --ar-export results/tiny/ckpt/ar-qwen3 --draft-export results/tiny/ckpt/draft-qwen3 --suite tinycode \
        --limit 32 --tokens 5 --out cmp.json

Runs in vLLM's environment (`make vllm-env`: it has transformers and the project too). Both engines
decode the suite's first --limit prompts at --tokens drafted tokens per verification; the script
checks that they decode the same tokens (both are lossless: the target's greedy tokens) and compares
their acceptance lengths under the one definition of orl/eval/speculative.py (tokens per
verifying target forward, the bonus token included, prefill excluded), and vLLM's own figure beside
it. Agreement within --tolerance (default 5%) is expected; prints `agree=<bool>` last and exits 1
when they do not.
"""

from __future__ import annotations

import argparse
import json
import sys

from orl.engines.registry import build_engine
from orl.eval.latency import measure_latency
from orl.eval.speculative import speculative_metrics
from orl.io import atomic_write_json
from orl.tasks import load_suite


def run(engine_name: str, ckpt: str, draft: str, prompts: list[str], args, method: str | None = None) -> dict:
    engine = build_engine(
        engine_name, ckpt, draft_dir=draft, method=method, num_speculative_tokens=args.tokens
    )
    try:
        suite_run = measure_latency(engine, prompts, args.max_new_tokens, warmup=1, progress=False)
        info = engine.describe()
    finally:
        engine.close()
    metrics = speculative_metrics(info, suite_run.generations)
    extras = [g.extra or {} for g in suite_run.generations]
    steps = sum(e.get("verify_forwards", 0) for e in extras)
    accepted = sum(e.get("accepted_tokens", 0) for e in extras)
    return {
        "engine": engine_name,
        "acceptance_length": metrics.get("acceptance_length"),
        "server_acceptance_length": 1 + accepted / steps if steps else None,
        "tokens_per_s": suite_run.summary.tokens_per_s,
        "tokens": [g.token_ids for g in suite_run.generations],
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ar", required=True, help="the AR target, our layout (hf-assisted)")
    p.add_argument("--draft", required=True, help="the draft model, our layout (hf-assisted)")
    p.add_argument("--ar-export", required=True, help="the AR target's Qwen3 export (vLLM)")
    p.add_argument("--draft-export", required=True, help="the draft model's Qwen3 export (vLLM)")
    p.add_argument("--suite", default="tinycode")
    p.add_argument("--limit", type=int, default=32)
    p.add_argument("--tokens", type=int, default=5, help="drafted tokens per verification (both engines)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--tolerance", type=float, default=0.05, help="relative agreement expected (default 0.05)")
    p.add_argument("--out", default=None, help="JSON file to write")
    args = p.parse_args(argv)
    prompts = [problem["prompt"] for problem in load_suite(args.suite, limit=args.limit)]
    hf = run("hf-assisted", args.ar, args.draft, prompts, args)
    vllm = run("vllm", args.ar_export, args.draft_export, prompts, args, method="draft_model")
    same = [a == b for a, b in zip(hf.pop("tokens"), vllm.pop("tokens"), strict=True)]
    gap = abs(vllm["acceptance_length"] - hf["acceptance_length"]) / hf["acceptance_length"]
    result = {
        "suite": args.suite,
        "n_prompts": len(prompts),
        "num_speculative_tokens": args.tokens,
        "max_new_tokens": args.max_new_tokens,
        "hf_assisted": hf,
        "vllm_draft_model": vllm,
        "identical_completions": sum(same),
        "relative_gap": gap,
        "agree": gap <= args.tolerance,
    }
    if args.out:
        atomic_write_json(args.out, result)
    print(json.dumps({k: v for k, v in result.items() if k not in ("hf_assisted", "vllm_draft_model")}))
    print(
        f"hf-assisted {hf['acceptance_length']:.4f}  vLLM draft_model {vllm['acceptance_length']:.4f} "
        f"(vLLM's own {vllm['server_acceptance_length']:.4f}); same completions {sum(same)}/{len(same)}"
    )
    print(f"agree={result['agree']}")
    return 0 if result["agree"] else 1


if __name__ == "__main__":  # vLLM spawns its engine-core process, which imports this file again
    sys.exit(main())
