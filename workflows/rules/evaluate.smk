# Quality: threshold sweeps and their matched-accuracy operating points, pass@1 of every other row of
# Table 2 (the AR target, the matched-accuracy reference, included), Table 1's extra suites, entropy per
# step, and the engine benchmarks of Table 3 and of the speedup-vs-length figure. Which rows each rule
# runs comes from orl/rows.py (common.smk); {run} is a run id (row key, with _seed<N> where trained).
# Operating points (τ, a relaxed row's δ) are chosen on the split CHOOSE_SPLIT (config `choose_split`):
# on dev, the sweep, its reference and the choice are dev records (quality/<suite>/dev/) and the chosen
# point is then measured on test (rule point_quality); on test, the sweep's point is the row's record.

MATCH_REF = ROW[rows.MATCH_REFERENCE]


rule sweep:
    # On the choosing split; a matched point at the grid's lowest τ extends the grid below it until
    # accuracy falls off, an unmatched sweep whose most accurate point is the highest τ extends it above
    # (`orl sweep --reference`, docs/method.md §4).
    input:
        ckpt=lambda wc: ckpt_done(*ckpt_of(*RUNS[wc.run])),
        reference=lambda wc: choose_file(MATCH_REF, None, wc.suite),
    output:
        f"{RESULTS}/sweep/{{suite}}/{{run}}.jsonl",
    log:
        f"{LOGS}/sweep_{{suite}}_{{run}}.log",
    wildcard_constraints:
        suite=one_of(SUITES),
        run=one_of(run_id(row, seed) for row, seed, _ in SWEEP_JOBS),
    priority: lambda wc: PRIORITY_GATE if wc.run == RELAXED_REFERENCE_RUN else sweep_priority(wc.suite)
    threads: DECODE_THREADS
    resources:
        gpu=GPU,
    params:
        **DECODE,
        ckpt=lambda wc: ckpt(*ckpt_of(*RUNS[wc.run])),
        system=lambda wc: RUNS[wc.run][0].system,
        policy=SWEEP_POLICY,
        values=",".join(str(value) for value in SWEEP_VALUES),
        limit=limit_flag(config["eval_limit"]),
        block=lambda wc: block_flag(RUNS[wc.run][0], wc.suite),
        split=CHOOSE_SPLIT,
        match_tolerance=config["match_tolerance"],
    shell:
        "{ORL_DECODE} sweep --ckpt {params.ckpt} --suite {wildcards.suite} --split {params.split} "
        "--policy {params.policy} --values {params.values} {params.limit} --reference {input.reference} "
        "--tolerance {params.match_tolerance} "
        "{params.block} --max-new-tokens {params.max_new_tokens} --system '{params.system}' "
        "--device {params.device} --dtype {params.dtype} {params.chat} --out {output} --no-progress "
        "> {log} 2>&1"


rule operating_point:
    # Matched accuracy (docs/method.md §4): the fastest threshold whose pass@1 is within the tolerance of the
    # AR target's (orl.rows.MATCH_REFERENCE) on the same suite and not shown worse by the paired test.
    # Writes the choice and a quality record of that sweep point (on the choosing split).
    input:
        sweep=f"{RESULTS}/sweep/{{suite}}/{{run}}.jsonl",
        reference=lambda wc: choose_file(MATCH_REF, None, wc.suite),
    output:
        point=f"{RESULTS}/oppoint/{{suite}}/{{run}}.json",
        quality=(
            f"{RESULTS}/quality/{{suite}}/op_{{run}}.jsonl"
            if CHOOSE_SPLIT == "test"
            else f"{RESULTS}/quality/{{suite}}/{CHOOSE_SPLIT}/op_{{run}}.jsonl"
        ),
    log:
        f"{LOGS}/oppoint_{{suite}}_{{run}}.log",
    wildcard_constraints:
        suite=one_of(SUITES),
        run=one_of(run_id(row, seed) for row, seed, _ in SWEEP_JOBS),
    priority: PRIORITY_GATE
    params:
        match_tolerance=config["match_tolerance"],
    shell:
        "{ORL} operating-point --sweep {input.sweep} --reference {input.reference} "
        "--tolerance {params.match_tolerance} --out {output.point} --quality-out {output.quality} > {log} 2>&1"


RELAXED_REFERENCE = ROW[rows.RELAXED_REFERENCE]
RELAXED_REFERENCE_RUN = run_id(RELAXED_REFERENCE, seeds_of(RELAXED_REFERENCE)[0])  # its sweep gates them


rule relaxed_points:
    # A relaxed row's δ grid (orl.rows.RELAXED_DELTAS) measured on the choosing split: pass@1 and acceptance
    # length per δ. They depend on the base models only, not on ORL, so an ORL retrain (make reproduce
    # FORCE=1) reuses them and rule relaxed_sweep measures only the grid's extension.
    input:
        lambda wc: row_inputs(ROW[wc.row], None, wc.suite, relaxed=False),
    output:
        f"{RESULTS}/oppoint/{{suite}}/relaxed_points_{{row}}.json",
    log:
        f"{LOGS}/relaxed_points_{{suite}}_{{row}}.log",
    wildcard_constraints:
        suite=one_of(SUITES),
        row=one_of(row.key for row in RELAXED_ROWS),
    priority: PRIORITY_GATE
    threads: DECODE_THREADS
    resources:
        gpu=GPU,
    params:
        **DECODE,
        flags=lambda wc: row_flags(ROW[wc.row], None, wc.suite, relaxed=False),
        deltas=",".join(str(d) for d in rows.RELAXED_DELTAS),
        limit=limit_flag(config["eval_limit"]),
        split=CHOOSE_SPLIT,
    shell:
        "{ORL_DECODE} spec-sweep {params.flags} --suite {wildcards.suite} --split {params.split} {params.limit} "
        "--deltas {params.deltas} "
        "--max-new-tokens {params.max_new_tokens} --device {params.device} --dtype {params.dtype} "
        "{params.chat} --out {output} --no-progress > {log} 2>&1"


rule relaxed_sweep:
    # Relaxed verification (docs/metrics.md): a relaxed row's δ, the fastest of orl.rows.RELAXED_DELTAS
    # whose pass@1 is within RELAXED_TOLERANCE of ORL's (the page's relaxed comparison) and not shown worse.
    # On the choosing split, against ORL's pass@1 there (its chosen point's record), from the points of rule
    # relaxed_points; a match at the lowest δ extends the grid toward 0, halving the step, and only those
    # δ are measured here (docs/metrics.md, Splits).
    input:
        lambda wc: row_inputs(ROW[wc.row], None, wc.suite, relaxed=False),
        points=f"{RESULTS}/oppoint/{{suite}}/relaxed_points_{{row}}.json",
        reference=lambda wc: choose_file(RELAXED_REFERENCE, seeds_of(RELAXED_REFERENCE)[0], wc.suite),
    output:
        f"{RESULTS}/oppoint/{{suite}}/relaxed_{{row}}.json",
    log:
        f"{LOGS}/relaxed_sweep_{{suite}}_{{row}}.log",
    wildcard_constraints:
        suite=one_of(SUITES),
        row=one_of(row.key for row in RELAXED_ROWS),
    priority: PRIORITY_GATE
    threads: DECODE_THREADS
    resources:
        gpu=GPU,
    params:
        **DECODE,
        flags=lambda wc: row_flags(ROW[wc.row], None, wc.suite, relaxed=False),
        deltas=",".join(str(d) for d in rows.RELAXED_DELTAS),
        tolerance=rows.RELAXED_TOLERANCE,
        limit=limit_flag(config["eval_limit"]),
        split=CHOOSE_SPLIT,
    shell:
        "{ORL_DECODE} spec-sweep {params.flags} --suite {wildcards.suite} --split {params.split} {params.limit} "
        "--deltas {params.deltas} --measured {input.points} "
        "--reference {input.reference} --tolerance {params.tolerance} "
        "--max-new-tokens {params.max_new_tokens} --device {params.device} --dtype {params.dtype} "
        "{params.chat} --out {output} --no-progress > {log} 2>&1"


if CHOOSE_SPLIT != "test":

    rule point_quality:
        # A swept row's pass@1 and TPF on test, at the operating point chosen on dev (a sitting's rows: rule
        # latency_sitting scores the completions it timed).
        input:
            lambda wc: row_inputs(*RUNS[wc.run], wc.suite),
        output:
            f"{RESULTS}/quality/{{suite}}/op_{{run}}.jsonl",
        log:
            f"{LOGS}/point_quality_{{suite}}_{{run}}.log",
        wildcard_constraints:
            suite=one_of(SUITES),
            run=one_of(sorted({run_id(row, seed) for row, seed, _ in SWEEP_JOBS} - SITTING_SCORED)),
        threads: DECODE_THREADS
        resources:
            gpu=GPU,
        params:
            **DECODE,
            flags=lambda wc: row_flags(*RUNS[wc.run], wc.suite),
            limit=limit_flag(config["eval_limit"]),
        shell:
            "{ORL_DECODE} eval-quality {params.flags} --suite {wildcards.suite} --split test {params.limit} "
            "--max-new-tokens {params.max_new_tokens} --device {params.device} --dtype {params.dtype} "
            "{params.chat} --out {output} --no-progress > {log} 2>&1"

    rule reference_quality:
        # The AR target's pass@1 on the choosing split: what the sweeps there are matched to.
        input:
            lambda wc: row_inputs(MATCH_REF, None, wc.suite),
        output:
            f"{RESULTS}/quality/{{suite}}/{CHOOSE_SPLIT}/row_{MATCH_REF.key}.jsonl",
        log:
            f"{LOGS}/reference_quality_{{suite}}.log",
        wildcard_constraints:
            suite=one_of(SUITES),
        priority: PRIORITY_GATE
        threads: DECODE_THREADS
        resources:
            gpu=GPU,
        params:
            **DECODE,
            flags=lambda wc: row_flags(MATCH_REF, None, wc.suite),
            limit=limit_flag(config["eval_limit"]),
            split=CHOOSE_SPLIT,
        shell:
            "{ORL_DECODE} eval-quality {params.flags} --suite {wildcards.suite} --split {params.split} {params.limit} "
            "--max-new-tokens {params.max_new_tokens} --device {params.device} --dtype {params.dtype} "
            "{params.chat} --out {output} --no-progress > {log} 2>&1"


rule quality_row:
    # pass@1 of a Table 2 row that is not swept: the AR rows (the AR target among them), the speculative
    # rows, and the quantized model at the +ORL operating point (a sitting's rows: rule latency_sitting).
    input:
        lambda wc: row_inputs(*RUNS[wc.run], wc.suite),
    output:
        f"{RESULTS}/quality/{{suite}}/row_{{run}}.jsonl",
    log:
        f"{LOGS}/quality_row_{{suite}}_{{run}}.log",
    wildcard_constraints:
        suite=one_of(SUITES),
        run=one_of(sorted(set(runnable(QUALITY_JOBS, quality_file)) - SITTING_SCORED)),
    threads: DECODE_THREADS
    resources:
        gpu=GPU,
    params:
        **DECODE,
        flags=lambda wc: row_flags(*RUNS[wc.run], wc.suite),
        limit=limit_flag(config["eval_limit"]),
    shell:
        "{ORL_DECODE} eval-quality {params.flags} --suite {wildcards.suite} {params.limit} "
        "--max-new-tokens {params.max_new_tokens} --device {params.device} --dtype {params.dtype} "
        "{params.chat} --out {output} --no-progress > {log} 2>&1"


if EXTRA_SUITES:

    rule quality_extra_suite:
        # Table 1 on other suites (HumanEval; the paper's GSM8K, MATH-500 and MBPP from their local files):
        # pass@1 of its rows at their main-suite operating points.
        input:
            lambda wc: row_inputs(*RUNS[wc.run], MAIN) + suite_file_input(wc.suite),
        output:
            f"{RESULTS}/quality/{{suite}}/row_{{run}}.jsonl",
        log:
            f"{LOGS}/quality_{{suite}}_{{run}}.log",
        wildcard_constraints:
            suite=one_of(EXTRA_SUITES),
            run=one_of(run_id(row, seed) for row, seed, _ in EXTRA_JOBS),
        threads: DECODE_THREADS
        resources:
            gpu=GPU,
        params:
            **DECODE,
            flags=lambda wc: row_flags(*RUNS[wc.run], MAIN),
            suite_file=lambda wc: suite_file_flag(wc.suite),
        shell:
            "{ORL_DECODE} eval-quality {params.flags} --suite {wildcards.suite} {params.suite_file} "
            "--max-new-tokens {params.max_new_tokens} "
            "--device {params.device} --dtype {params.dtype} {params.chat} --out {output} --no-progress > {log} 2>&1"


rule entropy_profile:
    input:
        lambda wc: ckpt_done(*ckpt_of(*RUNS[wc.run])),
    output:
        f"{RESULTS}/entropy/{{run}}.jsonl",
    log:
        f"{LOGS}/entropy_{{run}}.log",
    wildcard_constraints:
        run=one_of(run_id(row, seeds_of(row)[0]) for row in ENTROPY_ROWS),
    threads: DECODE_THREADS
    resources:
        gpu=GPU,
    params:
        **DECODE,
        suite=MAIN,
        ckpt=lambda wc: ckpt(*ckpt_of(*RUNS[wc.run])),
        system=lambda wc: RUNS[wc.run][0].system,
        limit=limit_flag(config["bench_limit"]),
    shell:
        "{ORL_DECODE} entropy-profile --ckpt {params.ckpt} --suite {params.suite} --policy fixed:1 {params.limit} "
        "--max-new-tokens {params.max_new_tokens} --system '{params.system}' --device {params.device} "
        "--dtype {params.dtype} {params.chat} --out {output} --no-progress > {log} 2>&1"


ENGINE_SEED = seeds_of(ENGINE_ROW)[0]
ENGINE_CKPT = ckpt_done(*ckpt_of(ENGINE_ROW, ENGINE_SEED))
TABLE3_ENGINES = [ENGINE_ROW.engine_of(line) for line in ENGINE_ROW.lines if line.table == 3]
# The speedup-vs-length figure: dlmrt against the reference decoder only (the line roles of Table 3).
LENGTH_ENGINES = [ENGINE_ROW.engine_of(line) for line in ENGINE_ROW.lines
                  if line.table == 3 and line.role in ("subject", "reference")]  # fmt: skip


if not ENGINE_MISSING:
    # Without the ORL checkpoint these outputs are "not run" records (rule not_run).

    rule bench_engine:
        # Table 3: the same model and policy on every engine of the row's Table 3 lines (dlmrt compiled or
        # graph-captured, dlmrt eager, the reference decoder), in one process, on the same prompts.
        input:
            ckpt=ENGINE_CKPT,
            point=lambda wc: point_file(ENGINE_ROW, ENGINE_SEED, wc.suite, strict=True),
        output:
            f"{RESULTS}/engine/{{suite}}/bench.jsonl",
        log:
            f"{LOGS}/bench_engine_{{suite}}.log",
        wildcard_constraints:
            suite=one_of(SUITES),
        threads: THREADS
        resources:
            gpu=GPU,
        params:
            **DECODE,
            ckpt=lambda wc, input: os.path.dirname(input.ckpt),
            bench_limit=config["bench_limit"],
            system=ENGINE_ROW.system,
            engines=",".join(TABLE3_ENGINES),
            block=lambda wc: block_flag(ENGINE_ROW, wc.suite),
        shell:
            "{ORL} bench-engine --ckpt {params.ckpt} --policy @{input.point} --engines {params.engines} "
            "--suite {wildcards.suite} --limit {params.bench_limit} --max-new-tokens {params.max_new_tokens} "
            "--system '{params.system}' --device {params.device} --dtype {params.dtype} {params.chat} "
            "{params.block} --out {output} > {log} 2>&1"


rule strict_point:
    # Table 3 compares identical decoding settings with SGLang, whose LowConfidence commits confidence > τ:
    # its jobs decode at the strict variant of the operating point (Policy.strict_variant: strict-threshold:τ).
    input:
        f"{RESULTS}/oppoint/{{suite}}/{{run}}.json",
    output:
        f"{RESULTS}/oppoint/strict/{{suite}}/{{run}}.json",
    wildcard_constraints:
        suite=one_of(SUITES),
        run=one_of(run_id(row, seed) for row, seed in runs_of(SWEEP_ROWS)),
    run:
        write_strict_point(input[0], output[0])


rule serving_bench:
    # Table 3: a serving stack running the same dLLM (SGLang's dLLM backend on the SDAR export), batch 1,
    # at the same strict operating point as bench_engine; an `engine_bench` record, "not run" where it cannot.
    input:
        lambda wc: row_inputs(ROW[wc.row], ENGINE_SEED, wc.suite, strict=True),
    output:
        f"{RESULTS}/engine/{{suite}}/{{row}}.jsonl",
    log:
        f"{LOGS}/serving_bench_{{row}}_{{suite}}.log",
    wildcard_constraints:
        suite=one_of(SUITES),
        row=one_of(row.key for row in SERVING_BENCH_ROWS if not missing(row)),
    threads: THREADS
    resources:
        gpu=GPU,
    params:
        **DECODE,
        flags=lambda wc: row_flags(ROW[wc.row], ENGINE_SEED, wc.suite, strict=True),
        bench_limit=config["bench_limit"],
    shell:
        "{ORL} bench-latency {params.flags} --kind engine_bench --suite {wildcards.suite} --limit {params.bench_limit} "
        "--warmup 2 --max-new-tokens {params.max_new_tokens} --device {params.device} --dtype {params.dtype} "
        "{params.chat} --out {output} --no-progress > {log} 2>&1"


if not ENGINE_MISSING:

    rule bench_length:
        # The speedup-vs-length figure: fixed-length runs (--ignore-eos: every prompt decoded to N tokens,
        # docs/method.md §4) of dlmrt and the reference decoder on a handful of prompts, one per length.
        input:
            ckpt=ENGINE_CKPT,
            point=point_file(ENGINE_ROW, ENGINE_SEED, MAIN),
        output:
            f"{RESULTS}/engine/length/{{tokens}}.jsonl",
        log:
            f"{LOGS}/bench_length_{{tokens}}.log",
        wildcard_constraints:
            tokens=one_of(config["length_sweep"]),
        threads: THREADS
        resources:
            gpu=GPU,
        params:
            device=config["device"],
            dtype=config["dtype"],
            chat=DECODE["chat"],
            suite=MAIN,
            ckpt=lambda wc, input: os.path.dirname(input.ckpt),
            prompts=config["length_prompts"],
            system=ENGINE_ROW.system,
            engines=",".join(LENGTH_ENGINES),
            block=block_flag(ENGINE_ROW, MAIN),
        shell:
            "{ORL} bench-engine --ckpt {params.ckpt} --policy @{input.point} --engines {params.engines} "
            "--suite {params.suite} --limit {params.prompts} --max-new-tokens {wildcards.tokens} --ignore-eos "
            "--warmup 1 --system '{params.system}' --device {params.device} --dtype {params.dtype} {params.chat} "
            "{params.block} --out {output} > {log} 2>&1"
