"""Hardware submissions: check a contributor's record file and file it for Table 4.

`orl submit RESULTS.jsonl` accepts a file only when every record
    - fits the record schema (orl.records: the error names the line and the field);
    - carries a complete environment block: env.gpu_name, env.torch and env.git_sha
      present and non-null (Table 4 shows the submitter's hardware and software);
    - has status "measured" and plausible values: TPF >= 1, latencies > 0,
      pass@k in [0, 1], tokens/s > 0;
and the file as a whole comes from one GPU and one commit, and holds at least one
measured "latency" record with tokens_per_s (what Table 4 shows).

It is then filed as results/hardware/<gpu-slug>/<date>-<sha>.jsonl, where the slug is
the GPU name (prefixed with the GPU count when extra.gpu_count > 1), the date the
run's env.date and the sha the first 12 digits of env.git_sha. An existing file is
never overwritten, and on any failure nothing is written.
"""

from __future__ import annotations

import re
from pathlib import Path

from orl.errors import InputError
from orl.io import REPO_ROOT
from orl.records.schema import gpu_count
from orl.records.store import load_records, write_records

DEFAULT_HARDWARE_ROOT = REPO_ROOT / "results" / "hardware"
MAX_LISTED = 8  # problems listed in one error message


def gpu_slug(gpu_name: str, count: int = 1) -> str:
    """'NVIDIA GeForce RTX 5090' -> 'nvidia-geforce-rtx-5090'; 8 B200s -> '8x-nvidia-b200'."""
    slug = re.sub(r"[^a-z0-9]+", "-", gpu_name.lower()).strip("-")
    return f"{count}x-{slug}" if count > 1 else slug


def _line_numbers(path: Path) -> list[int]:
    """1-based line numbers of the non-blank lines, in the order load_records returns them."""
    return [i + 1 for i, raw in enumerate(path.read_bytes().split(b"\n")) if raw.strip()]


def record_problems(record: dict) -> list[str]:
    """What makes one (schema-valid) record unfit for Table 4, as 'field: problem' strings."""
    problems = []
    env = record["env"]
    for field in ("gpu_name", "torch", "git_sha"):
        if not env.get(field):
            problems.append(f"env.{field}: missing (the environment block must name it)")
    if record["status"] != "measured":
        problems.append(f"status: {record['status']!r}: submit measured records only")
    metrics = record["metrics"]
    for name, value in metrics.items():
        if value is None:
            continue
        if name == "tpf" and value < 1:
            problems.append(f"metrics.tpf: {value} is below 1 (a forward yields at least one token)")
        elif name.startswith("latency_") and value <= 0:
            problems.append(f"metrics.{name}: {value} is not a positive time")
        elif re.fullmatch(r"pass_at_\d+", name) and not 0 <= value <= 1:
            problems.append(f"metrics.{name}: {value} is not in [0, 1]")
        elif name in ("tokens_per_s", "peak_tokens_per_s") and value <= 0:
            problems.append(f"metrics.{name}: {value} is not positive")
    return problems


def check_submission(path: str | Path) -> list[dict]:
    """The file's records if they may be filed; otherwise InputError listing the problems."""
    path = Path(path)
    records = load_records(path)  # schema; names file, line and field
    if not records:
        raise InputError(f"{path}: no records to submit")
    problems = []
    for line, record in zip(_line_numbers(path), records, strict=True):
        problems += [f"line {line}: {problem}" for problem in record_problems(record)]
    gpus = sorted({(r["env"]["gpu_name"] or "", gpu_count(r)) for r in records})
    if len(gpus) > 1:
        problems.append(f"records from {len(gpus)} different GPUs ({', '.join(g for g, _ in gpus)}): submit one file per GPU")
    shas = sorted({r["env"]["git_sha"] or "" for r in records})
    if len(shas) > 1:
        problems.append(f"records from {len(shas)} commits: submit one file per run")
    if not any(r["kind"] == "latency" and r["metrics"].get("tokens_per_s") for r in records):
        problems.append("no measured 'latency' record with metrics.tokens_per_s (Table 4 shows tokens/s)")
    if problems:
        listed = "; ".join(problems[:MAX_LISTED])
        more = f"; and {len(problems) - MAX_LISTED} more" if len(problems) > MAX_LISTED else ""
        raise InputError(f"{path}: not submitted, nothing written: {listed}{more}")
    return records


def submission_path(records: list[dict], root: str | Path) -> Path:
    first = records[0]
    dates = [r["env"]["date"] or r["created"][:10] for r in records]
    sha = first["env"]["git_sha"][:12]
    return Path(root) / gpu_slug(first["env"]["gpu_name"], gpu_count(first)) / f"{max(dates)}-{sha}.jsonl"


def submit(path: str | Path, root: str | Path = DEFAULT_HARDWARE_ROOT) -> Path:
    """Check `path` and file it under `root`; returns where it was filed."""
    records = check_submission(path)
    target = submission_path(records, root)
    if target.exists():
        raise InputError(
            f"{path}: not submitted, nothing written: {target} already exists "
            "(submissions are never overwritten; a new run has a new date or commit)"
        )
    write_records(target, records)
    return target
