# Rendering: tables 1-5 (md, tex, csv), figures (png, pdf) and index.md from the record files; the
# replay packing benchmark of Table 5; the regression gate's file. What each table reads follows
# from the rows of orl/rows.py (common.smk: table_inputs, orl/workflow_dag.py Plan.table_inputs).

LENGTH_FILES = [length_file(tokens) for tokens in config["length_sweep"]]
FIGURE_INPUTS = sorted(set([sweep_file(*job) for job in SWEEP_JOBS] + [entropy_file(row) for row in ENTROPY_ROWS]
                           + table_inputs(2) + LENGTH_FILES))  # fmt: skip
# The record files this DAG writes, by kind (for the regression gate). The gate pairs records by kind,
# system, engine, policy and suite, so it takes the primary seed's only (the others would share keys).
RECORD_FILES = {"latency": [latency_file(r, s, x) for r, s, x in LATENCY_JOBS if s in (None, PRIMARY)],
                "engine_bench": [engine_file(suite) for suite in SUITES]
                + [serving_bench_file(r, x) for r in SERVING_BENCH_ROWS for x in SUITES]}  # fmt: skip
FIGURES = ["accuracy_vs_tpf", "tokens_per_s", "entropy_per_step", "speedup_vs_length", "floor"]
TABLES = ["1", "2", "3", "3b", "4", "5"]
# The renderer reads whole folders (every record of the profile, contributed hardware results, the
# paper's claims) rather than single files, so the render rules pass the folders as one set of flags.
RENDER_FLAGS = (
    f"--profile {PROFILE} --results {RESULTS} --out {REPORTS} --claims {CLAIMS} --hardware {HARDWARE}"
)


if not PAPER:

    rule bench_packing:
        # Table 5: replay train-step throughput, unpacked and with a shared clean context per block (docs/method.md §3).
        input:
            ckpt_done("dlm"),
        output:
            PACKING_FILE,
        log:
            f"{LOGS}/bench_packing.log",
        threads: THREADS
        resources:
            gpu=GPU,
        params:
            **TRAIN,
            ckpt=lambda wc, input: os.path.dirname(input[0]),
            system=ROW[rows.PACKING].system,
        shell:
            "{ORL} bench-replay --preset {params.preset} --init {params.ckpt} --system '{params.system}' "
            "--device {params.device} --out {output} > {log} 2>&1"


rule render_table:
    input:
        lambda wc: table_inputs(int(wc.n)) if wc.n.isdigit() else [],
    output:
        md=f"{REPORTS}/table{{n}}.md",
        tex=f"{REPORTS}/table{{n}}.tex",
        # The CSV goes into `snakemake --report`, which renders it as a sortable table.
        csv=report(f"{REPORTS}/table{{n}}.csv", caption="../report/tables.rst", category="Tables"),
        # The headline as HTML: workflows/report/workflow.rst puts it on the report's first page.
        html=f"{REPORTS}/table{{n}}.html",
    log:
        f"{LOGS}/render_table{{n}}.log",
    wildcard_constraints:
        n=one_of(TABLES),
    shell:
        "{ORL} render {RENDER_FLAGS} --tables {wildcards.n} --no-index > {log} 2>&1"


rule render_figures:
    input:
        FIGURE_INPUTS,
    output:
        report(
            expand(f"{REPORTS}/figures/{{fig}}.{{ext}}", fig=FIGURES, ext=["png", "pdf"]),
            caption="../report/figures.rst",
            category="Figures",
        ),
    log:
        f"{LOGS}/render_figures.log",
    shell:
        "{ORL} render {RENDER_FLAGS} --tables none --figures --no-index > {log} 2>&1"


rule render_index:
    input:
        expand(f"{REPORTS}/table{{n}}.md", n=TABLES),
        expand(f"{REPORTS}/figures/{{fig}}.png", fig=FIGURES),
    output:
        f"{REPORTS}/index.md",
    log:
        f"{LOGS}/render_index.log",
    shell:
        "{ORL} render {RENDER_FLAGS} --tables none > {log} 2>&1"


rule gate:
    # The file the regression gate compares (`orl regress`, .github/workflows/gpu-regression.yml): this
    # run's records of the kinds orl.rows.GATE_KINDS and the reference timing they are normalised by
    # (orl/report/gate.py). A baseline is such a file, reviewed and committed as
    # results/gate/<profile>-baseline.jsonl.
    input:
        [file for kind in rows.GATE_KINDS for file in RECORD_FILES[kind]],
    output:
        GATE,
    run:
        write_gate(input, output[0])
