# Table 2: batch-1 latency and pass@1 of every system at matched accuracy. GPU-only rows run
# through the same command; where they cannot run, their record says "not run: <reason>".
# The rows (LATENCY_ROWS, QUALITY_ROWS) and their input/flag functions live in common.smk, since
# report.smk reads the rows too and snakemake --lint wants functions kept apart from rules.

rule latency:
    input:
        _row_inputs,
    output:
        f"{RESULTS}/latency/{{row}}.jsonl",
    wildcard_constraints:
        row="|".join(LATENCY_ROWS),
    params:
        env=ENV,
        orl=ORL,
        flags=_row_flags,
        suite=SUITE,
        limit=config["latency_limit"],
        warmup=config["latency_warmup"],
        max_new_tokens=config["max_new_tokens"],
    log:
        f"{LOGS}/latency_{{row}}.log",
    threads: THREADS
    resources:
        gpu=lambda wc: 1 if LATENCY_ROWS[wc.row][1] == "vllm" or PAPER else 0,
    shell:
        "{params.env} {params.orl} bench-latency {params.flags} --suite {params.suite} --limit {params.limit} "
        "--warmup {params.warmup} --max-new-tokens {params.max_new_tokens} --out {output} > {log} 2>&1"


rule quality_row:
    input:
        _row_inputs,
    output:
        f"{RESULTS}/quality/row_{{row}}.jsonl",
    wildcard_constraints:
        row="|".join(QUALITY_ROWS),
    params:
        env=ENV,
        orl=ORL,
        flags=_row_flags,
        suite=SUITE,
        limit=limit_flag(config["eval_limit"]),
        max_new_tokens=config["max_new_tokens"],
    log:
        f"{LOGS}/quality_row_{{row}}.log",
    threads: THREADS
    resources:
        gpu=lambda wc: 1 if LATENCY_ROWS[wc.row][1] == "vllm" or PAPER else 0,
    shell:
        "{params.env} {params.orl} eval-quality {params.flags} --suite {params.suite} {params.limit} "
        "--max-new-tokens {params.max_new_tokens} --out {output} --no-progress > {log} 2>&1"
