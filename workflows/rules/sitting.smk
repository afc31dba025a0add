# Tables 1 and 2's speedups and throughput gains from one sitting: the rows of config latency_sitting
# (common.smk SITTING_RUNS) are timed together on each suite by `orl bench-sitting`, every engine built and
# warmed up first, then each prompt on every engine in turn, so that a busy machine slows every system
# alike (docs/metrics.md "Sittings"). Each row's latency record is the one rule latency (or vllm_latency)
# would write, with extra.sitting naming the sitting; the sitting also scores the completions it timed as the
# rows' pass@1 on test (common.smk SITTING_SCORED: one decode of the suite per row). On a CPU profile a vLLM
# row puts the whole sitting in the vLLM environment (its Python has the project too, `make vllm-env`).

SITTING_VLLM = VLLM_CPU and any(row.engine == "vllm" for row, _ in SITTING_RUNS)
SITTING_ORL = VLLM_ORL if SITTING_VLLM else ORL


def sitting_inputs(suite: str) -> list[str]:
    return sorted({path for row, seed in SITTING_RUNS for path in (vllm_inputs(row, suite) if row in VLLM_ROWS
                   else row_inputs(row, seed, suite))})  # fmt: skip


def sitting_rows(suite: str) -> str:
    """Each run as `--row OUT FLAGS`: its record file and its bench-latency flags (its system, the suite's
    requests, budget and warm-up)."""
    shared = (f"--suite {suite} {limit_flag(config['eval_limit'])} --warmup {config['latency_warmup']} "
              f"--max-new-tokens {SUITE_TOKENS[suite]} --device {DECODE['device']} --dtype {DECODE['dtype']} "
              f"{DECODE['chat']}")  # fmt: skip
    out = []
    for row, seed in SITTING_RUNS:
        flags = vllm_flags(row, suite) if row in VLLM_ROWS else row_flags(row, seed, suite)
        if run_id(row, seed) in SITTING_SCORED:
            flags += f" --quality-out {quality_file(row, seed, suite)}"
        out.append(f"--row {latency_file(row, seed, suite)} {shlex.quote(flags + ' ' + shared)}")
    return " ".join(out)


if SITTING_RUNS:

    rule latency_sitting:
        input:
            lambda wc: sitting_inputs(wc.suite),
        output:
            [f"{RESULTS}/latency/{{suite}}/{run_id(row, seed)}.jsonl" for row, seed in SITTING_RUNS],
            [
                quality_file(row, seed, "{suite}")
                for row, seed in SITTING_RUNS
                if run_id(row, seed) in SITTING_SCORED
            ],
        log:
            f"{LOGS}/latency_sitting_{{suite}}.log",
        benchmark:
            f"{RESULTS}/benchmarks/latency_sitting_{{suite}}.tsv"
        wildcard_constraints:
            suite=one_of(SUITES),
        threads: THREADS
        resources:
            gpu=GPU,
        params:
            rows=lambda wc: sitting_rows(wc.suite),
        shell:
            "{SITTING_ORL} bench-sitting {params.rows} --no-progress > {log} 2>&1"
