# On a CPU profile the vLLM rows of Tables 1 and 2 run through vLLM's CPU build in its own environment
# (`make vllm-env`, .venv-vllm; config `vllm_python`); without it they are "not run" records (common.smk
# missing). A checkpoint this DAG trains in our layout is served from its Qwen3 export (`orl export --format
# qwen3`), as vLLM loads any Qwen3ForCausalLM folder; the EAGLE-3 head and the DFlash drafter (train.smk
# train_eagle3, train_dflash) are written in vLLM's own layouts and served as they are. Speculative rows
# run at the num_speculative_tokens `orl spec-sweep` measured fastest on the first bench_limit prompts of
# the suite's choosing split (config `choose_split`: dev, then measured on test). Where vLLM's CPU build
# fails a method, the rows are "not run: vLLM CPU: <its error>" records (orl/engines/vllm.py). On CUDA the
# generic rules run them as before.

from orl.workflow_vllm import VllmPlan

VLLM_ORL = f"OMP_NUM_THREADS={THREADS} TQDM_MININTERVAL=5 {VLLM_PYTHON} -m orl.cli"
VLLM_CPU = not config["device"].startswith("cuda")
VLLM_ROWS = [row for row in dict.fromkeys(LATENCY_ROWS + QUALITY_ROWS)
             if VLLM_CPU and row.engine == "vllm" and not missing(row)]  # fmt: skip
VLLM_SPEC_ROWS = [row for row in VLLM_ROWS if row.draft]
SPEC_TOKENS = config.get("spec_tokens", [2, 3, 4, 5, 6])
# Our checkpoints that vLLM reads through their Qwen3 export: the AR target and draft trained here.
EXPORTED = sorted({key for row in VLLM_ROWS for key in (row.ckpt, row.draft) if key in ("ar", "draft")
                   and key in BUILT_HERE})  # fmt: skip


# The checkpoints vLLM serves, its sweep's choice and the flags of its runs (orl/workflow_vllm.py VllmPlan).
_VLLM = VllmPlan(plan=PLAN, exported=frozenset(EXPORTED))
vllm_ckpt, spec_file, vllm_inputs, vllm_flags = _VLLM.ckpt, _VLLM.spec_file, _VLLM.inputs, _VLLM.flags

VLLM_RUN = one_of(row.key for row in VLLM_ROWS)
# vLLM rows timed on their own; those of config latency_sitting are rule latency_sitting's.
VLLM_TIMED_ALONE = one_of(row.key for row in VLLM_ROWS if row.key not in SITTING_IDS)
VLLM_SCORED_ALONE = one_of(row.key for row in VLLM_ROWS if row.key not in SITTING_SCORED)


ruleorder: vllm_latency > latency
ruleorder: vllm_quality > quality_row


rule export_qwen3:
    input:
        lambda wc: ckpt_done(wc.key),
    output:
        f"{CKPT}/{{key}}-qwen3/config.json",
    log:
        f"{LOGS}/export_qwen3_{{key}}.log",
    wildcard_constraints:
        key=one_of(EXPORTED),
    params:
        src=lambda wc: ckpt(wc.key),
        out=lambda wc, output: os.path.dirname(output[0]),
    shell:
        # `orl export` writes a new folder; a rerun replaces the previous export.
        "rm -rf {params.out} && {ORL} export {params.src} --format qwen3 --out {params.out} > {log} 2>&1"


rule spec_sweep:
    input:
        lambda wc: vllm_inputs(ROW[wc.row], wc.suite, sweep=False),
    output:
        f"{RESULTS}/oppoint/{{suite}}/spec_{{row}}.json",
    log:
        f"{LOGS}/spec_sweep_{{suite}}_{{row}}.log",
    wildcard_constraints:
        suite=one_of(SUITES),
        row=one_of(row.key for row in VLLM_SPEC_ROWS),
    threads: THREADS
    resources:
        gpu=GPU,
    params:
        **DECODE,
        flags=lambda wc: vllm_flags(ROW[wc.row], wc.suite, sweep=False),
        tokens=",".join(str(k) for k in SPEC_TOKENS),
        limit=config["bench_limit"],
        latency_warmup=config["latency_warmup"],
        split=CHOOSE_SPLIT,
    shell:
        "{VLLM_ORL} spec-sweep {params.flags} --suite {wildcards.suite} --split {params.split} "
        "--limit {params.limit} "
        "--tokens {params.tokens} --warmup {params.latency_warmup} --max-new-tokens {params.max_new_tokens} "
        "--device {params.device} --dtype {params.dtype} {params.chat} --out {output} --no-progress > {log} 2>&1"


rule vllm_latency:
    input:
        lambda wc: vllm_inputs(ROW[wc.run], wc.suite),
    output:
        f"{RESULTS}/latency/{{suite}}/{{run}}.jsonl",
    log:
        f"{LOGS}/latency_{{suite}}_{{run}}.log",
    wildcard_constraints:
        suite=one_of(SUITES),
        run=VLLM_TIMED_ALONE,
    threads: THREADS
    resources:
        gpu=GPU,
    params:
        **DECODE,
        flags=lambda wc: vllm_flags(ROW[wc.run], wc.suite),
        limit=limit_flag(config["eval_limit"]),
        latency_warmup=config["latency_warmup"],
    shell:
        "{VLLM_ORL} bench-latency {params.flags} --suite {wildcards.suite} {params.limit} "
        "--warmup {params.latency_warmup} --max-new-tokens {params.max_new_tokens} --device {params.device} "
        "--dtype {params.dtype} {params.chat} --out {output} --no-progress > {log} 2>&1"


rule vllm_quality:
    input:
        lambda wc: vllm_inputs(ROW[wc.run], wc.suite),
    output:
        f"{RESULTS}/quality/{{suite}}/row_{{run}}.jsonl",
    log:
        f"{LOGS}/quality_row_{{suite}}_{{run}}.log",
    wildcard_constraints:
        suite=one_of(SUITES),
        run=VLLM_SCORED_ALONE,
    threads: THREADS
    resources:
        gpu=GPU,
    params:
        **DECODE,
        flags=lambda wc: vllm_flags(ROW[wc.run], wc.suite),
        limit=limit_flag(config["eval_limit"]),
    shell:
        "{VLLM_ORL} eval-quality {params.flags} --suite {wildcards.suite} {params.limit} "
        "--max-new-tokens {params.max_new_tokens} --device {params.device} --dtype {params.dtype} {params.chat} "
        "--out {output} --no-progress > {log} 2>&1"
