"""Greedy token ids from vllm.LLM on the CPU, optionally with a speculative method; run by vLLM's environment.

    .venv-vllm/bin/python scripts/vllm_greedy.py TARGET_DIR PROMPTS_JSON MAX_TOKENS [METHOD DRAFT_DIR K]

PROMPTS_JSON: a JSON list of token-id lists (our tokenizer's ids; vLLM runs with skip_tokenizer_init). Prints
one line `RESULT {"tokens": [...], "spec": [...] | null, "wall_s": ...}` where spec holds each request's
vLLM spec-decode summary (num_spec_steps, num_draft_tokens, num_accepted_draft_tokens). It imports nothing
from the harness, so it runs in the vLLM environment as it is. The `__main__` guard is needed: vLLM spawns
its engine-core process, which imports this file again.
"""

import json
import sys
import time


def main() -> None:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    target, prompts, max_tokens = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
    kwargs = dict(model=target, skip_tokenizer_init=True, dtype="float32", max_num_seqs=1, enforce_eager=True,
                  enable_prefix_caching=False, kv_cache_memory_bytes=64 * 2**20, seed=0)
    if len(sys.argv) > 4:
        method, draft, k = sys.argv[4], sys.argv[5], int(sys.argv[6])
        kwargs["speculative_config"] = {"method": method, "model": draft, "num_speculative_tokens": k}
        kwargs["per_request_spec_decode_metrics"] = "summary"
    llm = LLM(**kwargs)
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, detokenize=False, ignore_eos=True)
    start = time.perf_counter()
    outs = llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in prompts], params, use_tqdm=False)
    wall = time.perf_counter() - start
    spec = None
    if "speculative_config" in kwargs:
        spec = []
        for out in outs:
            m = out.outputs[0].spec_decode_metrics
            spec.append(m.to_dict() if hasattr(m, "to_dict") else m)
    print("RESULT " + json.dumps({"tokens": [list(out.outputs[0].token_ids) for out in outs], "spec": spec,
                                  "wall_s": wall}), flush=True)


if __name__ == "__main__":
    main()
