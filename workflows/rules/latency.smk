# Table 1 and 2: batch-1 latency of every run with a line there (orl/rows.py), at matched accuracy, on
# every suite, over the same problems as its quality evaluation (one prompt set per table: eval_limit).
# GPU-only rows run through the same command; where they cannot run, their record says
# "not run: <reason>" (the command writes it, or rule not_run where a checkpoint is missing).


rule latency:
    input:
        lambda wc: row_inputs(*RUNS[wc.run], wc.suite),
    output:
        f"{RESULTS}/latency/{{suite}}/{{run}}.jsonl",
    log:
        f"{LOGS}/latency_{{suite}}_{{run}}.log",
    wildcard_constraints:
        suite=one_of(SUITES),
        run=one_of(sorted(set(runnable(LATENCY_JOBS, latency_file)) - SITTING_IDS)),
    threads: THREADS
    resources:
        gpu=GPU,
    params:
        **DECODE,
        flags=lambda wc: row_flags(*RUNS[wc.run], wc.suite),
        limit=limit_flag(config["eval_limit"]),
        latency_warmup=config["latency_warmup"],
    shell:
        "{ORL} bench-latency {params.flags} --suite {wildcards.suite} {params.limit} "
        "--warmup {params.latency_warmup} --max-new-tokens {params.max_new_tokens} --device {params.device} "
        "--dtype {params.dtype} {params.chat} --out {output} > {log} 2>&1"
