"""Forwards spent on positions after the final <eos>, across a suite (the <eos> rule of docs/method.md §2).

A forward is spent on the dropped tail when everything it commits for a request lies after that
request's final <eos> (the first end token of the completion, which is kept): such a step
decodes only text that the cut throws away. The script decodes a suite with the shared block
decoder (orl.decoding.decode_blocks, the reference decoder's and the rollout's code) and prints,
per policy: requests, generated tokens, NFE, TPF, the forwards spent only on the dropped tail
(and how many requests spent any), and pass@1 from the sandbox.

    python scripts/measure_eos_tail.py --ckpt CKPT --suite tinycode --policy fixed:1 --policy threshold:0.7

Run it from another checkout (PYTHONPATH=<old tree>) to measure an older rule on the same model.
"""

from __future__ import annotations

import argparse
import json

import torch

from orl.decoding import Policy, StepView, decode_blocks, decode_rule
from orl.model.checkpoint import load_checkpoint
from orl.sandbox import check_many
from orl.tasks import load_suite


class TailCounter:
    """Per request: the completion indices each step committed (our layout: block j starts at j * B)."""

    def __init__(self, rows: int, block: int):
        self.block = block
        self.steps: list[list[list[int]]] = [[] for _ in range(rows)]

    def __call__(self, view: StepView) -> None:
        for i in view.active.nonzero().flatten().tolist():
            committed = view.out.committed[i].nonzero().flatten().tolist()
            self.steps[i].append([view.block * self.block + c for c in committed])

    def tail_forwards(self, row: int, kept: int) -> int:
        """Steps of `row` whose every commit lies at completion index >= kept (after the final <eos>)."""
        return sum(all(c >= kept for c in step) for step in self.steps[row])


def measure(ckpt, problems: list[dict], policy: Policy, max_new_tokens: int, batch: int) -> dict:
    tok, model = ckpt.tokenizer, ckpt.model
    rule = decode_rule(model.config, tok.eos_ids, policy)
    tokens = nfe = tail = requests_with_tail = 0
    texts = []
    for lo in range(0, len(problems), batch):
        chunk = problems[lo : lo + batch]
        prompts = [tok.encode(p["prompt"]) for p in chunk]
        counter = TailCounter(len(prompts), rule.block)
        result = decode_blocks(
            model, prompts, rule, max_new_tokens=max_new_tokens, pad_id=tok.pad_id, observer=counter
        )
        for i, ids in enumerate(result.completions):
            wasted = counter.tail_forwards(i, len(ids))
            tokens, nfe, tail = tokens + len(ids), nfe + result.nfe[i], tail + wasted
            requests_with_tail += wasted > 0
            texts.append(tok.decode_completion(ids))
    verdicts = check_many(problems, texts, progress=False, timeout_s=5.0, workers=1)
    return {
        "policy": str(policy),
        "requests": len(problems),
        "tokens": tokens,
        "nfe": nfe,
        "tpf": tokens / max(1, nfe),
        "tail_forwards": tail,
        "tail_share": tail / max(1, nfe),
        "requests_with_tail_forwards": requests_with_tail,
        "pass_at_1": sum(v.passed for v in verdicts) / max(1, len(problems)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ckpt", required=True, help="block-diffusion checkpoint (our layout)")
    parser.add_argument("--suite", default="tinycode")
    parser.add_argument("--policy", action="append", default=None, help="repeatable; default fixed:1")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--alpha", type=float, default=None, help="override the checkpoint's residual α")
    parser.add_argument("--batch", type=int, default=32, help="requests decoded together (same results)")
    parser.add_argument("--json", default=None, help="also append the rows to this JSONL file")
    args = parser.parse_args()
    torch.set_num_threads(1)
    ckpt = load_checkpoint(args.ckpt)
    if args.alpha is not None:
        ckpt.model.config.residual_alpha = args.alpha
    problems = load_suite(args.suite, limit=args.limit)
    for spec in args.policy or ["fixed:1"]:
        row = {
            "ckpt": args.ckpt,
            "suite": args.suite,
            **measure(ckpt, problems, Policy.parse(spec), args.max_new_tokens, args.batch),
        }
        print(
            " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()),
            flush=True,
        )
        if args.json:
            with open(args.json, "a") as handle:
                handle.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
