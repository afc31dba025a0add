"""vLLM (CPU build) with our EAGLE-3 head or DFlash drafter against the target's greedy decoding, on TinyCode.

    .venv/bin/python scripts/measure_vllm_spec.py --method eagle3 --target results/tiny/work/ar-qwen3 \
        --head results/tiny/work/eagle3-ar --prompts 16 --k 3 --out results/tiny/work/vllm_eagle3.json

Runs scripts/vllm_greedy.py in vLLM's environment with speculative_config {"method": METHOD}, greedy and
stopping at <eos>, and compares its token ids with the target's greedy tokens from our reference decoder
(tests/test_vllm_cpu.py shows plain vLLM decodes our export to exactly those; --plain-vllm runs plain vLLM
too, one more vLLM start-up); it reports whether they are equal (greedy verification is lossless)
and vLLM's mean acceptance length: 1 + accepted drafts / verify steps over all requests (vLLM's own
definition, its per-request spec-decode summary). For a DFlash drafter it also replays vLLM's verify steps
with our own drafting (orl.model.dflash_vllm.propose) on the same tokens: the same acceptance length means
the drafter computes in vLLM what it computes here. Where vLLM fails, the one-line error is the result.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from pathlib import Path

from orl.engines.reference import ReferenceAR
from orl.io import atomic_write_json
from orl.model.checkpoint import load_checkpoint
from orl.model.dflash_vllm import load_drafter
from orl.tasks import tinycode
from orl.train.dflash_vllm import acceptance_estimate
from orl.train.eagle3 import make_samples

REPO = Path(__file__).resolve().parents[1]


def run_vllm(python: str, request: dict) -> dict:
    """scripts/vllm_greedy.py's RESULT, or {"error": its last line} where it failed."""
    run = subprocess.run(
        [python, str(REPO / "scripts" / "vllm_greedy.py"), json.dumps(request)],
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    for line in run.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line.removeprefix("RESULT "))
    lines = [line for line in (run.stderr or run.stdout).splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line or "error" in line]
    return {"error": (errors or lines or ["no output"])[-1].strip()[:300], "returncode": run.returncode}


def ours_dflash(ckpt, head: str, prompts: list[list[int]], tokens: list[list[int]], k: int) -> float:
    """Mean acceptance length of our own drafting (orl.model.dflash_vllm.propose) over vLLM's outputs."""
    drafter = load_drafter(head)
    samples = make_samples(ckpt, list(zip(prompts, tokens, strict=True)), drafter.cfg.aux_ids)
    return acceptance_estimate(drafter, ckpt.model.model.embed_tokens, ckpt.model.lm_head, samples, k)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", required=True, help="the AR target's Qwen3 export")
    p.add_argument("--method", default="eagle3", choices=("eagle3", "dflash"), help="vLLM's method")
    p.add_argument("--head", required=True, help="the head (orl train-eagle3) or drafter (orl train-dflash)")
    p.add_argument("--prompts", type=int, default=16, help="first N TinyCode test prompts (medium)")
    p.add_argument("--k", type=int, default=3, help="num_speculative_tokens")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--plain-vllm", action="store_true", help="also decode with plain vLLM and compare")
    p.add_argument("--vllm-python", default=str(REPO / ".venv-vllm" / "bin" / "python"))
    p.add_argument("--out", required=True)
    args = p.parse_args()
    ckpt = load_checkpoint(args.target)
    problems = tinycode.eval_problems("medium")[: args.prompts]
    prompts = [ckpt.tokenizer.encode(r["prompt"]) for r in problems]
    base = {
        "target": args.target,
        "prompts": prompts,
        "max_tokens": args.max_tokens,
        "stop_token_ids": list(ckpt.tokenizer.eos_ids),
    }
    engine = ReferenceAR(ckpt)
    ours = [engine.generate(r["prompt"], args.max_tokens).token_ids for r in problems]
    plain = run_vllm(args.vllm_python, base) if args.plain_vllm else {"tokens": ours}
    spec = run_vllm(
        args.vllm_python,
        {
            **base,
            "speculative_config": {
                "method": args.method,
                "model": args.head,
                "num_speculative_tokens": args.k,
            },
        },
    )
    result = {
        "target": args.target,
        "method": args.method,
        "head": args.head,
        "prompts": len(prompts),
        "k": args.k,
        "max_tokens": args.max_tokens,
        "plain_wall_s": plain.get("wall_s"),
        "spec_wall_s": spec.get("wall_s"),
    }
    if "error" in plain or "error" in spec:
        result["status"] = "not run: vLLM CPU: " + (spec.get("error") or plain.get("error"))
    else:
        steps = sum(m["num_spec_steps"] for m in spec["spec"])
        accepted = sum(m["num_accepted_draft_tokens"] for m in spec["spec"])
        result.update(
            status="measured",
            tokens_equal=spec["tokens"] == plain["tokens"] == ours[: len(prompts)],
            compared_with="our reference greedy decoder" + (" and plain vLLM" if args.plain_vllm else ""),
            generated_tokens=sum(map(len, spec["tokens"])),
            verify_steps=steps,
            drafted=sum(m["num_draft_tokens"] for m in spec["spec"]),
            accepted=accepted,
            mean_acceptance_length=round(1 + accepted / steps, 4) if steps else None,
            per_request=[
                {"tokens": len(t), "steps": m["num_spec_steps"], "accepted": m["num_accepted_draft_tokens"]}
                for t, m in zip(spec["tokens"], spec["spec"], strict=True)
            ],
            spec_tokens=spec["tokens"],
            reference_tokens=ours,
        )
        if args.method == "dflash":
            result["ours_acceptance_length"] = round(
                ours_dflash(ckpt, args.head, prompts, spec["tokens"], args.k), 4
            )
    atomic_write_json(args.out, result)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
