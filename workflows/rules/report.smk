# Rendering: tables 1-5 (md, tex, csv), figures (png, pdf) and index.md from the record files.

TABLE_INPUTS = {
    1: [f"{RESULTS}/quality/op_dlm.jsonl", f"{RESULTS}/quality/op_orl.jsonl",
        f"{RESULTS}/latency/dlm.jsonl", f"{RESULTS}/latency/orl.jsonl"]
    + [f"{RESULTS}/quality/{s}_{m}.jsonl" for s in config.get("extra_suites", []) for m in ("dlm", "orl")],
    2: [f"{RESULTS}/latency/{row}.jsonl" for row in LATENCY_ROWS]
    + [f"{RESULTS}/quality/row_{row}.jsonl" for row in QUALITY_ROWS]
    + [f"{RESULTS}/quality/op_dlm.jsonl", f"{RESULTS}/quality/op_orl.jsonl", f"{RESULTS}/quality/op_orl-nvfp4.jsonl"],
    3: [f"{RESULTS}/engine/bench.jsonl"],
    4: [],  # contributed hardware results (results/hardware/) only
    5: [f"{RESULTS}/quality/op_{m}.jsonl" for m in SWEEP_MODELS if m != "dlm"]
    + [f"{RESULTS}/sweep/{m}.jsonl" for m in SWEEP_MODELS]
    + [f"{RESULTS}/train/orl.jsonl"] + [f"{RESULTS}/train/{a}.jsonl" for a in ABLATIONS]
    + [f"{RESULTS}/train/packing.jsonl"],
}
FIGURE_INPUTS = [f"{RESULTS}/sweep/{m}.jsonl" for m in SWEEP_MODELS] + [
    f"{RESULTS}/entropy/dlm.jsonl", f"{RESULTS}/entropy/orl.jsonl"] + TABLE_INPUTS[2]
FIGURES = ["accuracy_vs_tpf", "tokens_per_s", "entropy_per_step"]
# The renderer reads whole folders (every record of the profile, contributed hardware results, the
# paper's claims) rather than single files, so the render rules pass the folders as one set of flags.
RENDER_FLAGS = f"--profile {PROFILE} --results {RESULTS} --out {REPORTS} --claims {CLAIMS} --hardware {HARDWARE}"


rule bench_packing:
    # Table 5: replay train-step throughput with and without compute-balanced packing.
    input:
        lambda wc: ckpt_done("dlm"),
    output:
        f"{RESULTS}/train/packing.jsonl",
    params:
        env=ENV,
        orl=ORL,
        preset=config["preset"],
        ckpt=lambda wc: ckpt("dlm"),
    log:
        f"{LOGS}/bench_packing.log",
    threads: THREADS
    shell:
        "{params.env} {params.orl} bench-replay --preset {params.preset} --init {params.ckpt} --system 'dLLM + ORL' "
        "--out {output} > {log} 2>&1"


rule render_table:
    input:
        lambda wc: TABLE_INPUTS[int(wc.n)],
    output:
        md=f"{REPORTS}/table{{n}}.md",
        tex=f"{REPORTS}/table{{n}}.tex",
        # The CSV goes into `snakemake --report`, which renders it as a sortable table.
        csv=report(f"{REPORTS}/table{{n}}.csv", caption="../report/tables.rst", category="Tables"),
    wildcard_constraints:
        n="[1-5]",
    params:
        orl=ORL,
        flags=RENDER_FLAGS,
    log:
        f"{LOGS}/render_table{{n}}.log",
    shell:
        "{params.orl} render {params.flags} --tables {wildcards.n} --no-index > {log} 2>&1"


rule render_figures:
    input:
        FIGURE_INPUTS,
    output:
        report(
            expand(f"{REPORTS}/figures/{{fig}}.{{ext}}", fig=FIGURES, ext=["png", "pdf"]),
            caption="../report/figures.rst",
            category="Figures",
        ),
    params:
        orl=ORL,
        flags=RENDER_FLAGS,
    log:
        f"{LOGS}/render_figures.log",
    shell:
        "{params.orl} render {params.flags} --tables none --figures --no-index > {log} 2>&1"


rule render_index:
    input:
        expand(f"{REPORTS}/table{{n}}.md", n=[1, 2, 3, 4, 5]),
        expand(f"{REPORTS}/figures/{{fig}}.png", fig=FIGURES),
    output:
        f"{REPORTS}/index.md",
    params:
        orl=ORL,
        flags=RENDER_FLAGS,
    log:
        f"{LOGS}/render_index.log",
    shell:
        "{params.orl} render {params.flags} --tables none > {log} 2>&1"


for _n in range(1, 6):

    rule:
        name:
            f"reproduce_table{_n}"
        input:
            multiext(f"{REPORTS}/table{_n}", ".md", ".tex", ".csv"),


rule reproduce_figures:
    input:
        expand(f"{REPORTS}/figures/{{fig}}.{{ext}}", fig=FIGURES, ext=["png", "pdf"]),
