"""The reproduction DAG: dry runs, configuration checks, and the smoke profile end to end."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from orl import rows
from orl.engines.kinds import ENGINE_NAMES
from orl.records import load_records
from orl.rows import ROW
from orl.train.config import STAGE_SECTIONS, load_preset

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile")]


def snakemake(*args: str, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [*SNAKEMAKE, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env
    )


# The `orl` subcommands that run a model: each must get the profile's --device (the decoding ones --dtype
# too).
MODEL_COMMANDS = {"train-ar", "convert", "train-orl", "bench-replay", "generate", "eval-quality", "sweep",
                  "entropy-profile", "bench-engine", "bench-latency"}  # fmt: skip
DECODING_COMMANDS = MODEL_COMMANDS - {"train-ar", "convert", "train-orl", "bench-replay"}
# The rules that decode without timing anything (config `decode_threads`), and those that time.
DECODE_RULES = {"sweep", "relaxed_points", "relaxed_sweep", "point_quality", "reference_quality",
                "quality_row", "quality_extra_suite", "entropy_profile"}  # fmt: skip
TIMED_RULES = {"latency", "latency_sitting", "bench_engine", "bench_length", "serving_bench"}


def paper_config(tmp_path: Path, keys=("ar", "draft", "dlm", "orl"), **extra) -> Path:
    """A paper-profile config file whose checkpoints `keys` are local folders with a config.json each."""
    lines = ["profile: paper", "checkpoints:"]
    for key in keys:
        folder = tmp_path / "models" / key
        folder.mkdir(parents=True)
        (folder / "config.json").write_text("{}")
        lines.append(f"  {key}: {folder}")
    lines += [f"{key}: {value}" for key, value in extra.items()]
    path = tmp_path / "my-paper.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def planned_jobs(stdout: str) -> list[dict]:
    """The jobs of a `snakemake -n -p` plan: rule, resources line, shell command."""
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", stdout):
        match = re.match(r"(?:local)?rule (\w+):", block)
        if match:
            resources = re.search(r"resources: (.*)", block)
            command = re.search(r"Shell command: (.*)", block)
            output = re.search(r"output: (.*)", block)
            inputs = re.search(r"\n\s*input: (.*)", block)
            priority = re.search(r"\n\s*priority: (\d+)", block)
            jobs.append({"rule": match.group(1), "resources": resources.group(1) if resources else "",
                         "priority": int(priority.group(1)) if priority else 0,
                         "command": command.group(1) if command else "",
                         "output": output.group(1).split(", ") if output else [],
                         "input": inputs.group(1).split(", ") if inputs else []})  # fmt: skip
    return jobs


def orl_subcommand(command: str) -> str | None:
    match = re.search(r"-m orl\.cli (\S+)", command)
    return match.group(1) if match else None


def test_dry_run_lists_the_whole_chain_for_table2(tmp_path):
    run = snakemake("-n", "reproduce_table2", cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    for rule in (
        "train_ar",
        "train_draft",
        "convert",
        "train_orl",
        "quantize_nvfp4",
        "sweep",
        "operating_point",
        "latency_sitting",  # the tiny profile times its Table 2 rows together (config latency_sitting)
        "reference_quality",  # the AR target's dev pass@1; the sitting scores the rows' test pass@1
        "render_table",
    ):
        assert f"{rule} " in run.stdout or f"rule {rule}:" in run.stdout, rule


def test_the_tiny_profile_copies_its_committed_base_instead_of_training_it(tmp_path):
    """results/tiny/base present (and matching the preset): its three checkpoints are taken, not trained; the
    ORL stage trains from the copy. `base=` (make reproduce TRAIN_BASE=1) trains the base again."""
    base = REPO / "results" / "tiny" / "base"
    if not (base / "manifest.json").is_file():
        pytest.skip(f"no committed base under {base}")
    shutil.copytree(base, tmp_path / "results" / "tiny" / "base")
    run = snakemake("-n", "-p", "reproduce_table2", "--config", "profile=tiny", cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    planned = [job["rule"] for job in planned_jobs(run.stdout)]
    assert planned.count("take_base") == 3 and not {"train_ar", "train_draft", "convert"} & set(planned)
    orl = next(job for job in planned_jobs(run.stdout) if job["rule"] == "train_orl")
    assert "--init results/tiny/ckpt/dlm " in orl["command"] and "--cpu-linear onednn" in orl["command"]
    run = snakemake("-n", "reproduce_table2", "--config", "profile=tiny", "base=", cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    planned = {job["rule"] for job in planned_jobs(run.stdout)}
    assert {"train_ar", "train_draft", "convert"} <= planned and "take_base" not in planned


def test_trainings_start_first_then_what_gates_the_long_relaxed_sweeps(tmp_path):
    """On 2 cores the order matters: a relaxed δ sweep waits on ORL's first seed's sweep and operating
    point, and is the longest single-core job, so those go before the other sweeps (common.smk PRIORITY_*).
    Snakemake starts the set of ready jobs with the largest *sum* of priorities, so a training (both cores)
    must outweigh two jobs of the tiers below it, and a job on the relaxed chain two other sweeps."""
    run = snakemake("-n", "-p", "reproduce_table2", "--config", "profile=tiny", cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    jobs = planned_jobs(run.stdout)
    priority = {}
    for job in jobs:
        key = "gate" if job["rule"] == "sweep" and "/orl_seed0.jsonl" in job["output"][0] else job["rule"]
        priority.setdefault(key, set()).add(job["priority"])
    first = {job["priority"] for job in jobs if job["rule"] == "train_orl" and "--seed 0 " in job["command"]}
    assert len(priority["train_orl"]) == 2 and first == {max(priority["train_orl"])}  # ORL's first seed first
    train, (gate,), sweep = min(priority["train_orl"]), priority["gate"], priority["sweep"]
    on_the_chain = ("reference_quality", "operating_point", "relaxed_points", "relaxed_sweep")
    assert all(priority[rule] == {gate} for rule in on_the_chain)
    assert train > 2 * gate and gate > 2 * max(sweep) and max(priority["latency_sitting"]) < min(sweep)
    # Within the sweep tier the long suite's sweeps go first (common.smk sweep_priority).
    sweeps = [job for job in jobs if job["rule"] == "sweep" and "/orl_seed0.jsonl" not in job["output"][0]]
    of_suite = {
        suite: {job["priority"] for job in sweeps if f"/sweep/{suite}/" in job["output"][0]}
        for suite in ("tinycode", "tinymath")
    }
    assert min(of_suite["tinymath"]) > max(of_suite["tinycode"])


def test_planning_the_dag_does_not_import_torch(tmp_path):
    """Parsing the workflow (every `make reproduce` does it three times, every dry run once) reads presets,
    rows and the base manifest, never a model: without torch it takes about half the time."""
    code = (
        "import runpy, sys; sys.argv = ['snakemake', '-n', 'reproduce_table2', '--config', 'profile=tiny', "
        f"'--snakefile', {str(REPO / 'Snakefile')!r}]\n"
        "try:\n    runpy.run_module('snakemake', run_name='__main__')\nexcept SystemExit as exit:\n"
        "    assert not exit.code, exit.code\n"
        "assert 'torch' not in sys.modules, 'the workflow imported torch'"
    )
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "reproduce_table2" in run.stdout


def test_a_bare_dry_run_plans_table2(tmp_path):
    run = snakemake("-n", cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    targets = {job["rule"] for job in planned_jobs(run.stdout)} & {f"reproduce_table{n}" for n in range(1, 6)}
    assert targets == {"reproduce_table2"}
    assert "reproduce_all" not in run.stdout


def test_paper_config_runs_every_model_on_cuda(tmp_path):
    run = snakemake("-n", "-p", "reproduce_table2", "--configfile", str(paper_config(tmp_path)), cwd=tmp_path)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    jobs = planned_jobs(run.stdout)
    model_jobs = [job for job in jobs if orl_subcommand(job["command"]) in MODEL_COMMANDS]
    assert len(model_jobs) >= 15, [job["rule"] for job in jobs]
    for job in model_jobs:
        assert "--device cuda" in job["command"], job["command"]
        assert "gpu=1" in job["resources"], job
        if orl_subcommand(job["command"]) in DECODING_COMMANDS:
            # Instruct checkpoints (paper.yaml: chat: true): every decoding job uses the chat template.
            assert "--dtype auto" in job["command"] and "--chat" in job["command"], job["command"]
    # Local checkpoints are read, never trained; the rows without an EAGLE-3 head, a DFlash drafter or a TraDo
    # checkpoint become "not run" records (their latency and their quality), as does a row whose engine this
    # build does not have.
    assert not any(job["rule"].startswith("train") for job in jobs)
    lacking = [
        row
        for row in rows.in_table(2, dag=True)
        if row.draft in ("eagle3", "dflash") or row.ckpt == "trado" or row.engine not in ENGINE_NAMES
    ]
    (not_run,) = [job for job in jobs if job["rule"] == "not_run"]  # one job writes every such record
    for row in lacking:
        for kind in ("latency", "quality"):
            written = [path for path in not_run["output"] if f"/{kind}/" in path]
            assert any(path.endswith(f"{row.key}.jsonl") for path in written), (row.key, kind)
    assert f"--ckpt {tmp_path / 'models' / 'orl'}" in run.stdout

    # Every rule that runs a model asks Slurm for its GPU partition (its `gpu` resource becomes --gpus).
    slurm = yaml.safe_load((REPO / "workflows" / "profiles" / "slurm" / "config.yaml").read_text())
    gpu_rules = {rule for rule, res in slurm["set-resources"].items() if res.get("slurm_partition") == "gpu"}
    assert {job["rule"] for job in model_jobs} <= gpu_rules


def profile_config(profile: str) -> dict:
    return yaml.safe_load((REPO / "workflows" / "config" / f"{profile}.yaml").read_text())


@pytest.mark.parametrize("profile", ["smoke", "tiny", "paper"])
def test_reproduce_all_plans_on_every_profile(tmp_path, profile):
    args = (
        ["--configfile", str(paper_config(tmp_path))]
        if profile == "paper"
        else ["--config", f"profile={profile}"]
    )
    run = snakemake("-n", "-p", "reproduce_all", "gate", *args, cwd=tmp_path)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    jobs = planned_jobs(run.stdout)
    rules = {job["rule"] for job in jobs}
    assert {"render_table", "render_figures", "render_index", "reproduce_all", "gate", "bench_engine",
            "bench_length"} <= rules  # fmt: skip
    for job in jobs:
        if orl_subcommand(job["command"]) in MODEL_COMMANDS:
            assert f"--device {'cuda' if profile == 'paper' else 'cpu'}" in job["command"], job["command"]
    # Every job that asks for the `gpu` resource goes to the Slurm profile's GPU partition.
    slurm = yaml.safe_load((REPO / "workflows" / "profiles" / "slurm" / "config.yaml").read_text())
    gpu_rules = {rule for rule, res in slurm["set-resources"].items() if res.get("slurm_partition") == "gpu"}
    assert {job["rule"] for job in jobs if "gpu=" in job["resources"]} <= gpu_rules
    config = profile_config(profile)
    # Untimed decoding jobs run on `decode_threads` (the tiny profile: two at once on its 2 cores); timed
    # jobs and training on `threads`, so that nothing runs beside them.
    decode_threads = config.get("decode_threads", config["threads"])
    for job in jobs:
        threads = re.search(r"OMP_NUM_THREADS=(\d+)", job["command"])
        if job["rule"] in DECODE_RULES:
            assert threads and int(threads.group(1)) == decode_threads, job
        elif job["rule"] in TIMED_RULES | {"train_orl", "train_ablation"}:
            assert threads and int(threads.group(1)) == config["threads"], job
    # ORL and the ablations are trained once per seed where they are trained; the paper profile trains none.
    seeds = [] if profile == "paper" else config["seeds"]
    ablations = config.get("ablations", list(rows.ABLATIONS))
    for rule, count in (("train_ablation", len(ablations) * len(seeds)), ("train_orl", len(seeds))):
        trainings = [job for job in jobs if job["rule"] == rule]
        assert len(trainings) == count, rule
        assert sorted(re.search(r"--seed (\d+)", job["command"]).group(1) for job in trainings) == sorted(
            str(seed) for seed in seeds for _ in range(count // max(1, len(seeds)))
        )
    # Every suite of the profile is evaluated (Tables 1-3), with one prompt set: the same --limit everywhere.
    for suite in config["suites"]:
        timed = [job for job in jobs if job["rule"] in ("latency", "latency_sitting")]
        assert any(f"--suite {suite} " in job["command"] for job in timed), suite
        assert any(job["rule"] == "bench_engine" and f"--suite {suite} " in job["command"] for job in jobs), (
            suite
        )
    limited = ("latency", "latency_sitting", "sweep", "quality_row")
    limits = {re.search(r"--limit (\d+)", job["command"]).group(1) if "--limit" in job["command"] else None
              for job in jobs if job["rule"] in limited}  # fmt: skip
    assert limits == {str(config["eval_limit"]) if config["eval_limit"] else None}
    # The speedup-vs-length runs: fixed length, one per configured length.
    lengths = [job for job in jobs if job["rule"] == "bench_length"]
    assert len(lengths) == len(config["length_sweep"]) and all(
        "--ignore-eos" in job["command"] for job in lengths
    )
    if profile == "paper":  # what cannot run there is written as a record, not dropped from the DAG
        assert "bench_packing" not in rules and "not_run" in rules


def test_a_configfile_overrides_its_profile(tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text("profile: smoke\nmax_new_tokens: 17\nablations: [no-aec]\nsuites: [tinycode, tinymath]\n"
                    "suite_max_new_tokens: {tinymath: 40}\nsweep_policy: factor\n"
                    "sweep_values: [1.0, 2.0]\n")  # fmt: skip
    run = snakemake("-n", "-p", "reproduce_table2", "reproduce_table5", "--configfile", str(mine),
                    cwd=tmp_path)  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    assert "--max-new-tokens 32" not in run.stdout
    assert "--ablation no-aec" in run.stdout and "--ablation stale" not in run.stdout
    # The generation budget is per suite: the worked solutions of tinymath get theirs.
    commands = [job["command"] for job in planned_jobs(run.stdout)]
    budgets = {re.search(r"--suite (\S+)", command).group(1) + " " + re.search(r"--max-new-tokens (\d+)",
               command).group(1) for command in commands if "--max-new-tokens" in command
               and "--suite" in command}  # fmt: skip
    assert budgets == {"tinycode 17", "tinymath 40"}
    # A commit policy is swept by naming it (sweep_policy, sweep_values): every sweep varies its parameter.
    sweeps = [job["command"] for job in planned_jobs(run.stdout) if job["rule"] == "sweep"]
    assert sweeps and all("--policy factor --values 1.0,2.0 " in command for command in sweeps), sweeps
    # Table 5 runs on the main suite unless table5_suites says more: the ablation is swept there only.
    ablation_sweeps = [command for command in sweeps if "'ORL: no AEC'" in command]
    assert ablation_sweeps and all("--suite tinycode " in command for command in ablation_sweeps)


def test_table5_runs_every_ablation_on_each_of_its_suites(tmp_path):
    """config table5_suites: ORL and every ablation, every seed, swept, given an operating point and measured
    on each suite named (ORL's sweeps there are its Table 1-2 ones, not planned twice; its test points are
    those its Table 2 sitting scored), and Table 5's render reads every one of those records."""
    mine = tmp_path / "mine.yaml"
    mine.write_text("profile: smoke\nablations: [no-aec]\nsuites: [tinycode, tinycode-long]\n"
                    "table5_suites: [tinycode, tinycode-long]\n")  # fmt: skip
    run = snakemake("-n", "-p", "reproduce_table5", "--configfile", str(mine), cwd=tmp_path)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    jobs = planned_jobs(run.stdout)
    seeds = profile_config("smoke")["seeds"]
    runs = [f"{key}_seed{seed}" for key in ("orl", "orl-no-aec") for seed in seeds]
    expected = {f"{suite}/{run}" for suite in ("tinycode", "tinycode-long") for run in runs}

    def planned(rules: tuple[str, ...], folder: str) -> list[str]:
        """suite/run of every `folder` output of those rules' jobs."""
        outputs = [out for job in jobs if job["rule"] in rules for out in job["output"]]
        pattern = r"results/smoke/\w+/(\S+)/(?:op_|row_)?(\S+)\.jsonl"
        return [re.sub(pattern, r"\1/\2", out) for out in outputs if f"/{folder}/" in out]

    # The sitting's dLLM row adds its own sweep and test point; each run is planned once.
    for found in (planned(("sweep",), "sweep"), planned(("point_quality", "latency_sitting"), "quality")):
        assert len(found) == len(set(found)) and expected <= set(found), found
    scored = set(planned(("latency_sitting",), "quality"))
    assert {f"{suite}/orl_seed{seed}" for suite in ("tinycode", "tinycode-long") for seed in seeds} <= scored
    (render,) = [job for job in jobs if job["rule"] == "render_table"]
    for suite in ("tinycode", "tinycode-long"):
        for run_ in runs:
            assert f"results/smoke/quality/{suite}/op_{run_}.jsonl" in render["input"]
            assert f"results/smoke/sweep/{suite}/{run_}.jsonl" in render["input"]


def test_the_paper_profile_writes_what_it_cannot_measure_as_not_run(tmp_path):
    config = paper_config(tmp_path)
    target = "results/paper/train/packing.jsonl"
    run = snakemake("-c1", target, "--configfile", str(config), cwd=tmp_path)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    (record,) = load_records(tmp_path / target)
    assert record["status"] == (
        "not run: the replay train-step benchmark runs on the smoke and tiny profiles "
        "(one process, `orl bench-replay`)"
    )
    assert record["kind"] == "train" and record["system"] == ROW[rows.PACKING].system


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--config", "profile=smoke", "colour=blue"], "colour"),
        (["--config", "profile=smoke", "eval_limit=many"], "eval_limit"),
        (
            ["--config", "profile=smoke", "extra_suites=[tinycode]"],
            "extra_suites: 'tinycode' is already in suites",
        ),
        (["--config", "profile=smoke", "suites=[tinycode-short]"], "suites"),
        (["--config", "profile=smoke", "device=gpu"], "device"),
        (
            ["--config", "profile=smoke", "ablations=[aec-nogate]"],
            "ablations: 'aec-nogate' is not an ablation",
        ),
        (["--config", "profile=smoke", "sweep_policy=greedy"], "unknown policy 'greedy'"),
        (
            ["--config", "profile=smoke", "table5_suites=[tinycode-long]"],
            "smoke.yaml: table5_suites: 'tinycode-long' is not one of this profile's suites",
        ),
    ],
)
def test_bad_config_stops_before_any_job(tmp_path, args, message):
    run = snakemake("-n", "reproduce_table2", *args, cwd=tmp_path)
    assert run.returncode != 0
    assert message in run.stdout + run.stderr
    assert not (tmp_path / "results").exists()


def test_the_paper_profile_trains_orl_under_torchrun_when_given_a_preset(tmp_path):
    """preset set on the paper profile: ORL and the configured ablations are trained from checkpoints.dlm,
    one torchrun process per GPU (train_gpus), each job requesting that many GPUs; nothing else is trained."""
    train = tmp_path / "train.yaml"
    train.write_text("orl: {train_file: /data/mbpp-train.jsonl}\n")
    config = paper_config(
        tmp_path,
        keys=("ar", "draft", "dlm"),
        preset="sdar-4b",
        train_gpus=4,
        seeds="[0, 1]",
        ablations="[no-aec]",
        train_config=str(train),
    )
    run = snakemake("-n", "-p", "reproduce_table5", "--configfile", str(config), cwd=tmp_path)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    jobs = planned_jobs(run.stdout)
    trainings = [job for job in jobs if job["rule"] in ("train_orl", "train_ablation")]
    assert sorted(job["rule"] for job in trainings) == ["train_ablation"] * 2 + ["train_orl"] * 2
    for job in trainings:
        assert (
            "-m torch.distributed.run --standalone --nproc-per-node 4 -m orl.cli train-orl" in job["command"]
        )
        assert f"--preset sdar-4b --config {train} --init {tmp_path / 'models' / 'dlm'}" in job["command"]
        assert "gpu=4" in job["resources"] and "--device cuda" in job["command"]
    assert not {"train_ar", "train_draft", "convert"} & {job["rule"] for job in jobs}
    # The tiny profile trains in one process (world size 1 of the same code).
    run = snakemake("-n", "-p", "reproduce_table5", "--config", "profile=tiny", cwd=tmp_path)
    tiny = [job for job in planned_jobs(run.stdout) if job["rule"] == "train_orl"]
    assert tiny and not any("torch.distributed.run" in job["command"] for job in tiny)


def test_absent_checkpoints_are_rows_that_say_where_they_looked(tmp_path):
    """The paper profile as shipped, on a machine without its models: no job runs a model, every table
    builds, and each row says `not run: checkpoint not found at <path>`."""
    run = snakemake("-n", "-p", "reproduce_all", "--config", "profile=paper", cwd=tmp_path)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    jobs = planned_jobs(run.stdout)
    assert not [job for job in jobs if orl_subcommand(job["command"]) in MODEL_COMMANDS]
    assert {"not_run", "render_table", "render_index"} <= {job["rule"] for job in jobs}
    paper = profile_config("paper")["checkpoints"]
    for target, path in (("results/paper/latency/humaneval/ar_hf.jsonl", paper["ar"]),
                         ("results/paper/quality/humaneval/op_dlm.jsonl", paper["dlm"]),
                         ("results/paper/engine/humaneval/bench.jsonl", paper["orl"])):  # fmt: skip
        assert snakemake("-c1", target, "--config", "profile=paper", cwd=tmp_path).returncode == 0
        (record,) = load_records(tmp_path / target)
        assert record["status"].startswith(f"not run: checkpoint not found at {path}"), record["status"]
    # With the AR target and ORL given but not the base dLLM, only the rows of the missing checkpoint stop.
    config = paper_config(tmp_path / "some", keys=("ar", "draft", "orl"))
    run = snakemake("-n", "-p", "reproduce_table2", "--configfile", str(config), cwd=tmp_path / "some")
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    swept = {re.search(r"--ckpt (\S+)", job["command"]).group(1) for job in planned_jobs(run.stdout)
             if job["rule"] == "sweep"}  # fmt: skip
    assert swept == {str(tmp_path / "some" / "models" / "orl")}


def test_an_edited_preset_section_reruns_only_the_stages_that_read_it():
    """The training rules carry their stage's preset digest as a param (workflows/rules/common.smk):
    an ORL setting changes the ORL stages' digest and leaves the AR, draft and conversion ones alone."""
    base, edited = load_preset("smoke"), load_preset("smoke", overrides={"orl": {"lr": 1.0e-5}})
    changed = {stage for stage, sections in STAGE_SECTIONS.items()
               if base.digest(*sections) != edited.digest(*sections)}  # fmt: skip
    assert changed == {"orl"}
    for draft in ("eagle3", "dflash"):
        head = load_preset("smoke", overrides={draft: {"steps": 9}})
        assert {stage for stage, sections in STAGE_SECTIONS.items()
                if base.digest(*sections) != head.digest(*sections)} == {draft}  # fmt: skip
    mixed = load_preset("smoke", overrides={"long_fraction": 0.5})
    assert all(base.digest(*sections) != mixed.digest(*sections) for sections in STAGE_SECTIONS.values())


@pytest.mark.parametrize("method", ["eagle3", "dflash"])
def test_the_eagle3_and_dflash_rows_train_their_drafts_only_where_vllm_runs(tmp_path, method):
    """With vLLM's environment (any executable stands in for it in a dry run) the EAGLE-3 / DFlash row's
    chain is planned: the AR target's head or drafter trained here (the preset's eagle3 / dflash section,
    with its digest), the k sweep, then the row served from the target's Qwen3 export and the draft as
    written. Without it nothing of that chain is planned: the row is a "not run" record."""
    target = f"results/smoke/latency/tinycode/ar_vllm_{method}.jsonl"
    vllm = f"vllm_python={sys.executable}"
    run = snakemake("-n", "-p", target, "--config", "profile=smoke", vllm, cwd=tmp_path)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    jobs = {job["rule"]: job for job in planned_jobs(run.stdout)}
    assert {"train_ar", f"train_{method}", "export_qwen3", "spec_sweep", "vllm_latency"} <= set(jobs)
    assert "train_draft" not in jobs and "not_run" not in jobs
    assert (
        f"train-{method} --preset smoke  --target results/smoke/ckpt/ar --out results/smoke/ckpt/{method} "
        in (jobs[f"train_{method}"]["command"])
    )
    for rule in ("spec_sweep", "vllm_latency"):
        assert f"{sys.executable} -m orl.cli" in jobs[rule]["command"]
        assert f"--method {method} --ckpt results/smoke/ckpt/ar-qwen3 " in jobs[rule]["command"]
        assert f"--draft results/smoke/ckpt/{method} " in jobs[rule]["command"]
    assert (
        f"--num-speculative-tokens @results/smoke/oppoint/tinycode/spec_ar_vllm_{method}.json"
        in (jobs["vllm_latency"]["command"])
    )
    run = snakemake("-n", "-p", target, "--config", "profile=smoke", "vllm_python=", cwd=tmp_path)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    assert {job["rule"] for job in planned_jobs(run.stdout)} == {"not_run"}


@pytest.mark.slow
def test_smoke_profile_reproduces_everything(tmp_path):
    # About 3 minutes on two idle cores, 5-7 in the suite (34 jobs, most of them seconds of work after
    # startup).
    # Without vLLM's environment (vllm_python ""), whether or not this checkout has built it: CI keeps it
    # optional.
    run = snakemake(
        "-c2",
        "reproduce_all",
        "gate",
        "--config",
        "profile=smoke",
        "vllm_python=",
        cwd=tmp_path,
        timeout=1800,
    )
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    reports = tmp_path / "reports" / "smoke"
    for n in range(1, 6):
        for ext in ("md", "tex", "csv"):
            assert (reports / f"table{n}.{ext}").is_file() and (reports / f"table3b.{ext}").is_file()
        with open(reports / f"table{n}.csv", newline="") as handle:
            lines = list(csv.DictReader(handle))
        assert lines, f"table {n} has no rows"
        for row in lines:
            assert row["status"] == "measured" or row["status"].startswith("not run: "), row
    for fig in ("accuracy_vs_tpf", "tokens_per_s", "entropy_per_step", "speedup_vs_length", "floor"):
        for ext in ("png", "pdf"):
            assert (reports / "figures" / f"{fig}.{ext}").stat().st_size > 0
    assert (reports / "index.md").is_file()
    # Measured rows exist where this machine can measure them: the CPU rows of Table 2.
    with open(reports / "table2.csv", newline="") as handle:
        table2 = {row["system"]: row for row in csv.DictReader(handle)}
    assert table2["dLLM + ORL"]["status"] == "measured" and table2["AR (hf)"]["status"] == "measured"
    assert table2["AR + EAGLE3 (vLLM)"]["status"].startswith("not run: ")
    assert table2["AR + draft (vLLM)"]["status"] == "not run: vLLM environment missing (make vllm-env)"
    assert (
        table2["AR + draft (vLLM)"]["verification"] == "strict" and table2["AR (vLLM)"]["verification"] == ""
    )
    # Every pass@1 and TPF of a measured line has its interval; Table 5's lines are over both seeds.
    assert (
        table2["dLLM + ORL"]["pass_at_1_lo"]
        and table2["dLLM + ORL"]["tpf_hi"]
        and table2["dLLM + ORL"]["matched"]
    )
    with open(reports / "table5.csv", newline="") as handle:
        table5 = [row for row in csv.DictReader(handle) if row["status"] == "measured"]
    assert {row["system"] for row in table5} == {"dLLM + ORL"}  # the smoke profile trains no ablation
    assert all(row["seeds"] == "2" and row["pass_at_1_sd"] != "" for row in table5)
    assert all(
        row["gated_share"] != "" and row["aec_active_share"] != "" and row["retained_fraction"] != ""
        for row in table5
    )
    assert (tmp_path / "results" / "smoke" / "engine" / "length" / "64.jsonl").is_file()
    # Operating points were chosen on dev (against the AR target's dev pass@1), the grid extended below
    # its lowest τ where that matched, and the chosen point measured on test.
    smoke = tmp_path / "results" / "smoke"
    (reference,) = load_records(smoke / "quality" / "tinycode" / "dev" / "row_ar_hf.jsonl")
    point = json.loads((smoke / "oppoint" / "tinycode" / "orl_seed0.json").read_text())
    (chosen,) = load_records(smoke / "quality" / "tinycode" / "op_orl_seed0.jsonl")
    assert reference["split"] == "dev" and point["grid"][0] == 0.3 and chosen["split"] == "test"
    assert chosen["policy"] == {"name": "threshold", "params": {"tau": point["tau"]}}
    # Table 2's rows are timed in one sitting (config latency_sitting), which scores what it decoded.
    (timed,) = load_records(smoke / "latency" / "tinycode" / "orl_seed0.jsonl")
    sitting = timed["extra"]["sitting"]["id"]
    assert chosen["extra"]["completions_from"] == f"the timed requests of the sitting {sitting}"
    assert "chosen on each suite's dev split" in (reports / "table2.md").read_text()
    # Every aup record carries d3LLM's AUP, its y_max (percent) and the sweep points it came from.
    aups = [
        r
        for path in (tmp_path / "results" / "smoke" / "sweep").rglob("*.jsonl")
        for r in load_records(path)
        if r["kind"] == "aup"
    ]
    assert aups and all(r["metrics"]["y_max"] is not None and r["extra"]["points"] for r in aups)
    # The gate file holds this run's latency and engine records and its reference timing.
    gate = tmp_path / "results" / "gate" / "smoke.jsonl"
    assert {r["kind"] for r in load_records(gate)} == set(rows.GATE_KINDS)
    regress = subprocess.run(
        [sys.executable, "-m", "orl.cli", "regress", "--baseline", str(gate), "--current", str(gate)],
        capture_output=True,
        text=True,
    )
    assert regress.returncode == 0 and "reference timing 'reference timing'" in regress.stdout, regress.stdout
    # A second run has nothing left to do.
    again = snakemake(
        "-c2", "-n", "reproduce_all", "gate", "--config", "profile=smoke", "vllm_python=", cwd=tmp_path
    )
    assert "Nothing to be done" in again.stdout + again.stderr
    # An edited preset is a changed param of the training jobs, so they (and what reads them) are planned.
    edited = tmp_path / "orl-lr.yaml"
    edited.write_text("orl: {lr: 1.0e-5}\n")
    changed = snakemake(
        "-n",
        "reproduce_all",
        "--config",
        "profile=smoke",
        f"train_config={edited}",
        "vllm_python=",
        cwd=tmp_path,
    )
    assert "train_orl" in {job["rule"] for job in planned_jobs(changed.stdout)}
    assert "Params have changed" in changed.stdout, changed.stdout[-3000:]


@pytest.mark.skipif(not (REPO / ".git").exists(), reason="needs the repository's git history (a clone of it)")
def test_a_fresh_clone_plans_nothing_and_force_plans_the_orl_stage(tmp_path):
    """`make reproduce` in a fresh clone only checks the committed records: the checkout writes them one
    after another, and `make clone-times` gives them one time before the DAG's first run there.

    `make reproduce FORCE=1` then makes the base checkpoints (copies of results/tiny/base, settled to its
    age) and plans ORL's trainings and everything downstream of them; what the base alone decides (the AR
    target's dev pass@1, the base dLLM's dev sweeps, the relaxed rows' δ points) keeps its records."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True, timeout=300)
    subprocess.run(["make", "-s", "clone-times"], cwd=clone, check=True, timeout=120)
    planned = subprocess.run(
        [sys.executable, "-m", "snakemake", "-c2", "-n", "reproduce_all", "--config", "profile=tiny"],
        cwd=clone,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert planned.returncode == 0, planned.stderr[-3000:]
    assert "Nothing to be done" in planned.stdout + planned.stderr, (planned.stdout + planned.stderr)[-3000:]

    made = snakemake("-c2", "base_checkpoints", "--config", "profile=tiny", cwd=clone)
    assert made.returncode == 0, made.stderr[-3000:]
    assert "as old as it: ar, dlm, draft" in made.stdout + made.stderr
    venv = Path(sys.prefix)  # the test's environment stands in for the Makefile's .venv: nothing installed
    dry = f"SNAKEMAKE={venv}/bin/python -m snakemake -c2 -n -p"
    force = subprocess.run(
        ["make", "-s", "-o", f"{venv}/.installed", "reproduce", "FORCE=1", f"VENV={venv}", dry],
        cwd=clone,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert force.returncode == 0, (force.stdout + force.stderr)[-3000:]
    forced = re.search(r"reproduce_table2 --forcerun ([\w ]+?) --config", force.stdout)
    assert forced and set(forced.group(1).split()) == {"train_orl", "train_ablation"}, force.stdout[:3000]
    jobs = planned_jobs(force.stdout)
    rules = [job["rule"] for job in jobs]
    assert rules.count("train_orl") == 3 and rules.count("latency_sitting") == 2, rules
    assert not {"take_base", "reference_quality", "relaxed_points"} & set(rules), rules
    swept = [job["output"][0] for job in jobs if job["rule"] == "sweep"]
    assert swept and all("/orl_seed" in path for path in swept), swept
    assert rules.count("relaxed_sweep") == 4  # the δ choice against ORL's accuracy: it descends from ORL


def test_rows_of_latency_sitting_are_timed_in_one_sitting_per_suite(tmp_path):
    """config latency_sitting: one `orl bench-sitting` job per suite writes those rows' latency records (each
    row's own bench-latency flags); rule latency times the others. A vLLM row takes the sitting into vLLM's
    environment. The sitting scores the completions it timed as those rows' test pass@1 (no separate
    quality_row / point_quality decode of them). An unknown row stops the run before any job, naming the
    key."""
    vllm = f"vllm_python={sys.executable}"
    sitting = "latency_sitting=[ar_compiled,ar_vllm,dlm,orl]"
    quality = "results/smoke/quality/tinycode"
    latency = "results/smoke/latency/tinycode"
    targets = [f"{latency}/dlm.jsonl", f"{latency}/ar_hf.jsonl", f"{quality}/op_dlm.jsonl",
               f"{quality}/row_ar_hf.jsonl", f"{quality}/row_ar_vllm.jsonl"]  # fmt: skip
    run = snakemake("-n", "-p", *targets, "--config", "profile=smoke", vllm, sitting, cwd=tmp_path)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    jobs = planned_jobs(run.stdout)
    (together,) = [job for job in jobs if job["rule"] == "latency_sitting"]
    timed = {path.rsplit("/", 1)[1] for path in together["output"] if "/latency/" in path}
    scored = {path.rsplit("/", 1)[1] for path in together["output"] if "/quality/" in path}
    assert timed == {"ar_compiled.jsonl", "ar_vllm.jsonl", "dlm.jsonl", "orl_seed0.jsonl", "orl_seed1.jsonl"}
    assert scored == {"row_ar_compiled.jsonl", "row_ar_vllm.jsonl", "op_dlm.jsonl", "op_orl_seed0.jsonl",
                      "op_orl_seed1.jsonl"}  # fmt: skip
    assert f"{sys.executable} -m orl.cli bench-sitting" in together["command"]
    assert together["command"].count("--row ") == len(timed)
    assert together["command"].count("--quality-out ") == len(scored)
    assert f"--quality-out {quality}/op_dlm.jsonl" in together["command"]
    assert "--engine vllm --method ar --ckpt results/smoke/ckpt/ar-qwen3" in together["command"]
    alone = [job for job in jobs if job["rule"] == "latency"]
    assert [job["output"] for job in alone] == [[f"{latency}/ar_hf.jsonl"]]
    decoded_again = [job["output"] for job in jobs if job["rule"] in ("quality_row", "point_quality")]
    assert decoded_again == [[f"{quality}/row_ar_hf.jsonl"]]
    run = snakemake("-n", *targets, "--config", "profile=smoke", "latency_sitting=[ar_fast]", cwd=tmp_path)
    assert run.returncode != 0 and "config latency_sitting: ar_fast not a row" in run.stdout + run.stderr
