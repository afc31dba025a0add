# Quality: the base dLLM's fixed(1) accuracy (the matched-accuracy reference), threshold sweeps,
# operating points, entropy per step, HumanEval for Table 1, the engine benchmark for Table 3.

SYSTEMS = {
    "dlm": "dLLM base",
    "orl": "dLLM + ORL",
    "orl-nvfp4": "dLLM + ORL NVFP4",
    **{f"orl-{a}": s for a, s in ABLATION_SYSTEMS.items()},
}


rule quality_reference_fixed1:
    # The accuracy every operating point is matched against: the base dLLM, one token per step.
    input:
        lambda wc: ckpt_done("dlm"),
    output:
        f"{RESULTS}/quality/dlm_fixed1.jsonl",
    params:
        env=ENV,
        orl=ORL,
        ckpt=lambda wc: ckpt("dlm"),
        suite=SUITE,
        limit=limit_flag(config["eval_limit"]),
        max_new_tokens=config["max_new_tokens"],
    log:
        f"{LOGS}/quality_dlm_fixed1.log",
    threads: THREADS
    shell:
        "{params.env} {params.orl} eval-quality --ckpt {params.ckpt} --engine dlmrt --policy fixed:1 "
        "--suite {params.suite} {params.limit} --max-new-tokens {params.max_new_tokens} "
        "--system 'dLLM base, fixed(1)' --out {output} --no-progress > {log} 2>&1"


rule sweep:
    input:
        lambda wc: ckpt_done(wc.model),
    output:
        f"{RESULTS}/sweep/{{model}}.jsonl",
    params:
        env=ENV,
        orl=ORL,
        ckpt=lambda wc: ckpt(wc.model),
        suite=SUITE,
        system=lambda wc: SYSTEMS[wc.model],
        taus=",".join(str(t) for t in config["sweep_thresholds"]),
        limit=limit_flag(config["eval_limit"]),
        max_new_tokens=config["max_new_tokens"],
    log:
        f"{LOGS}/sweep_{{model}}.log",
    threads: THREADS
    shell:
        "{params.env} {params.orl} sweep --ckpt {params.ckpt} --suite {params.suite} --thresholds {params.taus} "
        "{params.limit} --max-new-tokens {params.max_new_tokens} --system '{params.system}' --out {output} "
        "--no-progress > {log} 2>&1"


rule operating_point:
    # Matched accuracy (METHOD.md §4): the fastest threshold whose pass@1 is within the tolerance of
    # the base dLLM with fixed(1). Writes the choice and a quality record taken from that sweep point.
    input:
        sweep=f"{RESULTS}/sweep/{{model}}.jsonl",
        reference=f"{RESULTS}/quality/dlm_fixed1.jsonl",
    output:
        point=f"{RESULTS}/oppoint/{{model}}.json",
        quality=f"{RESULTS}/quality/op_{{model}}.jsonl",
    params:
        orl=ORL,
        tolerance=config["match_tolerance"],
    log:
        f"{LOGS}/oppoint_{{model}}.log",
    shell:
        "{params.orl} operating-point --sweep {input.sweep} --reference {input.reference} "
        "--tolerance {params.tolerance} --out {output.point} --quality-out {output.quality} > {log} 2>&1"


rule quality_nvfp4:
    # The quantized +ORL model at the +ORL operating point (same policy, same suite).
    input:
        ckpt=f"{CKPT}/orl-nvfp4/config.json",
        point=f"{RESULTS}/oppoint/orl.json",
    output:
        f"{RESULTS}/quality/op_orl-nvfp4.jsonl",
    params:
        env=ENV,
        orl=ORL,
        ckpt=lambda wc, input: os.path.dirname(input.ckpt),  # the folder of the tracked config.json
        suite=SUITE,
        limit=limit_flag(config["eval_limit"]),
        max_new_tokens=config["max_new_tokens"],
    log:
        f"{LOGS}/quality_orl-nvfp4.log",
    threads: THREADS
    shell:
        "{params.env} {params.orl} eval-quality --ckpt {params.ckpt} --engine dlmrt --policy @{input.point} "
        "--suite {params.suite} {params.limit} --max-new-tokens {params.max_new_tokens} "
        "--system 'dLLM + ORL NVFP4' --out {output} --no-progress > {log} 2>&1"


rule quality_extra_suite:
    # Table 1 on other suites (HumanEval): pass@1 of base and +ORL at their operating points.
    input:
        ckpt=lambda wc: ckpt_done(wc.model),
        point=f"{RESULTS}/oppoint/{{model}}.json",
    output:
        f"{RESULTS}/quality/{{suite}}_{{model}}.jsonl",
    wildcard_constraints:
        suite="humaneval",
        model="dlm|orl",
    params:
        env=ENV,
        orl=ORL,
        ckpt=lambda wc: ckpt(wc.model),
        system=lambda wc: SYSTEMS[wc.model],
        max_new_tokens=config["max_new_tokens"],
    log:
        f"{LOGS}/quality_{{suite}}_{{model}}.log",
    threads: THREADS
    shell:
        "{params.env} {params.orl} eval-quality --ckpt {params.ckpt} --engine dlmrt --policy @{input.point} "
        "--suite {wildcards.suite} --max-new-tokens {params.max_new_tokens} --system '{params.system}' "
        "--out {output} --no-progress > {log} 2>&1"


rule entropy_profile:
    input:
        lambda wc: ckpt_done(wc.model),
    output:
        f"{RESULTS}/entropy/{{model}}.jsonl",
    wildcard_constraints:
        model="dlm|orl",
    params:
        env=ENV,
        orl=ORL,
        ckpt=lambda wc: ckpt(wc.model),
        suite=SUITE,
        system=lambda wc: SYSTEMS[wc.model],
        limit=limit_flag(config["bench_limit"]),
        max_new_tokens=config["max_new_tokens"],
    log:
        f"{LOGS}/entropy_{{model}}.log",
    threads: THREADS
    shell:
        "{params.env} {params.orl} entropy-profile --ckpt {params.ckpt} --suite {params.suite} --policy fixed:1 "
        "{params.limit} --max-new-tokens {params.max_new_tokens} --system '{params.system}' --out {output} "
        "--no-progress > {log} 2>&1"


rule bench_engine:
    # Table 3: the same model and policy on dlmrt (compiled / graph-captured), dlmrt eager, reference.
    input:
        ckpt=lambda wc: ckpt_done("orl"),
        point=f"{RESULTS}/oppoint/orl.json",
    output:
        f"{RESULTS}/engine/bench.jsonl",
    params:
        env=ENV,
        orl=ORL,
        ckpt=lambda wc: ckpt("orl"),
        limit=config["bench_limit"],  # the count itself; in other rules `limit` is the whole flag
    log:
        f"{LOGS}/bench_engine.log",
    threads: THREADS
    resources:
        gpu=1 if PAPER else 0,
    shell:
        "{params.env} {params.orl} bench-engine --ckpt {params.ckpt} --policy @{input.point} --limit {params.limit} "
        "--system 'dLLM + ORL' --out {output} > {log} 2>&1"
