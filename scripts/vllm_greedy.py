"""Greedy token ids from vllm.LLM on the CPU, optionally with a speculative method; run by vLLM's environment.

    .venv-vllm/bin/python scripts/vllm_greedy.py REQUEST_JSON

REQUEST_JSON: {"target": dir, "prompts": [[token ids], ...], "max_tokens": n, "stop_token_ids": [ids]
(absent: generate to max_tokens), "speculative_config": {...} (absent: plain decoding)}; the prompts are our
tokenizer's ids (vLLM runs with skip_tokenizer_init). Prints one line `RESULT {"tokens": [...], "spec":
[...] | null, "wall_s": ...}` where spec holds each request's vLLM spec-decode summary (num_spec_steps,
num_draft_tokens, num_accepted_draft_tokens). It imports nothing from the harness, so it runs in the vLLM
environment as it is. The `__main__` guard is needed: vLLM spawns its engine-core process, which imports
this file again."""

import json
import sys
import time


def main() -> None:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    request = json.loads(sys.argv[1])
    kwargs = dict(
        model=request["target"],
        skip_tokenizer_init=True,
        dtype="float32",
        max_num_seqs=1,
        enforce_eager=True,
        enable_prefix_caching=False,
        kv_cache_memory_bytes=64 * 2**20,
        seed=0,
    )
    if request.get("speculative_config"):
        kwargs["speculative_config"] = request["speculative_config"]
        kwargs["per_request_spec_decode_metrics"] = "summary"
    llm = LLM(**kwargs)
    stop = request.get("stop_token_ids")
    params = SamplingParams(
        temperature=0.0,
        max_tokens=request["max_tokens"],
        detokenize=False,
        **({"stop_token_ids": stop} if stop else {"ignore_eos": True}),
    )
    start = time.perf_counter()
    outs = llm.generate(
        [TokensPrompt(prompt_token_ids=ids) for ids in request["prompts"]], params, use_tqdm=False
    )
    wall = time.perf_counter() - start
    spec = None
    if "speculative_config" in kwargs:
        spec = []
        for out in outs:
            m = out.outputs[0].spec_decode_metrics
            spec.append(m.to_dict() if hasattr(m, "to_dict") else m)
    print(
        "RESULT "
        + json.dumps(
            {"tokens": [list(out.outputs[0].token_ids) for out in outs], "spec": spec, "wall_s": wall}
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
