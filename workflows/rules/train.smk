# Training: tokenizer + AR model, draft model, AR -> diffusion conversion, ORL and its ablations,
# NVFP4 quantization. Each rule resumes from its last checkpoint when rerun after an interruption.


rule train_ar:
    output:
        f"{CKPT}/ar/config.json",
    log:
        f"{LOGS}/train_ar.log",
    benchmark:
        f"{RESULTS}/benchmarks/train_ar.tsv"
    threads: THREADS
    shell:
        "{ENV} {ORL} train-ar --preset {config[preset]} --out {CKPT}/ar > {log} 2>&1"


rule train_draft:
    input:
        f"{CKPT}/ar/config.json",
    output:
        f"{CKPT}/draft/config.json",
    log:
        f"{LOGS}/train_draft.log",
    benchmark:
        f"{RESULTS}/benchmarks/train_draft.tsv"
    threads: THREADS
    shell:
        "{ENV} {ORL} train-ar --preset {config[preset]} --draft --tokenizer {CKPT}/ar --out {CKPT}/draft > {log} 2>&1"


rule convert:
    input:
        f"{CKPT}/ar/config.json",
    output:
        f"{CKPT}/dlm/config.json",
    log:
        f"{LOGS}/convert.log",
    benchmark:
        f"{RESULTS}/benchmarks/convert.tsv"
    threads: THREADS
    shell:
        "{ENV} {ORL} convert --preset {config[preset]} --init {CKPT}/ar --out {CKPT}/dlm > {log} 2>&1"


rule train_orl:
    input:
        f"{CKPT}/dlm/config.json",
    output:
        ckpt=f"{CKPT}/orl/config.json",
        record=f"{RESULTS}/train/orl.jsonl",
    log:
        f"{LOGS}/train_orl.log",
    benchmark:
        f"{RESULTS}/benchmarks/train_orl.tsv"
    threads: THREADS
    shell:
        "{ENV} {ORL} train-orl --preset {config[preset]} --init {CKPT}/dlm --out {CKPT}/orl "
        "--record {output.record} --system 'dLLM + ORL' > {log} 2>&1"


ABLATION_SYSTEMS = {
    "no-residual": "ORL: no residual",
    "offline": "ORL: offline residuals",
    "no-aec": "ORL: no AEC",
    "aec-nogate": "ORL: AEC without gate",
    "dparallel": "dParallel-style",
}


rule train_ablation:
    input:
        f"{CKPT}/dlm/config.json",
    output:
        ckpt=f"{CKPT}/orl-{{ablation}}/config.json",
        record=f"{RESULTS}/train/{{ablation}}.jsonl",
    wildcard_constraints:
        ablation="|".join(ABLATION_SYSTEMS),
    params:
        system=lambda wc: ABLATION_SYSTEMS[wc.ablation],
    log:
        f"{LOGS}/train_{{ablation}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/train_{{ablation}}.tsv"
    threads: THREADS
    shell:
        "{ENV} {ORL} train-orl --preset {config[preset]} --init {CKPT}/dlm --out {CKPT}/orl-{wildcards.ablation} "
        "--ablation {wildcards.ablation} --record {output.record} --system '{params.system}' > {log} 2>&1"


rule quantize_nvfp4:
    input:
        lambda wc: ckpt_done("orl"),
    output:
        f"{CKPT}/orl-nvfp4/config.json",
    params:
        src=lambda wc: ckpt("orl"),
    log:
        f"{LOGS}/quantize.log",
    shell:
        "{ENV} {ORL} quantize {params.src} --format nvfp4 --out {CKPT}/orl-nvfp4 > {log} 2>&1"
