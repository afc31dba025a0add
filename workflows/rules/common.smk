# Configuration checks and path helpers shared by every rule file.
import os
import sys

from snakemake.utils import validate

validate(config, "../config/schema.yaml")

if config["profile"] != PROFILE:
    raise ValueError(
        f"workflows/config/{PROFILE}.yaml: profile: says {config['profile']!r} but the run asked for {PROFILE!r}"
    )

PAPER = PROFILE == "paper"
if PAPER:
    _ckpts = config.get("checkpoints") or {}
    for _key in ("ar", "draft", "dlm", "orl"):
        _path = _ckpts.get(_key)
        if not _path or not os.path.isfile(os.path.join(_path, "config.json")):
            raise ValueError(
                f"workflows/config/paper.yaml: checkpoints.{_key}: {_path!r} is not a checkpoint directory "
                "(expected a local folder with config.json; nothing is downloaded)"
            )
elif not config.get("preset"):
    raise ValueError(f"workflows/config/{PROFILE}.yaml: preset: the {PROFILE} profile trains its models and needs a preset")

REPO = workflow.basedir
CLAIMS = f"{REPO}/results/paper/claims.yaml"
HARDWARE = f"{REPO}/results/hardware"
RESULTS = f"results/{PROFILE}"
REPORTS = f"reports/{PROFILE}"
CKPT = f"{RESULTS}/ckpt"
LOGS = f"{RESULTS}/logs"
ORL = f"{sys.executable} -m orl.cli"  # the `orl` command of the environment running snakemake
THREADS = config["threads"]
SUITE = config["suite"]
ABLATIONS = config["ablations"]
SWEEP_MODELS = ["dlm", "orl"] + [f"orl-{a}" for a in ABLATIONS]
ENV = f"OMP_NUM_THREADS={THREADS} TQDM_MININTERVAL=5"


def ckpt(name):
    """Checkpoint directory of a model: trained here, or a local path on the paper profile."""
    if PAPER:
        return config["checkpoints"][name]
    return f"{CKPT}/{name}"


def ckpt_done(name):
    """The file whose presence means a checkpoint is complete (config.json is written last)."""
    return f"{ckpt(name)}/config.json"


def limit_flag(limit):
    return f"--limit {limit}" if limit else ""


# Table 2 rows, for the latency and quality_row rules (latency.smk) and Table 2 (report.smk).
# row -> (system, engine, target checkpoint, draft checkpoint or None, operating point or None)
LATENCY_ROWS = {
    "ar_hf": ("AR (hf)", "hf", "ar", None, None),
    "ar_hf_assisted": ("AR + draft (hf assisted)", "hf-assisted", "ar", "draft", None),
    "ar_dflash": ("AR + DFlash-style drafter", "dflash", "ar", "dlm", None),
    "dlm": ("dLLM base", "dlmrt", "dlm", None, "dlm"),
    "orl": ("dLLM + ORL", "dlmrt", "orl", None, "orl"),
    "orl_nvfp4": ("dLLM + ORL NVFP4", "dlmrt", "orl-nvfp4", None, "orl"),
    "ar_vllm": ("AR (vLLM)", "vllm", "ar", None, None),
    "ar_vllm_draft": ("AR + draft (vLLM)", "vllm", "ar", "draft", None),
    "ar_vllm_eagle3": ("AR + EAGLE3 (vLLM)", "vllm", "ar", "eagle3", None),
}
# Rows whose pass@1 is measured here; the dLLM rows take theirs from the operating point.
QUALITY_ROWS = ["ar_hf", "ar_hf_assisted", "ar_dflash", "ar_vllm", "ar_vllm_draft", "ar_vllm_eagle3"]


def _row_ckpt(name):
    if name is None:
        return None
    if name == "orl-nvfp4":
        return f"{CKPT}/orl-nvfp4"
    if name == "eagle3":
        return (config.get("checkpoints") or {}).get("eagle3", f"{CKPT}/eagle3-not-trained-here")
    return ckpt(name)


def _row_inputs(wc):
    _, engine, target, draft, point = LATENCY_ROWS[wc.row]
    inputs = [f"{_row_ckpt(target)}/config.json"]
    if draft and draft != "eagle3":  # EAGLE3 heads are not trained here: the vLLM row says why it did not run
        inputs.append(f"{_row_ckpt(draft)}/config.json")
    if point:
        inputs.append(f"{RESULTS}/oppoint/{point}.json")
    return inputs


def _row_flags(wc):
    system, engine, target, draft, point = LATENCY_ROWS[wc.row]
    flags = [f"--engine {engine}", f"--ckpt {_row_ckpt(target)}", f"--system '{system}'"]
    if draft:
        flags.append(f"--draft {_row_ckpt(draft)}")
    if point:
        flags.append(f"--policy @{RESULTS}/oppoint/{point}.json")
    return " ".join(flags)
