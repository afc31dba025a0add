# Training. Smoke and tiny profiles: tokenizer + AR model, draft model, AR -> diffusion conversion, ORL
# and its ablations. The paper profile reads its checkpoints from the config and, when a preset is set,
# trains ORL and its ablations from checkpoints.dlm under torchrun (config train_gpus, train_config).
# ORL and the ablations are trained once per training seed (config `seeds`: `orl train-orl --seed N`;
# checkpoints <key>_seed<N>); config rollout_engine picks what decodes their rollouts (recompute, or
# dlmrt on GPUs: `orl train-orl --rollout-engine`). Each rule resumes from its last checkpoint when
# rerun after an interruption. Checkpoint folders are taken from the rule's own config.json input/output, so the
# command names exactly the files snakemake tracks. NVFP4 quantization (of the primary seed's ORL
# checkpoint) runs on every profile.

from orl.model.base_manifest import CHECKPOINTS as BASE_CHECKPOINTS
from orl.model.base_manifest import STAGES as BASE_STAGES
from orl.model.base_manifest import base_problem, read_manifest, settle_copies, take_base

# The committed base (config `base`, results/tiny/base on the tiny profile): when its manifest matches the
# preset, the AR target, draft model and converted dLLM are copied from it instead of trained (about 40
# minutes on 2 cores), so the ORL-stage jobs of every seed start from one base. `--config base=` (make
# reproduce TRAIN_BASE=1) trains the base here instead; a base trained from other preset sections is not used.
BASE = None if PAPER else (config.get("base") or None)
BASE_PROBLEM = (
    base_problem(Path(BASE), {name: preset_digest(BASE_STAGES[name]) for name in BASE_CHECKPOINTS})
    if BASE
    else "no base configured"
)
if BASE and BASE_PROBLEM:
    print(f"base: not using {BASE} ({BASE_PROBLEM}); the DAG trains the base itself", file=sys.stderr)
BASE_FILES = (
    {name: sorted(entry["files"]) for name, entry in read_manifest(Path(BASE))["checkpoints"].items()}
    if BASE and not BASE_PROBLEM
    else {}
)

if BASE_FILES:

    rule take_base:
        # In place of train_ar / train_draft / convert: every file checked against the manifest, then copied
        # (config.json last), so the later stages read {CKPT} as when the base is trained here.
        input:
            manifest=f"{BASE}/manifest.json",
            files=lambda wc: [f"{BASE}/{wc.name}/{file}" for file in BASE_FILES[wc.name]],
        output:
            f"{CKPT}/{{name}}/config.json",
        wildcard_constraints:
            name=one_of(BASE_CHECKPOINTS),
        run:
            take_base(Path(BASE), wildcards.name, Path(output[0]).parent)


if not PAPER and not BASE_FILES:

    rule train_ar:
        output:
            f"{CKPT}/ar/config.json",
        log:
            f"{LOGS}/train_ar.log",
        benchmark:
            f"{RESULTS}/benchmarks/train_ar.tsv"
        threads: THREADS
        resources:
            gpu=GPU,
        params:
            **TRAIN,
            settings=preset_digest("ar"),
            out=lambda wc, output: os.path.dirname(output[0]),
        shell:
            "{ORL} train-ar --preset {params.preset} {params.preset_file} --out {params.out} "
            "--device {params.device} --cpu-linear {params.cpu_linear} > {log} 2>&1"

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
        resources:
            gpu=GPU,
        params:
            **TRAIN,
            settings=preset_digest("draft"),
            tokenizer=lambda wc, input: os.path.dirname(input[0]),
            out=lambda wc, output: os.path.dirname(output[0]),
        shell:
            "{ORL} train-ar --preset {params.preset} {params.preset_file} --draft --tokenizer {params.tokenizer} "
            "--out {params.out} --device {params.device} --cpu-linear {params.cpu_linear} > {log} 2>&1"

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
        resources:
            gpu=GPU,
        params:
            **TRAIN,
            settings=preset_digest("convert"),
            init=lambda wc, input: os.path.dirname(input[0]),
            out=lambda wc, output: os.path.dirname(output[0]),
        shell:
            "{ORL} convert --preset {params.preset} {params.preset_file} --init {params.init} --out {params.out} "
            "--device {params.device} --cpu-linear {params.cpu_linear} > {log} 2>&1"


if not PAPER:

    rule train_eagle3:
        # The AR target's EAGLE-3 head, in the layout vLLM's eagle3 method loads (orl/train/eagle3.py): the
        # draft of the "AR + EAGLE3" rows. It is no part of the committed base: the DAG trains it from
        # the AR target, and only where such a row runs (a CPU profile with vLLM's environment, or CUDA), so
        # a DAG without vLLM (CI) never plans it. Its size is the preset's eagle3 section: minutes on the
        # tiny profile, a few steps on smoke (seconds: the chain runs end to end, the head drafts nothing
        # useful). It runs on the CPU whatever the device (one small layer); the paper profile reads
        # checkpoints.eagle3.
        input:
            ckpt_done("ar"),
        output:
            f"{CKPT}/eagle3/config.json",
        log:
            f"{LOGS}/train_eagle3.log",
        benchmark:
            f"{RESULTS}/benchmarks/train_eagle3.tsv"
        threads: THREADS
        params:
            preset=TRAIN["preset"],
            preset_file=TRAIN["preset_file"],
            settings=preset_digest("eagle3"),
            target=lambda wc, input: os.path.dirname(input[0]),
            out=lambda wc, output: os.path.dirname(output[0]),
        shell:
            # A rerun replaces the previous head (config.json is written last).
            "rm -rf {params.out} && {ORL} train-eagle3 --preset {params.preset} {params.preset_file} "
            "--target {params.target} --out {params.out} --no-progress > {log} 2>&1"

    rule train_dflash:
        # The AR target's DFlash drafter, in the layout vLLM's dflash method loads (orl/train/dflash_vllm.py):
        # the draft of the "AR + DFlash" rows, planned like train_eagle3 (only where such a row runs: a CPU
        # profile with vLLM's environment, or CUDA). Its size is the preset's dflash section: minutes on
        # the tiny profile, a few steps on smoke. It runs on the CPU whatever the device; the paper profile
        # reads checkpoints.dflash (the public drafter).
        input:
            ckpt_done("ar"),
        output:
            f"{CKPT}/dflash/config.json",
        log:
            f"{LOGS}/train_dflash.log",
        benchmark:
            f"{RESULTS}/benchmarks/train_dflash.tsv"
        threads: THREADS
        params:
            preset=TRAIN["preset"],
            preset_file=TRAIN["preset_file"],
            settings=preset_digest("dflash"),
            target=lambda wc, input: os.path.dirname(input[0]),
            out=lambda wc, output: os.path.dirname(output[0]),
        shell:
            # A rerun replaces the previous drafter (config.json is written last).
            "rm -rf {params.out} && {ORL} train-dflash --preset {params.preset} {params.preset_file} "
            "--target {params.target} --out {params.out} --no-progress > {log} 2>&1"


if TRAINS:

    rule train_orl:
        # The ORL row itself (orl.rows.TRAINED), once per training seed, from the base dLLM (trained here, or
        # checkpoints.dlm on the paper profile, where it runs under torchrun on train_gpus GPUs).
        input:
            ckpt_done("dlm"),
        output:
            ckpt=f"{CKPT}/{ROW[rows.TRAINED].ckpt}_seed{{seed}}/config.json",
            record=f"{RESULTS}/train/{rows.TRAINED}_seed{{seed}}.jsonl",
        log:
            f"{LOGS}/train_orl_seed{{seed}}.log",
        benchmark:
            f"{RESULTS}/benchmarks/train_orl_seed{{seed}}.tsv"
        wildcard_constraints:
            seed=one_of(SEEDS),
        priority: lambda wc: PRIORITY_TRAIN + (int(wc.seed) == SEEDS[0])  # the seed the relaxed sweeps match
        threads: THREADS
        resources:
            gpu=TRAIN_GPUS,
        params:
            **TRAIN,
            settings=preset_digest("orl"),
            rollout=ROLLOUT_ENGINE,
            init=lambda wc, input: os.path.dirname(input[0]),
            out=lambda wc, output: os.path.dirname(output.ckpt),
            system=ROW[rows.TRAINED].system,
        shell:
            "{TRAIN_ORL} train-orl --preset {params.preset} {params.preset_file} --init {params.init} "
            "--out {params.out} --seed {wildcards.seed} --record {output.record} --system '{params.system}' "
            "--device {params.device} --rollout-engine {params.rollout} "
            "--cpu-linear {params.cpu_linear} > {log} 2>&1"

    rule train_ablation:
        # The configured ablation rows (orl.rows.ABLATIONS): ORL with one part changed.
        input:
            ckpt_done("dlm"),
        output:
            ckpt=f"{CKPT}/orl-{{ablation}}_seed{{seed}}/config.json",
            record=f"{RESULTS}/train/{{ablation}}_seed{{seed}}.jsonl",
        log:
            f"{LOGS}/train_{{ablation}}_seed{{seed}}.log",
        benchmark:
            f"{RESULTS}/benchmarks/train_{{ablation}}_seed{{seed}}.tsv"
        wildcard_constraints:
            ablation=one_of(ABLATIONS),
            seed=one_of(SEEDS),
        priority: PRIORITY_TRAIN
        threads: THREADS
        resources:
            gpu=TRAIN_GPUS,
        params:
            **TRAIN,
            settings=preset_digest("orl"),
            rollout=ROLLOUT_ENGINE,
            init=lambda wc, input: os.path.dirname(input[0]),
            out=lambda wc, output: os.path.dirname(output.ckpt),
            system=lambda wc: rows.ABLATIONS[wc.ablation].system,
        shell:
            "{TRAIN_ORL} train-orl --preset {params.preset} {params.preset_file} --init {params.init} "
            "--out {params.out} --ablation {wildcards.ablation} --seed {wildcards.seed} --record {output.record} "
            "--system '{params.system}' --device {params.device} --rollout-engine {params.rollout} "
            "--cpu-linear {params.cpu_linear} > {log} 2>&1"


rule quantize_nvfp4:
    input:
        ckpt_done(ROW[rows.TRAINED].ckpt),
    output:
        f"{CKPT}/orl-nvfp4/config.json",
    log:
        f"{LOGS}/quantize.log",
    params:
        src=ckpt(ROW[rows.TRAINED].ckpt),
        out=lambda wc, output: os.path.dirname(output[0]),
    shell:
        "{ORL} quantize {params.src} --format nvfp4 --out {params.out} > {log} 2>&1"


rule export_sdar:
    # SGLang's dLLM backend loads SDAR / LLaDA2 architectures only (hard-coded mask ids): Table 3's
    # SGLang row serves the ORL checkpoint exported in SDAR's layout.
    input:
        lambda wc: ckpt_done("orl"),
    output:
        f"{CKPT}/orl-sdar/config.json",
    log:
        f"{LOGS}/export_sdar.log",
    params:
        src=lambda wc: ckpt("orl"),
        out=lambda wc, output: os.path.dirname(output[0]),
    shell:
        "{ORL} export {params.src} --format sdar --out {params.out} > {log} 2>&1"
