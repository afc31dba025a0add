"""A throwaway single-node Slurm on this machine, for tests/test_slurm.py.

munged, slurmctld and slurmd run in the foreground as children of this process, each with its key,
socket, state, spool, pid and log files in one temporary folder, on ports nobody else holds: nothing of
the machine's own Slurm or munge setup (if any) is read or changed. `SlurmCluster.start()` raises
`SlurmUnavailable` with the reason when a piece is missing, so the test can skip with it; `stop()`
ends every daemon it started, by pid, and says which one did not go.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "sinfo", "scancel", "srun", "scontrol", "sacct")


class SlurmUnavailable(RuntimeError):
    """Slurm cannot start here (a binary missing, no munge key, a daemon that does not come up)."""


def _binary(name: str) -> str:
    # The daemons live in /usr/sbin, which a non-login PATH may lack.
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")
    if not found:
        raise SlurmUnavailable(f"{name} not found (apt-get install slurm-wlm munge)")
    return found


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _memory_mb() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20


@dataclass
class SlurmCluster:
    """One node (this host) with a `cpu` and a `gpu` partition; the gpu one has no GPUs (a name only)."""

    root: Path
    cpus: int = field(default_factory=lambda: os.cpu_count() or 1)
    # Below the machine's memory: slurmd drains a node whose configured RealMemory exceeds what it finds.
    memory_mb: int = field(default_factory=lambda: max(1024, _memory_mb() * 3 // 4))
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def jobcomp(self) -> Path:
        """One line per finished job (jobcomp/filetxt): the record of what went through sbatch."""
        return self.root / "jobcomp.txt"

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def env(self) -> dict[str, str]:
        """The environment for Slurm's clients (and so for snakemake and its jobs) to find this cluster."""
        path = os.environ.get("PATH", "")
        return {**os.environ, "SLURM_CONF": str(self.conf), "PATH": f"{self.bin}:{path}:/usr/sbin:/sbin"}

    def _write_clients(self) -> None:
        """Each client as a two-line script that names this cluster's slurm.conf, first in PATH.

        A real cluster's clients find /etc/slurm/slurm.conf; this one's conf is in a temporary folder,
        which SLURM_CONF names, but the jobstep plugin (0.6.1) drops every SLURM_* variable before the
        job's nested `srun`, which then finds no configuration. The scripts carry it across.
        """
        self.bin.mkdir(exist_ok=True)
        for name in CLIENTS:
            script = self.bin / name
            script.write_text(f'#!/bin/sh\nSLURM_CONF={self.conf} exec {_binary(name)} "$@"\n')
            script.chmod(0o755)

    def start(self, timeout: float = 60) -> SlurmCluster:
        for name in (*DAEMONS, *CLIENTS):
            _binary(name)
        self.root.mkdir(parents=True, exist_ok=True)
        # munged refuses a folder others may write to, and its key must be the user's alone.
        self.root.chmod(0o700)
        try:
            self._start_munge(timeout)
            self._write_conf()
            self._write_clients()
            for daemon in ("slurmctld", "slurmd"):
                self._spawn(
                    daemon,
                    [_binary(daemon), "-D", "-f", str(self.conf)]
                    + (["-N", self.hostname] if daemon == "slurmd" else []),
                )
            self._wait_idle(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    @property
    def hostname(self) -> str:
        # slurmd knows itself by its short host name; the node is declared under it.
        return socket.gethostname().split(".")[0]

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.root / f"{name}.out", "wb")  # the child keeps its own copy of the descriptor
        self.processes[name] = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True
        )
        log.close()

    def _start_munge(self, timeout: float) -> None:
        key = self.root / "munge.key"
        try:
            key.write_bytes(os.urandom(1024))
            key.chmod(0o400)
        except OSError as error:
            raise SlurmUnavailable(f"cannot create a munge key in {self.root}: {error}") from error
        (self.root / "munge").mkdir(mode=0o700, exist_ok=True)
        self._spawn(
            "munged",
            [
                _binary("munged"),
                "--foreground",
                "--force",
                f"--key-file={key}",
                f"--socket={self.munge_socket}",
                f"--pid-file={self.root / 'munged.pid'}",
                f"--log-file={self.root / 'munged.log'}",
                f"--seed-file={self.root / 'munge.seed'}",
            ],
        )
        self._wait(lambda: self.munge_socket.exists(), timeout, "munged")

    @property
    def munge_socket(self) -> Path:
        return self.root / "munge" / "munge.socket"

    def _write_conf(self) -> None:
        root, host = self.root, self.hostname
        (root / "state").mkdir(exist_ok=True)
        (root / "spool").mkdir(exist_ok=True)
        node = (
            f"NodeName={host} NodeHostname={host} NodeAddr=127.0.0.1 CPUs={self.cpus} "
            f"RealMemory={self.memory_mb}"
        )
        lines = [
            "ClusterName=orltest",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port()}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={root / 'state'}",
            f"SlurmdSpoolDir={root / 'spool'}",
            f"SlurmctldPidFile={root / 'slurmctld.pid'}",
            f"SlurmdPidFile={root / 'slurmd.pid'}",
            f"SlurmctldLogFile={root / 'slurmctld.log'}",
            f"SlurmdLogFile={root / 'slurmd.log'}",
            # No cgroups in a container: processes tracked by their parent, no task binding.
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            # No slurmdbd, so sacct has nothing to read: finished jobs stay in squeue for an hour
            # (MinJobAge), which is where the executor plugin looks (status_command: squeue), and
            # every finished job is written to the jobcomp file.
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/filetxt",
            f"JobCompLoc={self.jobcomp}",
            "MinJobAge=3600",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU_Memory",
            "MpiDefault=none",
            "ReturnToService=2",
            "SchedulerType=sched/backfill",
            "SlurmdParameters=config_overrides",
            "SlurmctldTimeout=30",
            "SlurmdTimeout=60",
            node,
            f"PartitionName=cpu Nodes={host} Default=YES MaxTime=INFINITE State=UP",
            f"PartitionName=gpu Nodes={host} MaxTime=INFINITE State=UP",
        ]
        self.conf.write_text("\n".join(lines) + "\n")

    def _wait(self, ready, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise SlurmUnavailable(f"{name} exited with {process.returncode}: {self._tail(name)}")
            if ready():
                return
            time.sleep(0.5)
        raise SlurmUnavailable(f"{what} not ready after {timeout:.0f} s: {self._tail(what)}")

    def _tail(self, name: str) -> str:
        text = ""
        for path in (self.root / f"{name}.out", self.root / f"{name}.log"):
            if path.exists():
                text += path.read_text(errors="replace")[-1500:]
        return text.strip()

    def _wait_idle(self, timeout: float) -> None:
        def idle() -> bool:
            run = subprocess.run(
                ["sinfo", "-h", "-N", "-o", "%t"], capture_output=True, text=True, env=self.env, timeout=30
            )
            return run.returncode == 0 and run.stdout.split() and all(s == "idle" for s in run.stdout.split())

        self._wait(idle, timeout, "slurmd")

    def sinfo(self) -> str:
        return self.run("sinfo").stdout

    def run(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
        """A Slurm client command against this cluster."""
        return subprocess.run(argv, capture_output=True, text=True, env=self.env, timeout=timeout)

    def finished_jobs(self) -> list[dict[str, str]]:
        """The jobcomp records: JobId, JobName, JobState, Partition, ... one dict per finished job."""
        if not self.jobcomp.exists():
            return []
        records = []
        for line in self.jobcomp.read_text().splitlines():
            record = {}
            for word in line.split():
                key, _, value = word.partition("=")
                record[key] = value
            if record:
                records.append(record)
        return records

    def stop(self, timeout: float = 30) -> list[str]:
        """Ends every daemon this cluster started (slurmd first, munged last); returns those still alive."""
        # Jobs first: a job's slurmstepd outlives a killed slurmd, so none may be running when it goes.
        if self.processes.get("slurmctld") and self.processes["slurmctld"].poll() is None:
            self.run("scancel", "--full", "--user", str(os.getuid()), timeout=30)
            deadline = time.monotonic() + timeout
            while (
                time.monotonic() < deadline
                and self.run("squeue", "-h", "-t", "RUNNING,COMPLETING").stdout.strip()
            ):
                time.sleep(0.5)
        for name in reversed(DAEMONS):
            process = self.processes.get(name)
            if process is None or process.poll() is not None:
                continue
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=timeout)
        return [name for name, process in self.processes.items() if process.poll() is None]

    def pids(self) -> dict[str, int]:
        return {name: process.pid for name, process in self.processes.items()}
