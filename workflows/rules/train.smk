# Training: tokenizer + AR model, draft model, AR -> diffusion conversion, ORL and its ablations,
# NVFP4 quantization. Each rule resumes from its last checkpoint when rerun after an interruption.
# Checkpoint folders are taken from the rule's own config.json input/output (not hard-coded), so the
# command names exactly the files snakemake tracks.


rule train_ar:
    output:
        f"{CKPT}/ar/config.json",
    log:
        f"{LOGS}/train_ar.log",
    params:
        env=ENV,
        orl=ORL,
        preset=config["preset"],
        out=lambda wc, output: os.path.dirname(output[0]),
    benchmark:
        f"{RESULTS}/benchmarks/train_ar.tsv"
    threads: THREADS
    shell:
        "{params.env} {params.orl} train-ar --preset {params.preset} --out {params.out} > {log} 2>&1"


rule train_draft:
    input:
        f"{CKPT}/ar/config.json",
    output:
        f"{CKPT}/draft/config.json",
    log:
        f"{LOGS}/train_draft.log",
    params:
        env=ENV,
        orl=ORL,
        preset=config["preset"],
        tokenizer=lambda wc, input: os.path.dirname(input[0]),
        out=lambda wc, output: os.path.dirname(output[0]),
    benchmark:
        f"{RESULTS}/benchmarks/train_draft.tsv"
    threads: THREADS
    shell:
        "{params.env} {params.orl} train-ar --preset {params.preset} --draft --tokenizer {params.tokenizer} "
        "--out {params.out} > {log} 2>&1"


rule convert:
    input:
        f"{CKPT}/ar/config.json",
    output:
        f"{CKPT}/dlm/config.json",
    log:
        f"{LOGS}/convert.log",
    params:
        env=ENV,
        orl=ORL,
        preset=config["preset"],
        init=lambda wc, input: os.path.dirname(input[0]),
        out=lambda wc, output: os.path.dirname(output[0]),
    benchmark:
        f"{RESULTS}/benchmarks/convert.tsv"
    threads: THREADS
    shell:
        "{params.env} {params.orl} convert --preset {params.preset} --init {params.init} --out {params.out} > {log} 2>&1"


rule train_orl:
    input:
        f"{CKPT}/dlm/config.json",
    output:
        ckpt=f"{CKPT}/orl/config.json",
        record=f"{RESULTS}/train/orl.jsonl",
    log:
        f"{LOGS}/train_orl.log",
    params:
        env=ENV,
        orl=ORL,
        preset=config["preset"],
        init=lambda wc, input: os.path.dirname(input[0]),
        out=lambda wc, output: os.path.dirname(output.ckpt),
    benchmark:
        f"{RESULTS}/benchmarks/train_orl.tsv"
    threads: THREADS
    shell:
        "{params.env} {params.orl} train-orl --preset {params.preset} --init {params.init} --out {params.out} "
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
        env=ENV,
        orl=ORL,
        preset=config["preset"],
        init=lambda wc, input: os.path.dirname(input[0]),
        out=lambda wc, output: os.path.dirname(output.ckpt),
        system=lambda wc: ABLATION_SYSTEMS[wc.ablation],
    log:
        f"{LOGS}/train_{{ablation}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/train_{{ablation}}.tsv"
    threads: THREADS
    shell:
        "{params.env} {params.orl} train-orl --preset {params.preset} --init {params.init} --out {params.out} "
        "--ablation {wildcards.ablation} --record {output.record} --system '{params.system}' > {log} 2>&1"


rule quantize_nvfp4:
    input:
        lambda wc: ckpt_done("orl"),
    output:
        f"{CKPT}/orl-nvfp4/config.json",
    params:
        env=ENV,
        orl=ORL,
        src=lambda wc: ckpt("orl"),
        out=lambda wc, output: os.path.dirname(output[0]),
    log:
        f"{LOGS}/quantize.log",
    shell:
        "{params.env} {params.orl} quantize {params.src} --format nvfp4 --out {params.out} > {log} 2>&1"
