# Configuration checks, path helpers, and the rows of orl/rows.py that the other rule files run.
# Every job that runs a model passes the config's --device (and --dtype where it decodes), requests
# a GPU where the device is CUDA, and names its row with --system from orl/rows.py.
#
# A *run* is one row decoding one checkpoint: the row's key, or `<key>_seed<N>` for a row whose
# checkpoint this DAG trains once per training seed (ORL and its ablations; config `seeds`). Every
# per-row file is named by its run and lies in a folder of its suite (config `suites`: Tables 1-3
# show each suite; the first is the main one, that of Tables 4-5, the entropy figure and the
# speed-vs-length runs), so one prompt set (`eval_limit` problems) serves every job of a suite.
import os
import re
import sys
from pathlib import Path

from snakemake.utils import validate

from orl import rows
from orl.engines.registry import ENGINE_NAMES
from orl.engines.serving import SERVING_ENGINES, VLLM_ENV_MISSING
from orl.eval.operating_point import write_strict_point
from orl.records import not_run, write_records
from orl.report.gate import write_gate
from orl.rows import ROW
from orl.train.config import load_preset
from orl.train.pretrain import STAGE_SECTIONS
from orl.workflow_config import config_problem

CONFIG_FILES = ", ".join(str(path) for path in workflow.configfiles)  # named in configuration errors
# One line naming the key (Snakemake's own validate would print the whole schema); validate then fills
# in the schema's defaults.
_problem = config_problem(config, Path(workflow.basedir) / "workflows" / "config" / "schema.yaml")
if _problem:
    raise ValueError(f"{CONFIG_FILES}: {_problem}")
validate(config, "../config/schema.yaml")

if config["profile"] != PROFILE:
    raise ValueError(f"{CONFIG_FILES}: profile: says {config['profile']!r} but the run asked for {PROFILE!r}")

PAPER = PROFILE == "paper"
if not PAPER and not config.get("preset"):
    raise ValueError(f"{CONFIG_FILES}: preset: the {PROFILE} profile trains its models and needs a preset")
# Whether this DAG trains ORL and its ablations: always on smoke and tiny (from models it trains itself);
# on the paper profile when a preset is set, from the given base dLLM (checkpoints.dlm), under torchrun.
TRAINS = bool(config.get("preset"))

REPO = workflow.basedir
CLAIMS = f"{REPO}/results/paper/claims.yaml"
HARDWARE = f"{REPO}/results/hardware"
RESULTS = f"results/{PROFILE}"
REPORTS = f"reports/{PROFILE}"
CKPT = f"{RESULTS}/ckpt"
LOGS = f"{RESULTS}/logs"
GATE = f"results/gate/{PROFILE}.jsonl"  # outside RESULTS: the renderer reads every record file there
THREADS = config["threads"]
# The `orl` command of the environment running snakemake, with every job's thread settings.
ORL = f"OMP_NUM_THREADS={THREADS} TQDM_MININTERVAL=5 {sys.executable} -m orl.cli"
GPU = 1 if config["device"].startswith("cuda") else 0  # per model-running job (workflows/profiles/slurm)
# vLLM's CPU build lives in its own environment (`make vllm-env`); a CPU profile runs its vLLM rows there
# (vllm.smk), and says "not run: vLLM environment missing (make vllm-env)" without it (or with vllm_python "").
VLLM_PYTHON = config.get("vllm_python", f"{REPO}/.venv-vllm/bin/python")
# ORL training on the paper profile: one process per GPU under torchrun (FSDP2, orl/train/distributed.py),
# `train_gpus` of them, requested as the job's `gpu` resource. The tiny and smoke profiles train in one
# process (world size 1: the same code).
TRAIN_GPUS = config.get("train_gpus", 1) if PAPER else GPU
TRAIN_ORL = (f"OMP_NUM_THREADS={THREADS} TQDM_MININTERVAL=5 {sys.executable} -m torch.distributed.run --standalone "
             f"--nproc-per-node {TRAIN_GPUS} -m orl.cli") if PAPER else ORL
# The config values a job's command uses go in as params (`params: **DECODE`), never read from config in
# the shell string: a changed value then reruns the jobs it affects (Snakemake's params rerun trigger).
TRAIN = {"preset": config.get("preset"), "device": config["device"],  # training jobs
         "preset_file": f"--config {config['train_config']}" if config.get("train_config") else "",
         "cpu_linear": config.get("cpu_linear", "auto")}
ROLLOUT_ENGINE = config.get("rollout_engine", "recompute")  # ORL training jobs: `train-orl --rollout-engine`
# The preset (with train_config) as the training jobs will read it, loaded once for preset_digest.
TRAIN_PRESET = load_preset(config["preset"], config.get("train_config")) if TRAINS else None


def preset_digest(stage):
    """The hash of the preset sections that shape a training stage (orl/train/pretrain.py
    STAGE_SECTIONS), as a param: an edited preset file or train_config reruns exactly the stages it
    changes, which no input file would tell Snakemake (the preset is not a file of this DAG).
    A fresh clone has no stored params, so its committed records stay up to date."""
    return TRAIN_PRESET.digest(*STAGE_SECTIONS[stage]) if TRAIN_PRESET is not None else ""


# Instruct checkpoints (config `chat: true`): every job that decodes a suite sends its prompts through the
# checkpoint's chat template (`--chat`), so quality, sweeps, speed and entropy all see the same prompts.
DECODE = {"max_new_tokens": config["max_new_tokens"], "device": config["device"], "dtype": config["dtype"],
          "chat": "--chat" if config.get("chat") else ""}

SUITES = list(config["suites"])
MAIN = SUITES[0]
EXTRA_SUITES = list(config["extra_suites"])
for _suite in EXTRA_SUITES:
    if _suite in SUITES:
        raise ValueError(f"{CONFIG_FILES}: extra_suites: {_suite!r} is already in suites (each suite once)")

ABLATIONS = config.get("ablations", list(rows.ABLATIONS))  # default: every ablation row
for _name in ABLATIONS:
    if _name not in rows.ABLATIONS:
        raise ValueError(
            f"{CONFIG_FILES}: ablations: {_name!r} is not an ablation of orl/rows.py "
            f"(expected some of {', '.join(rows.ABLATIONS)})"
        )

# The rows this profile runs: every row a DAG job measures, ablations as configured.
RUN = {row.key: row for row in rows.ROWS if row.dag and (row.ablation is None or row.ablation in ABLATIONS)}


# ------------------------------------------------------------------------------------------
# Training seeds and runs
# ------------------------------------------------------------------------------------------

# Without a preset the paper profile reads every checkpoint from the config: it trains nothing, so it
# has no seeds.
SEEDS = list(config["seeds"]) if TRAINS else [None]
PRIMARY = SEEDS[0]  # the seed whose checkpoint Tables 2 and 3, NVFP4 and the figures decode


def trained(row):
    """Whether this DAG trains the row's checkpoint (once per seed): ORL itself and its ablations."""
    return TRAINS and (row.key == rows.TRAINED or row.ablation is not None)


def seeds_of(row):
    return SEEDS if trained(row) else [None]


def run_id(row, seed):
    return row.key if seed is None else f"{row.key}_seed{seed}"


# run id -> (row, seed) for every row this profile runs
RUNS = {run_id(row, seed): (row, seed) for row in RUN.values() for seed in seeds_of(row)}


def runs_of(rows_, primary_only=False):
    """(row, seed) of every run of `rows_` (of their primary seed only, with primary_only)."""
    return [(row, seed) for row in rows_ for seed in (seeds_of(row)[:1] if primary_only else seeds_of(row))]


# ------------------------------------------------------------------------------------------
# Checkpoints: trained or quantized here, or local directories named by the config (paper)
# ------------------------------------------------------------------------------------------

GIVEN = config.get("checkpoints") or {}
TRAINED_KEYS = {ROW[rows.TRAINED].ckpt, *(f"orl-{a}" for a in ABLATIONS)} if TRAINS else set()
# orl-nvfp4 (quantized) and orl-sdar (SDAR's layout, for SGLang's dLLM backend) come from orl on every profile.
DERIVED = {"orl-nvfp4", "orl-sdar"}
BUILT_HERE = DERIVED | TRAINED_KEYS | (set() if PAPER else {"ar", "draft", "dlm"})

# The dLLM's block size per suite (config `block_size`, docs/metrics.md "TPF"): the canvas against the
# completion length sets the TPF ceiling, tokens / blocks. A suite it does not name decodes at the
# preset's block size, which is the checkpoint's own; so does a suite it names with that size, and the
# command then carries no --block-size at all (a profile naming its preset's sizes runs what one naming
# none runs). Only the profile's own dLLM family takes it: the base dLLM, ORL, its ablations and what
# is derived from ORL, on our in-process decoders.
BLOCK_SIZE = dict(config.get("block_size") or {})
PRESET_BLOCK = TRAIN_PRESET.diffusion.block_size if TRAIN_PRESET is not None else None
DLLM_FAMILY = {"dlm", ROW[rows.TRAINED].ckpt} | TRAINED_KEYS | DERIVED
for _suite in BLOCK_SIZE:
    if _suite not in SUITES + EXTRA_SUITES:
        raise ValueError(f"{CONFIG_FILES}: block_size: {_suite!r} is not a suite of this profile "
                         f"(expected some of {', '.join(SUITES + EXTRA_SUITES)})")


def block_flag(row, suite):
    """`--block-size N` where `row` decodes the profile's dLLM on `suite` at a block size other than the
    preset's; "" otherwise."""
    from orl.engines.registry import DIFFUSION_ENGINES

    size = BLOCK_SIZE.get(suite)
    if size is None or size == PRESET_BLOCK:
        return ""
    if row.ckpt not in DLLM_FAMILY or row.engine not in DIFFUSION_ENGINES:
        return ""
    return f"--block-size {size}"


def is_checkpoint(path):
    return bool(path) and os.path.isfile(os.path.join(path, "config.json"))


def ckpt_missing(key):
    """Why checkpoint `key` is not there on this profile, or None. A checkpoint built from orl (quantized,
    exported) is missing where orl is. Nothing is ever downloaded: an absent local path is a "not run" row."""
    if key in DERIVED:
        return ckpt_missing(ROW[rows.TRAINED].ckpt)
    if key in TRAINED_KEYS:  # trained here from the base dLLM
        return ckpt_missing("dlm")
    if key in BUILT_HERE:
        return None
    if is_checkpoint(GIVEN.get(key)):
        return None
    if GIVEN.get(key):
        return f"checkpoint not found at {GIVEN[key]} (checkpoints.{key}: a local folder with config.json)"
    return f"no {key} checkpoint on the {PROFILE} profile (checkpoints.{key}: a local directory; nothing is downloaded)"


def ckpt(key, seed=None):
    """Directory of checkpoint `key` (of training seed `seed`; default the primary seed's), built here or
    the local path the config gives; None: neither."""
    if key in TRAINED_KEYS:
        return f"{CKPT}/{key}_seed{PRIMARY if seed is None else seed}"
    if key in BUILT_HERE:
        return f"{CKPT}/{key}"
    return GIVEN[key] if is_checkpoint(GIVEN.get(key)) else None


def ckpt_done(key, seed=None):
    """The file whose presence means a checkpoint is complete (config.json is written last)."""
    return f"{ckpt(key, seed)}/config.json"


def missing(row):
    """Why this profile cannot run `row` (an engine this build lacks, a serving stack on a CPU profile, a
    checkpoint it neither builds nor is given), or None. The device comes before the checkpoints, as in
    `orl bench-latency`: nothing is built for a row that cannot run here whatever its checkpoints."""
    if row.engine not in ENGINE_NAMES:
        return f"engine {row.engine!r} is not in this build (orl.engines.registry.ENGINE_NAMES)"
    if row.engine in SERVING_ENGINES and not config["device"].startswith("cuda"):
        if row.engine != "vllm":
            return row.needs
        if not (VLLM_PYTHON and os.access(VLLM_PYTHON, os.X_OK)):  # vLLM's CPU build runs these rows (vllm.smk)
            return VLLM_ENV_MISSING
    for key in (row.ckpt, row.draft):
        if key and ckpt_missing(key):
            return ckpt_missing(key)
    if row.point and row.point != row.key:
        return missing(ROW[row.point])
    reference = ROW[rows.MATCH_REFERENCE]
    if row.sweep and row is not reference and missing(reference):
        # The operating point is matched to the AR target's pass@1 (docs/method.md §4).
        return f"no operating point without the AR target's pass@1 ({rows.MATCH_REFERENCE}: {missing(reference)})"
    return None


# ------------------------------------------------------------------------------------------
# Runs: their files, inputs and flags
# ------------------------------------------------------------------------------------------


def latency_file(row, seed, suite):
    return f"{RESULTS}/latency/{suite}/{run_id(row, seed)}.jsonl"


def quality_file(row, seed, suite):
    """A swept row's pass@1 is its chosen operating point's (operating_point); the others are measured."""
    prefix = "op" if row.sweep else "row"
    return f"{RESULTS}/quality/{suite}/{prefix}_{run_id(row, seed)}.jsonl"


def extra_quality_file(row, seed, suite):
    """Table 1 on an extra suite (HumanEval): at the operating point of the main suite."""
    return f"{RESULTS}/quality/{suite}/row_{run_id(row, seed)}.jsonl"


def sweep_file(row, seed, suite):
    return f"{RESULTS}/sweep/{suite}/{run_id(row, seed)}.jsonl"


def point_run(row, seed):
    """The run whose operating point `row` decodes at: its `point` row, on the same training seed."""
    point = ROW[row.point]
    return point, ((PRIMARY if seed is None else seed) if trained(point) else None)


def point_file(row, seed, suite, strict=False):
    """The operating point a run decodes at; strict: its strict-threshold variant (Table 3, rule strict_point)."""
    point, point_seed = point_run(row, seed)
    return f"{RESULTS}/oppoint/{'strict/' if strict else ''}{suite}/{run_id(point, point_seed)}.json"


def train_file(row, seed):
    return f"{RESULTS}/train/{row.ablation or row.key}{'' if seed is None else f'_seed{seed}'}.jsonl"


def engine_file(suite):
    return f"{RESULTS}/engine/{suite}/bench.jsonl"


def serving_bench_file(row, suite):
    """A serving stack's Table 3 record (rule serving_bench)."""
    return f"{RESULTS}/engine/{suite}/{row.key}.jsonl"


def length_file(tokens):
    return f"{RESULTS}/engine/length/{tokens}.jsonl"


def entropy_file(row):
    return f"{RESULTS}/entropy/{run_id(row, seeds_of(row)[0])}.jsonl"


PACKING_FILE = f"{RESULTS}/train/packing.jsonl"


def ckpt_of(row, seed):
    """The checkpoint key and seed a run decodes: its own training seed where the checkpoint is trained."""
    return row.ckpt, (seed if row.ckpt in TRAINED_KEYS else None)


def row_inputs(row, seed, suite, strict=False):
    """The checkpoints a run decodes and the operating point it decodes at (of `suite`)."""
    key, key_seed = ckpt_of(row, seed)
    inputs = [ckpt_done(key, key_seed)] + ([ckpt_done(row.draft)] if row.draft else [])
    return inputs + ([point_file(row, seed, suite, strict)] if row.point else [])


def row_flags(row, seed, suite, strict=False):
    """The flags that say which system runs: engine, method, checkpoints, policy and display name."""
    flags = [f"--engine {row.engine}", f"--ckpt {ckpt(*ckpt_of(row, seed))}", f"--system '{row.system}'"]
    if row.method:
        flags.append(f"--method {row.method}")
    if row.draft:
        flags.append(f"--draft {ckpt(row.draft)}")
    if row.point:
        flags.append(f"--policy @{point_file(row, seed, suite, strict)}")
    elif row.policy:
        flags.append(f"--policy {row.policy}")
    if block_flag(row, suite):
        flags.append(block_flag(row, suite))
    return " ".join(flags)


def one_of(keys):
    """A wildcard constraint matching exactly these keys (nothing when there are none)."""
    keys = [str(key) for key in keys]
    return "|".join(re.escape(key) for key in keys) if keys else "(?!)"


def limit_flag(limit):
    return f"--limit {limit}" if limit else ""


LATENCY_ROWS = [row for row in RUN.values() if row.tables & {1, 2}]
QUALITY_ROWS = [row for row in RUN.values() if not row.sweep and 2 in row.tables]
# Swept rows with their checkpoints (a missing one has "not run" latency and quality records instead).
SWEEP_ROWS = [row for row in RUN.values() if row.sweep and not missing(row)]
ENTROPY_ROWS = [row for row in RUN.values() if row.entropy and not missing(row)]
# Table 3: one `orl bench-engine` run per suite for our engines, one `orl bench-latency --kind engine_bench`
# per serving stack and suite.
(ENGINE_ROW,) = [row for row in RUN.values() if 3 in row.tables and row.engine not in SERVING_ENGINES]
SERVING_BENCH_ROWS = [row for row in RUN.values() if 3 in row.tables and row.engine in SERVING_ENGINES]
TABLE5_ROWS = [row for row in RUN.values() if 5 in row.tables]
ENGINE_MISSING = missing(ENGINE_ROW)  # Table 3's bench-engine and the length runs need its checkpoint
TABLE1_SWEPT = [row for row in SWEEP_ROWS if 1 in row.tables]


def sweep_suites(row):
    """Rows of Tables 1 and 2 are swept on every suite; the others (Table 5) on the main one."""
    return SUITES if row.tables & {1, 2} else [MAIN]


SWEEP_JOBS = [(row, seed, suite) for row, seed in runs_of(SWEEP_ROWS) for suite in sweep_suites(row)]
LATENCY_JOBS = [(row, seed, suite) for row, seed in runs_of(LATENCY_ROWS) for suite in SUITES]
QUALITY_JOBS = [(row, seed, suite) for row, seed in runs_of(QUALITY_ROWS) for suite in SUITES]
EXTRA_JOBS = [(row, seed, suite) for row, seed in runs_of(TABLE1_SWEPT) for suite in EXTRA_SUITES]
# Table 1's extra-suite runs of rows that cannot run here: "not run" records (NOT_RUN below).
EXTRA_MISSING = [(row, seed, suite) for row, seed in runs_of([r for r in RUN.values() if r.sweep and 1 in r.tables
                                                               and missing(r)]) for suite in EXTRA_SUITES]


def table_inputs(table):
    """The record files the DAG writes for a table's rows (the renderer reads the whole folder)."""
    run = [row for row in RUN.values() if table in row.tables]
    if table in (1, 2):
        # Table 2 shows each system on its primary seed only (so `make reproduce` trains ORL once).
        wanted = {(r, s) for r, s in runs_of(run, primary_only=table == 2)}
        files = [latency_file(r, s, x) for r, s, x in LATENCY_JOBS if (r, s) in wanted]
        files += [quality_file(r, s, x) for r, s, x in LATENCY_JOBS + QUALITY_JOBS
                  if (r, s) in wanted and (r.sweep or r in QUALITY_ROWS)]  # fmt: skip
        files += [sweep_file(r, s, x) for r, s, x in SWEEP_JOBS if (r, s) in wanted and x in SUITES]
        if table == 2:  # matched to the AR target: its quality record on every suite
            files += [quality_file(ROW[rows.MATCH_REFERENCE], None, x) for x in SUITES]
        if table == 1:
            files += [extra_quality_file(r, s, x) for r, s, x in EXTRA_JOBS + EXTRA_MISSING]
        return sorted(set(files))
    if table == 3:
        return [engine_file(suite) for suite in SUITES] + [serving_bench_file(r, x) for r in SERVING_BENCH_ROWS
                                                          for x in SUITES]
    if table == 5:
        files = [quality_file(r, s, MAIN) for r, s in runs_of(run)]
        files += [sweep_file(r, s, MAIN) for r, s in runs_of(run) if r in SWEEP_ROWS]
        return files + [train_file(r, s) for r, s in runs_of(run)] + [PACKING_FILE]
    return []  # Table 4: contributed hardware results (results/hardware/); Table 3b: records already there


# ------------------------------------------------------------------------------------------
# Outputs this profile cannot measure: rule not_run (Snakefile) writes them as "not run" records
# ------------------------------------------------------------------------------------------

NOT_RUN = {}  # output file -> (record kind, row, reason, suite)
for _row, _seed, _suite in LATENCY_JOBS + QUALITY_JOBS:
    if missing(_row):
        NOT_RUN[latency_file(_row, _seed, _suite)] = ("latency", _row, missing(_row), _suite)
        NOT_RUN[quality_file(_row, _seed, _suite)] = ("quality", _row, missing(_row), _suite)
for _row, _seed, _suite in EXTRA_MISSING:
    NOT_RUN[extra_quality_file(_row, _seed, _suite)] = ("quality", _row, missing(_row), _suite)
if ENGINE_MISSING:
    for _suite in SUITES:
        NOT_RUN[engine_file(_suite)] = ("engine_bench", ENGINE_ROW, ENGINE_MISSING, _suite)
    for _tokens in config["length_sweep"]:
        NOT_RUN[length_file(_tokens)] = ("engine_bench", ENGINE_ROW, ENGINE_MISSING, MAIN)
for _row in SERVING_BENCH_ROWS:
    for _suite in SUITES:
        if missing(_row):
            NOT_RUN[serving_bench_file(_row, _suite)] = ("engine_bench", _row, missing(_row), _suite)
for _row, _seed in runs_of(TABLE5_ROWS):
    if missing(_row):  # e.g. the paper profile's ORL training without its base dLLM
        NOT_RUN[quality_file(_row, _seed, MAIN)] = ("quality", _row, missing(_row), MAIN)
        if trained(_row):
            NOT_RUN[train_file(_row, _seed)] = ("train", _row, missing(_row), None)
if not TRAINS:
    _orl = ROW[rows.TRAINED]
    NOT_RUN[train_file(_orl, None)] = ("train", _orl, f"the paper profile reads checkpoint {_orl.ckpt} from the "
                                       "config (this DAG trains it where a preset is set)", None)  # fmt: skip
if PAPER:
    NOT_RUN[PACKING_FILE] = ("train", ROW[rows.PACKING], "the replay train-step benchmark runs on the smoke and "
                             "tiny profiles (one process, `orl bench-replay`)", None)  # fmt: skip


def runnable(jobs, file_of):
    """The run ids of the jobs whose `file_of` output this profile measures."""
    return sorted({run_id(row, seed) for row, seed, suite in jobs if file_of(row, seed, suite) not in NOT_RUN})


def write_not_run(path):
    kind, row, reason, suite = NOT_RUN[path]
    # The record says what a measured one would (so that a Table 1 family line, which matches the model's
    # name, and the NVFP4 line, which matches its precision, find it): a given checkpoint's folder name,
    # as the loader names models, and the row's precision.
    name = os.path.basename(os.path.normpath(GIVEN[row.ckpt])) if GIVEN.get(row.ckpt) else row.system
    precision = next((line.precision for line in row.lines if line.precision), "unknown")
    write_records(path, [not_run(kind, system=row.system, engine=row.engine, reason=reason, suite=suite,
                                 model={"name": name, "precision": precision})])
