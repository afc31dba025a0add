"""The Slurm profile against a real Slurm: the smoke DAG submitted job by job through `sbatch`.

A throwaway single-node cluster (tests/slurm_cluster.py) runs `reproduce_all` of the smoke profile through
workflows/profiles/slurm, scaled to this machine by tests/slurm_local.yaml. One decoding job is cancelled
mid-run with `scancel`; the profile's `retries` must rerun it. The tables must equal a local run's.
Deselected by default (pyproject: -m 'not slurm'); `make slurm-check` runs it (30 minutes on two
shared cores: the local run, 12 minutes, then the Slurm one, 18).
"""

from __future__ import annotations

import csv
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from .slurm_cluster import SlurmCluster, SlurmUnavailable

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile")]
# cpu_linear=aten in both runs: `auto` picks aten or oneDNN by timing them, which may differ between the
# runs and, through rounding, the trained models (the two paths agree to 1e-4, not bit for bit).
SMOKE = ["reproduce_all", "--config", "profile=smoke", "vllm_python=", "cpu_linear=aten"]
# Target rules with no command run inside snakemake itself, never as a Slurm job.
TARGET_RULES = {"reproduce_all"}
# The job cancelled mid-run is a decoding one: it reruns from scratch, so the retry gives the same records
# (a cancelled training resumes from its checkpoint, which need not be bit-identical to an uninterrupted run).
CANCEL_RULES = ("sweep", "latency_sitting", "bench_engine", "entropy_profile")
# The table columns that do not depend on the clock: what ran, on which problems, pass@1, TPF, AUP and
# their intervals and per-seed values. Timings (tokens/s, latency, speedups, wall, memory) differ per run.
SAME_COLUMNS = re.compile(
    r"(system|engine|suite|setup|model|variant|arch|block|precision|device|seeds|n_problems"
    r"|operating_point|matched|same_tpf|status|tpf(_.*)?|pass_at_1(_.*)?|aup(_.*)?)"
)
# Where the plugin writes a job's log (README, "On a Slurm cluster"): kept when the job fails.
SLURM_LOG = ".snakemake/slurm_logs/rule_{rule}/{wildcards}/{jobid}.log"


@pytest.fixture
def cluster(tmp_path):
    cluster = SlurmCluster(tmp_path / "slurm")
    try:
        cluster.start()
    except SlurmUnavailable as error:
        pytest.skip(f"Slurm cannot start here: {error}")
    yield cluster
    pids = cluster.pids()
    left = cluster.stop()
    assert not left, f"daemons still running after stop: {[(name, pids[name]) for name in left]}"


def scaled_profile(folder: Path) -> Path:
    """workflows/profiles/slurm with tests/slurm_local.yaml over it: a workflow profile folder of its own."""
    profile = yaml.safe_load((REPO / "workflows" / "profiles" / "slurm" / "config.yaml").read_text())
    local = yaml.safe_load((REPO / "tests" / "slurm_local.yaml").read_text())
    profile["default-resources"].update(local.pop("default-resources", {}))
    profile.update(local)
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(profile, sort_keys=False))
    return folder


def seconds(elapsed: str) -> int:
    """squeue's %M ([days-]hours:minutes:seconds, shortest form) in seconds."""
    days, _, clock = elapsed.rpartition("-")
    total = 0
    for part in clock.split(":"):
        total = total * 60 + int(part)
    return total + int(days or 0) * 86400


def rule_of(comment: str) -> str:
    """The rule of a job from the comment the plugin gives it: rule_<name>[_wildcards_<values>]."""
    return comment.removeprefix("rule_").split("_wildcards_")[0]


def run_through_slurm(cluster: SlurmCluster, workdir: Path, profile: Path, log: Path, timeout: float = 3600):
    """Runs the smoke DAG through the profile, cancelling the first decoding job seen running for 5 s.

    Returns (exit code, wall seconds, (slurm job id, comment) of the cancelled job or None).
    """
    cancelled = None
    start = time.monotonic()
    with open(log, "w") as out:
        dag = subprocess.Popen(
            [*SNAKEMAKE, "--workflow-profile", str(profile), *SMOKE],
            cwd=workdir,
            env=cluster.env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            while dag.poll() is None:
                if time.monotonic() - start > timeout:
                    raise TimeoutError(f"the Slurm run took over {timeout} s (log: {log})")
                if cancelled is None:
                    running = cluster.run("squeue", "-h", "-t", "RUNNING", "-o", "%i|%k|%M").stdout.split()
                    for line in running:
                        jobid, comment, elapsed = line.split("|")
                        if rule_of(comment) in CANCEL_RULES and seconds(elapsed) >= 5:
                            assert cluster.run("scancel", jobid).returncode == 0
                            cancelled = (jobid, comment)
                            break
                time.sleep(2)
        finally:
            if dag.poll() is None:
                dag.kill()
                dag.wait()
    return dag.returncode, time.monotonic() - start, cancelled


def same_columns(reports: Path) -> dict[str, list[dict]]:
    tables = {}
    for path in sorted(reports.glob("*.csv")):
        with open(path, newline="") as handle:
            tables[path.name] = [{key: value for key, value in row.items() if SAME_COLUMNS.fullmatch(key)}
                                 for row in csv.DictReader(handle)]  # fmt: skip
    return tables


def test_the_smoke_dag_runs_through_slurm_as_it_runs_locally(cluster, tmp_path, capsys):
    # The local run first: the tables to compare with, and the wall time to compare against.
    local = tmp_path / "local"
    local.mkdir()
    start = time.monotonic()
    run = subprocess.run([*SNAKEMAKE, "-c2", *SMOKE], cwd=local, capture_output=True, text=True, timeout=3600)
    local_wall = time.monotonic() - start
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]

    work = tmp_path / "slurm-run"
    work.mkdir()
    profile = scaled_profile(tmp_path / "profile")
    plan = subprocess.run(
        [*SNAKEMAKE, "--workflow-profile", str(profile), "-n", *SMOKE],
        cwd=work,
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert plan.returncode == 0, (plan.stdout + plan.stderr)[-4000:]
    planned = Counter(re.findall(r"^rule (\w+):", plan.stdout, re.MULTILINE))
    for rule in TARGET_RULES:
        del planned[rule]

    log = tmp_path / "slurm-run.log"
    code, slurm_wall, cancelled = run_through_slurm(cluster, work, profile, log)
    text = log.read_text()
    assert code == 0, text[-6000:]
    assert cancelled, f"no {CANCEL_RULES} job was seen running for 5 s to cancel:\n{text[-3000:]}"

    # Every job went through sbatch: Slurm lists one completed job per planned job (squeue keeps finished
    # jobs for MinJobAge), the cancelled one besides, each in the partition the profile names for its rule.
    listed = cluster.run("squeue", "-h", "--states=all", "-o", "%i|%k|%T|%P").stdout.split()
    jobs = [
        dict(zip(("id", "comment", "state", "partition"), line.split("|"), strict=True)) for line in listed
    ]
    completed = Counter(rule_of(job["comment"]) for job in jobs if job["state"] == "COMPLETED")
    assert completed == planned, (completed, planned)
    assert sorted(job["state"] for job in jobs if job["state"] != "COMPLETED") == ["CANCELLED"], jobs
    finished = {record["JobId"]: record["JobState"] for record in cluster.finished_jobs()}
    assert finished == {job["id"]: job["state"] for job in jobs}, "the jobcomp log and squeue disagree"
    partitions = yaml.safe_load((profile / "config.yaml").read_text())["set-resources"]
    for job in jobs:
        want = partitions.get(rule_of(job["comment"]), {}).get("slurm_partition", "cpu")
        assert job["partition"] == want, job

    # The cancelled job was rerun by the profile's `retries` and its log is where the README says.
    jobid, comment = cancelled
    assert [job["state"] for job in jobs if job["comment"] == comment] == ["CANCELLED", "COMPLETED"]
    rule = rule_of(comment)
    wildcards = comment.partition("_wildcards_")[2]
    failed_log = work / SLURM_LOG.format(rule=rule, wildcards=wildcards, jobid=jobid)
    assert failed_log.is_file() and "CANCELLED" in failed_log.read_text(), failed_log
    assert SLURM_LOG.replace("{", "<").replace("}", ">") in (REPO / "README.md").read_text()

    # The same tables as the local run, but for the clock.
    local_tables = same_columns(local / "reports" / "smoke")
    assert local_tables and same_columns(work / "reports" / "smoke") == local_tables
    with capsys.disabled():
        print(
            f"\nsmoke reproduce_all: local -c2 {local_wall:.0f} s, through Slurm {slurm_wall:.0f} s "
            f"({sum(planned.values())} jobs; cancelled {rule} job {jobid}, retried)"
        )
