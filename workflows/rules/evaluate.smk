# Quality: threshold sweeps and their matched-accuracy operating points, pass@1 of every other row
# (the matched-accuracy reference included), Table 1's extra suites, entropy per step, and the engine
# benchmark of Table 3. Which rows each rule runs comes from orl/rows.py (common.smk).


rule sweep:
    input:
        lambda wc: ckpt_done(ROW[wc.row].ckpt),
    output:
        f"{RESULTS}/sweep/{{row}}.jsonl",
    wildcard_constraints:
        row=one_of(row.key for row in SWEEP_ROWS),
    params:
        **DECODE,
        ckpt=lambda wc: ckpt(ROW[wc.row].ckpt),
        system=lambda wc: ROW[wc.row].system,
        taus=",".join(str(t) for t in config["sweep_thresholds"]),
        limit=limit_flag(config["eval_limit"]),
    log:
        f"{LOGS}/sweep_{{row}}.log",
    threads: THREADS
    resources:
        gpu=GPU,
    shell:
        "{ORL} sweep --ckpt {params.ckpt} --suite {params.suite} --thresholds {params.taus} {params.limit} "
        "--max-new-tokens {params.max_new_tokens} --system '{params.system}' --device {params.device} "
        "--dtype {params.dtype} --out {output} --no-progress > {log} 2>&1"


rule operating_point:
    # Matched accuracy (METHOD.md §4): the fastest threshold whose pass@1 is within the tolerance of the
    # reference row (orl.rows.MATCH_REFERENCE). Writes the choice and a quality record of that sweep point.
    input:
        sweep=f"{RESULTS}/sweep/{{row}}.jsonl",
        reference=quality_file(ROW[rows.MATCH_REFERENCE]),
    output:
        point=f"{RESULTS}/oppoint/{{row}}.json",
        quality=f"{RESULTS}/quality/op_{{row}}.jsonl",
    wildcard_constraints:
        row=one_of(row.key for row in SWEEP_ROWS),
    params:
        match_tolerance=config["match_tolerance"],
    log:
        f"{LOGS}/oppoint_{{row}}.log",
    shell:
        "{ORL} operating-point --sweep {input.sweep} --reference {input.reference} "
        "--tolerance {params.match_tolerance} --out {output.point} --quality-out {output.quality} > {log} 2>&1"


rule strict_point:
    # Table 3 compares identical decoding settings with SGLang, whose LowConfidence commits confidence > τ:
    # its jobs decode at the strict variant of the operating point (strict-threshold:τ, orl/decoding/policy.py).
    input:
        f"{RESULTS}/oppoint/{{row}}.json",
    output:
        f"{RESULTS}/oppoint/strict/{{row}}.json",
    wildcard_constraints:
        row=one_of(row.key for row in SWEEP_ROWS),
    run:
        write_strict_point(input[0], output[0])


rule quality_row:
    # pass@1 of a row that is not swept: the AR and speculative rows, the quantized model at the
    # +ORL operating point, and the matched-accuracy reference.
    input:
        lambda wc: row_inputs(ROW[wc.row]),
    output:
        f"{RESULTS}/quality/row_{{row}}.jsonl",
    wildcard_constraints:
        row=one_of(runnable(QUALITY_ROWS, quality_file)),
    params:
        **DECODE,
        flags=lambda wc: row_flags(ROW[wc.row]),
        limit=limit_flag(config["eval_limit"]),
    log:
        f"{LOGS}/quality_row_{{row}}.log",
    threads: THREADS
    resources:
        gpu=GPU,
    shell:
        "{ORL} eval-quality {params.flags} --suite {params.suite} {params.limit} "
        "--max-new-tokens {params.max_new_tokens} --device {params.device} --dtype {params.dtype} "
        "--out {output} --no-progress > {log} 2>&1"


if config["extra_suites"]:

    rule quality_extra_suite:
        # Table 1 on other suites (HumanEval): pass@1 of its rows at their own operating points.
        input:
            lambda wc: row_inputs(ROW[wc.row]),
        output:
            f"{RESULTS}/quality/{{suite}}_{{row}}.jsonl",
        wildcard_constraints:
            suite=one_of(config["extra_suites"]),
            row=one_of(row.key for row in SWEEP_ROWS if 1 in row.tables),
        params:
            **DECODE,
            flags=lambda wc: row_flags(ROW[wc.row]),
        log:
            f"{LOGS}/quality_{{suite}}_{{row}}.log",
        threads: THREADS
        resources:
            gpu=GPU,
        shell:
            "{ORL} eval-quality {params.flags} --suite {wildcards.suite} --max-new-tokens {params.max_new_tokens} "
            "--device {params.device} --dtype {params.dtype} --out {output} --no-progress > {log} 2>&1"


rule entropy_profile:
    input:
        lambda wc: ckpt_done(ROW[wc.row].ckpt),
    output:
        f"{RESULTS}/entropy/{{row}}.jsonl",
    wildcard_constraints:
        row=one_of(row.key for row in ENTROPY_ROWS),
    params:
        **DECODE,
        ckpt=lambda wc: ckpt(ROW[wc.row].ckpt),
        system=lambda wc: ROW[wc.row].system,
        limit=limit_flag(config["bench_limit"]),
    log:
        f"{LOGS}/entropy_{{row}}.log",
    threads: THREADS
    resources:
        gpu=GPU,
    shell:
        "{ORL} entropy-profile --ckpt {params.ckpt} --suite {params.suite} --policy fixed:1 {params.limit} "
        "--max-new-tokens {params.max_new_tokens} --system '{params.system}' --device {params.device} "
        "--dtype {params.dtype} --out {output} --no-progress > {log} 2>&1"


rule bench_engine:
    # Table 3: the same model and policy on every engine of the row's Table 3 lines (dlmrt compiled or
    # graph-captured, dlmrt eager, the reference decoder), in one process, on the same prompts.
    input:
        ckpt=ckpt_done(ENGINE_ROW.ckpt),
        point=point_file(ENGINE_ROW, strict=True),
    output:
        ENGINE_FILE,
    params:
        **DECODE,
        ckpt=lambda wc, input: os.path.dirname(input.ckpt),
        bench_limit=config["bench_limit"],
        system=ENGINE_ROW.system,
        engines=",".join(ENGINE_ROW.engine_of(line) for line in ENGINE_ROW.lines if line.table == 3),
    log:
        f"{LOGS}/bench_engine.log",
    threads: THREADS
    resources:
        gpu=GPU,
    shell:
        "{ORL} bench-engine --ckpt {params.ckpt} --policy @{input.point} --engines {params.engines} "
        "--suite {params.suite} --limit {params.bench_limit} --max-new-tokens {params.max_new_tokens} "
        "--system '{params.system}' --device {params.device} --dtype {params.dtype} --out {output} > {log} 2>&1"


rule serving_bench:
    # Table 3: a serving stack running the same dLLM (SGLang's dLLM backend on the SDAR export), batch 1,
    # at the same strict operating point as bench_engine; an `engine_bench` record, "not run" where it cannot.
    input:
        lambda wc: row_inputs(ROW[wc.row], strict=True),
    output:
        f"{RESULTS}/engine/{{row}}.jsonl",
    wildcard_constraints:
        row=one_of(runnable(SERVING_BENCH_ROWS, serving_bench_file)),
    params:
        **DECODE,
        flags=lambda wc: row_flags(ROW[wc.row], strict=True),
        bench_limit=config["bench_limit"],
    log:
        f"{LOGS}/serving_bench_{{row}}.log",
    threads: THREADS
    resources:
        gpu=GPU,
    shell:
        "{ORL} bench-latency {params.flags} --kind engine_bench --suite {params.suite} --limit {params.bench_limit} "
        "--warmup 2 --max-new-tokens {params.max_new_tokens} --device {params.device} --dtype {params.dtype} "
        "--out {output} --no-progress > {log} 2>&1"
