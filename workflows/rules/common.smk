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
