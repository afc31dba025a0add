# Table 2: batch-1 latency and pass@1 of every system at matched accuracy. GPU-only rows run
# through the same command; where they cannot run, their record says "not run: <reason>".

# row -> (system, engine, target checkpoint, draft checkpoint or None, operating point or None)
LATENCY_ROWS = {
    "ar_hf": ("AR (hf)", "hf", "ar", None, None),
    "ar_hf_assisted": ("AR + draft (hf assisted)", "hf-assisted", "ar", "draft", None),
    "ar_dflash": ("AR + DFlash-style drafter", "dflash", "ar", "dlm", None),
    "dlm": ("dLLM base", "dlmrt", "dlm", None, "dlm"),
    "orl": ("dLLM + ORL", "dlmrt", "orl", None, "orl"),
    "orl_nvfp4": ("dLLM + ORL NVFP4", "dlmrt", "orl-nvfp4", None, "orl"),
    "ar_vllm": ("AR (vLLM)", "vllm", "ar", None, None),
    "ar_vllm_draft": ("AR + draft (vLLM)", "vllm", "ar", "draft", None),
    "ar_vllm_eagle3": ("AR + EAGLE3 (vLLM)", "vllm", "ar", "eagle3", None),
}
# Rows whose pass@1 is measured here; the dLLM rows take theirs from the operating point.
QUALITY_ROWS = ["ar_hf", "ar_hf_assisted", "ar_dflash", "ar_vllm", "ar_vllm_draft", "ar_vllm_eagle3"]


def _row_ckpt(name):
    if name is None:
        return None
    if name == "orl-nvfp4":
        return f"{CKPT}/orl-nvfp4"
    if name == "eagle3":
        return (config.get("checkpoints") or {}).get("eagle3", f"{CKPT}/eagle3-not-trained-here")
    return ckpt(name)


def _row_inputs(wc):
    _, engine, target, draft, point = LATENCY_ROWS[wc.row]
    inputs = [f"{_row_ckpt(target)}/config.json"]
    if draft and draft != "eagle3":  # EAGLE3 heads are not trained here: the vLLM row says why it did not run
        inputs.append(f"{_row_ckpt(draft)}/config.json")
    if point:
        inputs.append(f"{RESULTS}/oppoint/{point}.json")
    return inputs


def _row_flags(wc):
    system, engine, target, draft, point = LATENCY_ROWS[wc.row]
    flags = [f"--engine {engine}", f"--ckpt {_row_ckpt(target)}", f"--system '{system}'"]
    if draft:
        flags.append(f"--draft {_row_ckpt(draft)}")
    if point:
        flags.append(f"--policy @{RESULTS}/oppoint/{point}.json")
    return " ".join(flags)


rule latency:
    input:
        _row_inputs,
    output:
        f"{RESULTS}/latency/{{row}}.jsonl",
    wildcard_constraints:
        row="|".join(LATENCY_ROWS),
    params:
        flags=_row_flags,
    log:
        f"{LOGS}/latency_{{row}}.log",
    threads: THREADS
    resources:
        gpu=lambda wc: 1 if LATENCY_ROWS[wc.row][1] == "vllm" or PAPER else 0,
    shell:
        "{ENV} {ORL} bench-latency {params.flags} --suite {SUITE} --limit {config[latency_limit]} "
        "--warmup {config[latency_warmup]} --max-new-tokens {config[max_new_tokens]} --out {output} > {log} 2>&1"


rule quality_row:
    input:
        _row_inputs,
    output:
        f"{RESULTS}/quality/row_{{row}}.jsonl",
    wildcard_constraints:
        row="|".join(QUALITY_ROWS),
    params:
        flags=_row_flags,
        limit=limit_flag(config["eval_limit"]),
    log:
        f"{LOGS}/quality_row_{{row}}.log",
    threads: THREADS
    resources:
        gpu=lambda wc: 1 if LATENCY_ROWS[wc.row][1] == "vllm" or PAPER else 0,
    shell:
        "{ENV} {ORL} eval-quality {params.flags} --suite {SUITE} {params.limit} "
        "--max-new-tokens {config[max_new_tokens]} --out {output} --no-progress > {log} 2>&1"
