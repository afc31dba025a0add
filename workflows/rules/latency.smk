# Table 1 and 2: batch-1 latency of every row with a line there (orl/rows.py), at matched accuracy.
# GPU-only rows run through the same command; where they cannot run, their record says
# "not run: <reason>" (the command writes it, or rule not_run where a checkpoint is missing).


rule latency:
    input:
        lambda wc: row_inputs(ROW[wc.row]),
    output:
        f"{RESULTS}/latency/{{row}}.jsonl",
    wildcard_constraints:
        row=one_of(runnable(LATENCY_ROWS, latency_file)),
    params:
        **DECODE,
        flags=lambda wc: row_flags(ROW[wc.row]),
        latency_limit=config["latency_limit"],
        latency_warmup=config["latency_warmup"],
    log:
        f"{LOGS}/latency_{{row}}.log",
    threads: THREADS
    resources:
        gpu=GPU,
    shell:
        "{ORL} bench-latency {params.flags} --suite {params.suite} --limit {params.latency_limit} "
        "--warmup {params.latency_warmup} --max-new-tokens {params.max_new_tokens} --device {params.device} "
        "--dtype {params.dtype} --out {output} > {log} 2>&1"
