# Configuration checks, path helpers, and the rows of orl/rows.py that the other rule files run.
# Every job that runs a model passes the config's --device (and --dtype where it decodes), requests
# a GPU where the device is CUDA, and names its row with --system from orl/rows.py.
import json
import os
import re
import sys
from pathlib import Path

from snakemake.utils import validate

from orl import rows
from orl.engines.serving import SERVING_ENGINES
from orl.io import atomic_write_json
from orl.records import not_run, write_records
from orl.report.gate import write_gate
from orl.rows import ROW

validate(config, "../config/schema.yaml")
CONFIG_FILES = ", ".join(str(path) for path in workflow.configfiles)  # named in configuration errors

if config["profile"] != PROFILE:
    raise ValueError(f"{CONFIG_FILES}: profile: says {config['profile']!r} but the run asked for {PROFILE!r}")

PAPER = PROFILE == "paper"
if not PAPER and not config.get("preset"):
    raise ValueError(f"{CONFIG_FILES}: preset: the {PROFILE} profile trains its models and needs a preset")

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
# The config values a job's command uses go in as params (`params: **DECODE`), never read from config in
# the shell string: a changed value then reruns the jobs it affects (Snakemake's params rerun trigger).
TRAIN = {"preset": config.get("preset"), "device": config["device"]}  # training jobs
DECODE = {"suite": config["suite"], "max_new_tokens": config["max_new_tokens"], "device": config["device"],
          "dtype": config["dtype"]}  # jobs that decode: every flag they share

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
# Checkpoints: trained or quantized here, or local directories named by the config (paper)
# ------------------------------------------------------------------------------------------

GIVEN = config.get("checkpoints") or {}
# orl-nvfp4 (quantized) and orl-sdar (SDAR's layout, for SGLang's dLLM backend) come from orl on every profile.
DERIVED = {"orl-nvfp4", "orl-sdar"}
BUILT_HERE = DERIVED if PAPER else {"ar", "draft", "dlm", "orl", *DERIVED, *(f"orl-{a}" for a in ABLATIONS)}


def is_checkpoint(path):
    return bool(path) and os.path.isfile(os.path.join(path, "config.json"))


# The paper profile runs nothing without its four models; a missing optional one (eagle3, dflash)
# only turns its rows into "not run" records (`missing` below).
for _key in ("ar", "draft", "dlm", "orl") if PAPER else ():
    if not is_checkpoint(GIVEN.get(_key)):
        raise ValueError(
            f"{CONFIG_FILES}: checkpoints.{_key}: {GIVEN.get(_key)!r} is not a checkpoint directory "
            "(expected a local folder with config.json; nothing is downloaded)"
        )


def ckpt(key):
    """Directory of checkpoint `key`: built here, or the local path the config gives; None: neither."""
    if key in BUILT_HERE:
        return f"{CKPT}/{key}"
    return GIVEN[key] if is_checkpoint(GIVEN.get(key)) else None


def ckpt_done(key):
    """The file whose presence means a checkpoint is complete (config.json is written last)."""
    return f"{ckpt(key)}/config.json"


def missing(row):
    """Why this profile cannot run `row` (a serving stack on a CPU profile, a checkpoint it neither builds
    nor is given), or None. The device comes first, as in `orl bench-latency`: nothing is built for a row
    that cannot run here whatever its checkpoints."""
    if row.engine in SERVING_ENGINES and not config["device"].startswith("cuda"):
        return row.needs
    for key in (row.ckpt, row.draft):
        if key and ckpt(key) is None:
            if key in GIVEN:
                return f"checkpoints.{key}: {GIVEN[key]!r} is not a checkpoint directory (nothing is downloaded)"
            return (f"no {key} checkpoint on the {PROFILE} profile (checkpoints.{key}: a local directory; "
                    "nothing is downloaded)")
    return None


# ------------------------------------------------------------------------------------------
# Rows: their files, inputs and flags
# ------------------------------------------------------------------------------------------


def latency_file(row):
    return f"{RESULTS}/latency/{row.key}.jsonl"


def quality_file(row):
    """A swept row's pass@1 is its chosen operating point's (operating_point); the others are measured."""
    return f"{RESULTS}/quality/op_{row.key}.jsonl" if row.sweep else f"{RESULTS}/quality/row_{row.key}.jsonl"


def sweep_file(row):
    return f"{RESULTS}/sweep/{row.key}.jsonl"


def point_file(row, strict=False):
    """The operating point a row decodes at; strict: its strict-threshold variant (Table 3, rule strict_point)."""
    return f"{RESULTS}/oppoint/strict/{row.point}.json" if strict else f"{RESULTS}/oppoint/{row.point}.json"


def write_strict_point(source, target):
    """The operating point `source` with its threshold:τ as strict-threshold:τ (SGLang's LowConfidence rule)."""
    point = json.loads(Path(source).read_text())
    policy = point.get("policy")
    if not (isinstance(policy, str) and policy.startswith("threshold:")):
        raise ValueError(f"{source}: policy: expected threshold:τ for Table 3's strict variant, got {policy!r}")
    # The commands parse and check the spec when they read it (`--policy @FILE`).
    atomic_write_json(target, {**point, "policy": f"strict-{policy}", "from": str(source)})


def train_file(row):
    return f"{RESULTS}/train/{row.ablation or row.key}.jsonl"


ENGINE_FILE = f"{RESULTS}/engine/bench.jsonl"


def serving_bench_file(row):
    """A serving stack's Table 3 record (rule serving_bench)."""
    return f"{RESULTS}/engine/{row.key}.jsonl"


PACKING_FILE = f"{RESULTS}/train/packing.jsonl"


def row_inputs(row, strict=False):
    """The checkpoints a row decodes and the operating point it decodes at."""
    inputs = [ckpt_done(key) for key in (row.ckpt, row.draft) if key]
    return inputs + ([point_file(row, strict)] if row.point else [])


def row_flags(row, strict=False):
    """The flags that say which system runs: engine, method, checkpoints, policy and display name."""
    flags = [f"--engine {row.engine}", f"--ckpt {ckpt(row.ckpt)}", f"--system '{row.system}'"]
    if row.method:
        flags.append(f"--method {row.method}")
    if row.draft:
        flags.append(f"--draft {ckpt(row.draft)}")
    if row.point:
        flags.append(f"--policy @{point_file(row, strict)}")
    elif row.policy:
        flags.append(f"--policy {row.policy}")
    return " ".join(flags)


def one_of(keys):
    """A wildcard constraint matching exactly these keys (nothing when there are none)."""
    keys = list(keys)
    return "|".join(re.escape(key) for key in keys) if keys else "(?!)"


def limit_flag(limit):
    return f"--limit {limit}" if limit else ""


LATENCY_ROWS = [row for row in RUN.values() if row.tables & {1, 2}]
QUALITY_ROWS = [row for row in RUN.values() if not row.sweep and (2 in row.tables or row.key == rows.MATCH_REFERENCE)]
SWEEP_ROWS = [row for row in RUN.values() if row.sweep]
ENTROPY_ROWS = [row for row in RUN.values() if row.entropy]
# Table 3: one `orl bench-engine` run for our engines, one `orl bench-latency --kind engine_bench` per serving stack.
(ENGINE_ROW,) = [row for row in RUN.values() if 3 in row.tables and row.engine not in SERVING_ENGINES]
SERVING_BENCH_ROWS = [row for row in RUN.values() if 3 in row.tables and row.engine in SERVING_ENGINES]
TABLE5_ROWS = [row for row in RUN.values() if 5 in row.tables]


def table_inputs(table):
    """The record files the DAG writes for a table's rows (the renderer reads the whole folder)."""
    run = [row for row in RUN.values() if table in row.tables]
    if table == 1:
        return ([latency_file(row) for row in run] + [quality_file(row) for row in run]
                + [f"{RESULTS}/quality/{suite}_{row.key}.jsonl" for suite in config["extra_suites"] for row in run])
    if table == 2:
        return [latency_file(row) for row in run] + [quality_file(row) for row in run]
    if table == 3:
        return [ENGINE_FILE] + [serving_bench_file(row) for row in SERVING_BENCH_ROWS]
    if table == 5:
        return ([quality_file(row) for row in run] + [sweep_file(row) for row in run if row.sweep]
                + [train_file(row) for row in run] + [PACKING_FILE])
    return []  # Table 4: contributed hardware results (results/hardware/) only


# ------------------------------------------------------------------------------------------
# Outputs this profile cannot measure: rule not_run (Snakefile) writes them as "not run" records
# ------------------------------------------------------------------------------------------

NOT_RUN = {}  # output file -> (record kind, row, reason)
for _row in LATENCY_ROWS + QUALITY_ROWS:
    if missing(_row):
        NOT_RUN[latency_file(_row)] = ("latency", _row, missing(_row))
        NOT_RUN[quality_file(_row)] = ("quality", _row, missing(_row))
for _row in SERVING_BENCH_ROWS:
    if missing(_row):
        NOT_RUN[serving_bench_file(_row)] = ("engine_bench", _row, missing(_row))
if PAPER:
    _orl = ROW[rows.TRAINED]
    NOT_RUN[train_file(_orl)] = ("train", _orl, f"the paper profile reads checkpoint {_orl.ckpt} from the config "
                                 "(this DAG did not train it)")  # fmt: skip
    NOT_RUN[PACKING_FILE] = ("train", ROW[rows.PACKING], "the replay train-step benchmark needs a training preset "
                             "(preset: null on the paper profile)")  # fmt: skip


def runnable(rows_, file_of):
    """Keys of the rows whose `file_of` output this profile measures."""
    return [row.key for row in rows_ if file_of(row) not in NOT_RUN]


def write_not_run(path):
    kind, row, reason = NOT_RUN[path]
    suite = None if kind == "train" else config["suite"]
    write_records(path, [not_run(kind, system=row.system, engine=row.engine, reason=reason, suite=suite)])
