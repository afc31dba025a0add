"""The environment block of a record: hardware, software versions, git state, config hash, date.

Read once per process (git and CUDA queries cost tens of milliseconds and a sweep writes
many records); only the config hash and the date are computed per record.
"""

from __future__ import annotations

import datetime as _dt
import functools
import hashlib
import importlib.metadata
import json
import os
import platform
import socket
import subprocess
from pathlib import Path

# Keys of the environment block, always present (unknown values are None).
ENV_KEYS = (
    "cpu_model", "cpu_capability", "cpu_count", "gpu_name", "gpu_driver", "cuda", "torch", "triton",
    "transformers", "vllm", "sglang", "python", "platform", "hostname", "git_sha", "git_dirty",
    "config_hash", "date",
)  # fmt: skip

# Distributions whose versions the environment block records. Read from package
# metadata only: importing vllm or sglang would initialise CUDA and take seconds.
_VERSIONED_PACKAGES = ("torch", "triton", "transformers", "vllm", "sglang")


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Processor", "cpu model") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or None


def _cpu_capability() -> str | None:
    """The instruction set torch's CPU kernels dispatch to ("AVX2", "AVX512", ...). Training on the CPU
    is bit-exact only on one path: the same command gave checkpoints differing from the first step on
    the Xeon the committed tiny records ran on and an AVX2 EPYC, so a record says which path it took."""
    try:
        import torch
    except ImportError:
        return None
    return torch.backends.cpu.get_cpu_capability()


def _package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _git(*args: str) -> str | None:
    repo = Path(__file__).resolve().parent.parent
    try:
        proc = subprocess.run(
            ["git", *args], cwd=repo, capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def _git_state() -> tuple[str | None, bool | None]:
    """(HEAD sha, whether the tree has uncommitted changes); (None, None) outside a repo."""
    sha = _git("rev-parse", "HEAD")
    if sha is None:
        return None, None
    status = _git("status", "--porcelain", "--untracked-files=no")
    return sha.strip(), (None if status is None else bool(status.strip()))


def _nvidia_driver() -> str | None:
    # /proc is cheaper than nvidia-smi and present wherever the kernel module is loaded.
    try:
        text = Path("/proc/driver/nvidia/version").read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    for word in text.split():
        parts = word.split(".")
        if len(parts) >= 2 and all(p.isdigit() for p in parts):
            return word
    try:
        proc = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=False,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    lines = proc.stdout.strip().splitlines()
    return lines[0].strip() if proc.returncode == 0 and lines else None


def _gpu() -> tuple[str | None, str | None, str | None]:
    """(GPU name, driver version, CUDA version) when torch sees a CUDA device."""
    try:
        import torch
    except ImportError:
        return None, None, None
    if not torch.cuda.is_available():
        return None, None, None
    return torch.cuda.get_device_name(0), _nvidia_driver(), torch.version.cuda


def config_hash(config: dict | None) -> str | None:
    """sha256 of the config as canonical JSON (sorted keys, no whitespace); None for no config."""
    if config is None:
        return None
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


@functools.lru_cache(maxsize=1)
def _static_environment() -> dict:
    # Everything that cannot change during one process; cached because git and
    # CUDA queries cost tens of milliseconds and a sweep writes many records.
    gpu_name, gpu_driver, cuda = _gpu()
    git_sha, git_dirty = _git_state()
    env = {
        "cpu_model": _cpu_model(),
        "cpu_capability": _cpu_capability(),
        "cpu_count": os.cpu_count(),
        "gpu_name": gpu_name,
        "gpu_driver": gpu_driver,
        "cuda": cuda,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "hostname": socket.gethostname() or None,
        "git_sha": git_sha,
        "git_dirty": git_dirty,
    }
    env.update({name: _package_version(name) for name in _VERSIONED_PACKAGES})
    return env


def capture_environment(config: dict | None = None) -> dict:
    """The environment block of a record: hardware, software versions, git state, config hash, date."""
    env = dict(_static_environment())
    env["config_hash"] = config_hash(config)
    env["date"] = _dt.datetime.now(_dt.timezone.utc).date().isoformat()
    return {key: env.get(key) for key in ENV_KEYS}
