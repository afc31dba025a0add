# Configuration checks, the profile's values, and the rows of orl/rows.py that the other rule files run.
# The functions the rules call (checkpoint folders, record files, a run's inputs and flags, why a row
# cannot run here) live in orl/workflow_dag.py, bound here to the profile's values.
# Every job that runs a model passes the config's --device (and --dtype where it decodes), requests
# a GPU where the device is CUDA, and names its row with --system from orl/rows.py.
#
# A *run* is one row decoding one checkpoint: the row's key, or `<key>_seed<N>` for a row whose
# checkpoint this DAG trains once per training seed (ORL and its ablations; config `seeds`). Every
# per-row file is named by its run and lies in a folder of its suite (config `suites`: Tables 1-3
# show each suite; the first is the main one, that of Tables 4-5, the entropy figure and the
# speed-vs-length runs), so one prompt set (`eval_limit` problems) serves every job of a suite.
# Table 5 (ORL and every ablation, every seed) runs on config `table5_suites` (default: the main suite).
import os
import shlex
import sys
from functools import partial
from pathlib import Path

from snakemake.utils import validate

from orl import rows, workflow_dag
from orl.engines.serving import SERVING_ENGINES
from orl.eval.operating_point import write_strict_point
from orl.report.gate import write_gate
from orl.rows import ROW
from orl.tasks import FILE_SUITES
from orl.train.config import load_preset
from orl.workflow_config import config_problem, sweep_grid, table5_suites
from orl.workflow_dag import limit_flag, one_of, run_id

CONFIG_FILES = ", ".join(str(path) for path in workflow.configfiles)  # named in configuration errors
# One line naming the key (Snakemake's own validate would print the whole schema); validate then fills
# in the schema's defaults.
_problem = config_problem(config, Path(workflow.basedir) / "workflows" / "config" / "schema.yaml")
if _problem:
    raise ValueError(f"{CONFIG_FILES}: {_problem}")
validate(config, "../config/schema.yaml")
# The sweeps' policy and grid (rule sweep): a new commit policy is swept by naming it here.
SWEEP_POLICY, SWEEP_VALUES = sweep_grid(config, CONFIG_FILES)

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
# Untimed decoding jobs (sweeps, pass@1 rows) take `decode_threads`: at batch 1 a small model gains
# little from a second thread (a tinymath dev sweep on a Xeon: 22.1 s on 2 threads, 27.6 s on 1), so two
# 1-thread jobs side by side finish well before two 2-thread jobs one after the other. Timed jobs and
# training keep `threads` (all of a job's cores, so they run alone).
DECODE_THREADS = config.get("decode_threads", THREADS)


def orl_command(threads):
    """The `orl` command of the environment running snakemake, with a job's thread settings."""
    return f"OMP_NUM_THREADS={threads} TQDM_MININTERVAL=5 {sys.executable} -m orl.cli"


ORL = orl_command(THREADS)
ORL_DECODE = orl_command(DECODE_THREADS)
# Which ready job starts first on few cores (Snakemake's `priority`): trainings, which take every core
# (ORL's first seed first), then the jobs on the long chain to the sittings (the AR target's dev pass@1,
# operating points, the sweeps the relaxed δ sweeps are matched against, the relaxed δ sweeps, the longest
# single-core jobs), then the other sweeps; the rest (sittings) comes last. Snakemake's scheduler maximises
# the *sum* of the priorities of the jobs it starts at once, so with tiers 3, 2, 1 two single-core sweeps
# (2 + 1) tied with a training (3) and took the cores it waited for (a 2-core Xeon run: a relaxed sweep
# alone on one core for 306 s while an ORL seed waited to train). Each tier is 100 times the one below, so
# one job outweighs any 99 jobs of lower tiers started beside it.
PRIORITY_SWEEP = 1
PRIORITY_GATE = 100 * PRIORITY_SWEEP
PRIORITY_TRAIN = 100 * PRIORITY_GATE
GPU = 1 if config["device"].startswith("cuda") else 0  # per model-running job (workflows/profiles/slurm)
# vLLM's CPU build lives in its own environment (`make vllm-env`); a CPU profile runs its vLLM rows there
# (vllm.smk), and says "not run: vLLM environment missing (make vllm-env)" without it (or with vllm_python "").
VLLM_PYTHON = config.get("vllm_python", f"{REPO}/.venv-vllm/bin/python")
# ORL training on the paper profile: one process per GPU under torchrun (FSDP2, orl/train/distributed.py),
# `train_gpus` of them, requested as the job's `gpu` resource. The tiny and smoke profiles train in one
# process (world size 1: the same code).
TRAIN_GPUS = config.get("train_gpus", 1) if PAPER else GPU
TRAIN_ORL = (
    (
        f"OMP_NUM_THREADS={THREADS} TQDM_MININTERVAL=5 {sys.executable} -m torch.distributed.run --standalone "
        f"--nproc-per-node {TRAIN_GPUS} -m orl.cli"
    )
    if PAPER
    else ORL
)
# The config values a job's command uses go in as params (`params: **DECODE`), never read from config in
# the shell string: a changed value then reruns the jobs it affects (Snakemake's params rerun trigger).
TRAIN = {
    "preset": config.get("preset"),
    "device": config["device"],  # training jobs
    "preset_file": f"--config {config['train_config']}" if config.get("train_config") else "",
    "cpu_linear": config.get("cpu_linear", "auto"),
}
ROLLOUT_ENGINE = config.get("rollout_engine", "recompute")  # ORL training jobs: `train-orl --rollout-engine`
# The preset (with train_config) as the training jobs will read it, loaded once for preset_digest.
TRAIN_PRESET = load_preset(config["preset"], config.get("train_config")) if TRAINS else None


# The hash of the preset sections that shape a training stage, as a param (orl/workflow_dag.py).
preset_digest = partial(workflow_dag.preset_digest, TRAIN_PRESET)


SUITES = list(config["suites"])
# Where operating points are chosen (docs/method.md §4): on each suite's dev split, then measured on test
# (dev); or on the test problems themselves (test: how records written before the dev splits were made).
CHOOSE_SPLIT = config["choose_split"]
MAIN = SUITES[0]
# Table 5's suites: the ablations are swept, given operating points and measured on each (orl/workflow_dag.py
# Plan.sweep_suites); ORL is swept on every suite already.
TABLE5_SUITES = table5_suites(config, CONFIG_FILES)
EXTRA_SUITES = list(config["extra_suites"])
for _suite in EXTRA_SUITES:
    if _suite in SUITES:
        raise ValueError(f"{CONFIG_FILES}: extra_suites: {_suite!r} is already in suites (each suite once)")

# GSM8K, MATH-500 and MBPP are read from local files (config `benchmarks`, docs/benchmarks.md), passed as
# --suite-file. An absent file is no error here: `orl eval-quality` writes "not run: <file> not found".
BENCHMARK_FILES = dict(config.get("benchmarks") or {})
for _suite in EXTRA_SUITES:
    if _suite in FILE_SUITES and _suite not in BENCHMARK_FILES:
        raise ValueError(
            f"{CONFIG_FILES}: benchmarks.{_suite}: missing; extra suite {_suite!r} is read from a "
            "local JSONL file (docs/benchmarks.md)"
        )


def suite_file_flag(suite):
    """--suite-file of a suite read from a file (nothing for the others)."""
    return f"--suite-file {shlex.quote(BENCHMARK_FILES[suite])}" if suite in FILE_SUITES else ""


def suite_file_input(suite):
    """The suite's file as an input where it exists, so that a changed or newly placed file reruns the jobs."""
    path = BENCHMARK_FILES.get(suite) if suite in FILE_SUITES else None
    return [path] if path and os.path.isfile(path) else []


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


# The rows' runs (orl/workflow_dag.py Seeds): trained(row), seeds_of(row), runs_of(rows_, primary_only).
_SEEDS = workflow_dag.Seeds(trains=TRAINS, seeds=SEEDS)
trained, seeds_of, runs_of = _SEEDS.trained, _SEEDS.seeds_of, _SEEDS.runs_of

# run id -> (row, seed) for every row this profile runs
RUNS = {run_id(row, seed): (row, seed) for row in RUN.values() for seed in seeds_of(row)}


# ------------------------------------------------------------------------------------------
# Checkpoints: trained or quantized here, or local directories named by the config (paper)
# ------------------------------------------------------------------------------------------

GIVEN = config.get("checkpoints") or {}
TRAINED_KEYS = {ROW[rows.TRAINED].ckpt, *(f"orl-{a}" for a in ABLATIONS)} if TRAINS else set()
# orl-nvfp4 (quantized) and orl-sdar (SDAR's layout, for SGLang's dLLM backend) come from orl on every profile.
DERIVED = {"orl-nvfp4", "orl-sdar"}
# Off the paper profile the DAG trains the AR target's EAGLE-3 head and DFlash drafter too (train.smk
# train_eagle3, train_dflash).
BUILT_HERE = DERIVED | TRAINED_KEYS | (set() if PAPER else {"ar", "draft", "dlm", "eagle3", "dflash"})

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
        raise ValueError(
            f"{CONFIG_FILES}: block_size: {_suite!r} is not a suite of this profile "
            f"(expected some of {', '.join(SUITES + EXTRA_SUITES)})"
        )


for _suite in config["suite_max_new_tokens"]:
    if _suite not in SUITES + EXTRA_SUITES:
        raise ValueError(
            f"{CONFIG_FILES}: suite_max_new_tokens: {_suite!r} is not a suite of this profile "
            f"(expected some of {', '.join(SUITES + EXTRA_SUITES)})"
        )
# What every decoding job passes. The generation budget is per suite (config `suite_max_new_tokens` over
# `max_new_tokens`; a rule without a {suite} wildcard decodes the main suite). Instruct checkpoints (config
# `chat: true`): every job that decodes a suite sends its prompts through the checkpoint's chat template
# (`--chat`), so quality, sweeps, speed and entropy all see the same prompts.
SUITE_TOKENS = {
    **dict.fromkeys(SUITES + EXTRA_SUITES, config["max_new_tokens"]),
    **config["suite_max_new_tokens"],
}


def sweep_priority(suite):
    """A sweep's priority in its tier: longest budget first (+1 per shorter budget of the profile), so that a
    long sweep does not end the tier alone beside an idle core (a 2-core FORCE=1 run: a tinymath sweep started
    last and ran its final 61 s alone); far below the tier above (PRIORITY_GATE)."""
    return PRIORITY_SWEEP + sorted(set(SUITE_TOKENS.values())).index(SUITE_TOKENS[suite])


DECODE = {
    "max_new_tokens": lambda wc: SUITE_TOKENS[wc.get("suite", MAIN)],
    "device": config["device"],
    "dtype": config["dtype"],
    "chat": "--chat" if config.get("chat") else "",
}


# Checkpoints, record files, a run's inputs and flags, and why a row cannot run here (orl/workflow_dag.py
# Plan): the names the rule files call.
PLAN = workflow_dag.Plan(profile=PROFILE, results=RESULTS, ckpt_dir=CKPT, device=config["device"],
                         vllm_python=VLLM_PYTHON, seeds=_SEEDS, suites=SUITES, given=GIVEN,
                         trained_keys=frozenset(TRAINED_KEYS), derived=frozenset(DERIVED),
                         built_here=frozenset(BUILT_HERE), block_size=BLOCK_SIZE, preset_block=PRESET_BLOCK,
                         dllm_family=frozenset(DLLM_FAMILY), choose_split=CHOOSE_SPLIT,
                         table5_suites=TABLE5_SUITES)  # fmt: skip
ckpt, ckpt_done, ckpt_of, missing = PLAN.ckpt, PLAN.ckpt_done, PLAN.ckpt_of, PLAN.missing
block_flag = PLAN.block_flag


# ------------------------------------------------------------------------------------------
# Runs: their files, inputs and flags
# ------------------------------------------------------------------------------------------

latency_file, quality_file, extra_quality_file = PLAN.latency_file, PLAN.quality_file, PLAN.extra_quality_file
sweep_file, point_file, train_file = PLAN.sweep_file, PLAN.point_file, PLAN.train_file
engine_file, serving_bench_file, length_file = PLAN.engine_file, PLAN.serving_bench_file, PLAN.length_file
entropy_file, sweep_suites, choose_file = PLAN.entropy_file, PLAN.sweep_suites, PLAN.choose_file
row_inputs, row_flags = PLAN.row_inputs, PLAN.row_flags

PACKING_FILE = f"{RESULTS}/train/packing.jsonl"


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
RELAXED_ROWS = [row for row in RUN.values() if row.verification == "relaxed" and not missing(row)]
# Rows of Tables 1 and 2 timed together, one sitting per suite (config latency_sitting; rule latency_sitting,
# `orl bench-sitting`): the speedups and throughput gains among them pair requests interleaved in one sitting
# (docs/metrics.md "Sittings"). A row that cannot run here keeps its "not run" record.
_SITTING_KEYS = list(config.get("latency_sitting") or [])
_not_timed = [key for key in _SITTING_KEYS if key not in ROW or ROW[key] not in LATENCY_ROWS]
if _not_timed:
    raise ValueError(f"config latency_sitting: {', '.join(map(str, _not_timed))} not a row with a latency record "
                     f"here; expected some of {', '.join(row.key for row in LATENCY_ROWS)}")  # fmt: skip
SITTING_RUNS = runs_of([ROW[key] for key in _SITTING_KEYS if not missing(ROW[key])])
SITTING_RUNS = SITTING_RUNS if len(SITTING_RUNS) > 1 else []  # one system alone is rule latency's
SITTING_IDS = {run_id(row, seed) for row, seed in SITTING_RUNS}
# A sitting also scores the completions it timed as its rows' test pass@1 (bench-latency --quality-out): the
# quality record rule quality_row (a fixed row of Table 2) or point_quality (a swept row's chosen point)
# would write by decoding the same prompts again. A swept row's choice on test is operating_point's record.
SITTING_SCORED = {run_id(row, seed) for row, seed in SITTING_RUNS
                  if (row.sweep and CHOOSE_SPLIT != "test") or (not row.sweep and row in QUALITY_ROWS)}  # fmt: skip


SWEEP_JOBS = [(row, seed, suite) for row, seed in runs_of(SWEEP_ROWS) for suite in sweep_suites(row)]
LATENCY_JOBS = [(row, seed, suite) for row, seed in runs_of(LATENCY_ROWS) for suite in SUITES]
QUALITY_JOBS = [(row, seed, suite) for row, seed in runs_of(QUALITY_ROWS) for suite in SUITES]
EXTRA_JOBS = [(row, seed, suite) for row, seed in runs_of(TABLE1_SWEPT) for suite in EXTRA_SUITES]
# Table 1's extra-suite runs of rows that cannot run here: "not run" records (NOT_RUN below).
EXTRA_MISSING = [
    (row, seed, suite)
    for row, seed in runs_of([r for r in RUN.values() if r.sweep and 1 in r.tables and missing(r)])
    for suite in EXTRA_SUITES
]


# The record files the DAG writes for a table's rows: table_inputs(table).
JOBS = workflow_dag.Jobs(run=RUN, latency=LATENCY_JOBS, quality_rows=QUALITY_ROWS, quality=QUALITY_JOBS,
                         sweep_rows=SWEEP_ROWS, sweep=SWEEP_JOBS, extra=EXTRA_JOBS, extra_missing=EXTRA_MISSING,
                         serving_bench_rows=SERVING_BENCH_ROWS, packing_file=PACKING_FILE)  # fmt: skip
table_inputs = partial(PLAN.table_inputs, jobs=JOBS)


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
        for _suite in TABLE5_SUITES:
            NOT_RUN[quality_file(_row, _seed, _suite)] = ("quality", _row, missing(_row), _suite)
        if trained(_row):
            NOT_RUN[train_file(_row, _seed)] = ("train", _row, missing(_row), None)
if not TRAINS:
    _orl = ROW[rows.TRAINED]
    NOT_RUN[train_file(_orl, None)] = ("train", _orl, f"the paper profile reads checkpoint {_orl.ckpt} from the "
                                       "config (this DAG trains it where a preset is set)", None)  # fmt: skip
if PAPER:
    NOT_RUN[PACKING_FILE] = ("train", ROW[rows.PACKING], "the replay train-step benchmark runs on the smoke and "
                             "tiny profiles (one process, `orl bench-replay`)", None)  # fmt: skip


# runnable(jobs, file_of): the run ids of the jobs whose `file_of` output this profile measures;
# write_not_run(path): rule not_run's record (orl/workflow_dag.py).
runnable = partial(workflow_dag.runnable, not_run_files=NOT_RUN)
write_not_run = partial(workflow_dag.write_not_run, not_run_files=NOT_RUN, given=GIVEN)
