"""Hardware submissions: check a contributor's record file and file it for Table 4.

`orl submit RESULTS.jsonl` accepts a file only when every record
    - fits the record schema (orl.records: the error names the line and the field);
    - carries a complete environment block: env.gpu_name, env.torch and env.git_sha
      present and non-null (Table 4 shows the submitter's hardware and software);
    - has status "measured" and plausible values: TPF by orl.records.rules, latencies in
      (0, MAX_LATENCY_S], pass@k in [0, 1], tokens/s in (0, MAX_TOKENS_PER_S];
    - has a real calendar date (env.date, else the date of `created`) between
      EARLIEST_DATE and tomorrow;
and the file as a whole comes from one GPU and one commit, and holds at least one
measured "latency" record with tokens_per_s (what Table 4 shows).

It is then filed as results/hardware/<gpu-slug>/<date>-<sha>.jsonl, where the slug is
the GPU name folded to ASCII [a-z0-9-] (NFKC first, so full-width letters count; at
most MAX_SLUG characters, a long name ending in a hash of itself; prefixed with the GPU
count when extra.gpu_count > 1), the date the latest record's and the sha the first 12
digits of env.git_sha. A name with nothing to fold (e.g. "..") is refused.

Filing is exactly once and never partial: the content goes to an unnamed file in the
GPU folder (O_TMPFILE) that is then linked under its name, which fails when the name
exists; so of two concurrent submissions of the same file one is filed and the other
refused, and a killed submission leaves nothing. The GPU folder is opened without
following symbolic links. Filed files have mode 0644. On any failure nothing is written.
"""

from __future__ import annotations

import datetime
import errno
import hashlib
import json
import os
import re
import secrets
import unicodedata
from pathlib import Path

from orl.errors import InputError
from orl.io import REPO_ROOT, read_regular_file
from orl.records.rules import MAX_TPF, tpf_problem  # noqa: F401  (MAX_TPF: importers' name)
from orl.records.schema import gpu_count
from orl.records.store import MAX_RECORD_FILE_BYTES, load_records

DEFAULT_HARDWARE_ROOT = REPO_ROOT / "results" / "hardware"
MAX_LISTED = 8  # problems listed in one error message
MAX_SLUG = 64  # characters of a GPU folder name
EARLIEST_DATE = datetime.date(2020, 1, 1)
MAX_LATENCY_S = 86_400.0
MAX_TOKENS_PER_S = 1e6  # batch-1 decoding on one machine


def gpu_slug(gpu_name: str, count: int = 1) -> str:
    """'NVIDIA GeForce RTX 5090' -> 'nvidia-geforce-rtx-5090'; 8 B200s -> '8x-nvidia-b200'; '..' -> ''."""
    folded = unicodedata.normalize("NFKC", gpu_name).encode("ascii", "ignore").decode("ascii").lower()
    slug = re.sub(r"[^a-z0-9]+", "-", folded).strip("-")
    if not slug:
        return ""
    if count > 1:
        slug = f"{count}x-{slug}"
    if len(slug) > MAX_SLUG:
        digest = hashlib.sha256(gpu_name.encode("utf-8", "replace")).hexdigest()[:8]
        slug = slug[: MAX_SLUG - len(digest) - 1].rstrip("-") + "-" + digest
    return slug


def _line_numbers(path: Path) -> list[int]:
    """1-based line numbers of the non-blank lines, in the order load_records returns them."""
    data = read_regular_file(path, "record", MAX_RECORD_FILE_BYTES)
    return [i + 1 for i, raw in enumerate(data.split(b"\n")) if raw.strip()]


def record_date(record: dict) -> str:
    return record["env"]["date"] or record["created"][:10]


def _date_problem(record: dict) -> str | None:
    field = "env.date" if record["env"]["date"] else "created"
    text = record_date(record)
    try:
        day = datetime.date.fromisoformat(text)
    except ValueError:
        return f"{field}: {text!r} is not a calendar date (YYYY-MM-DD)"
    tomorrow = datetime.datetime.now(datetime.timezone.utc).date() + datetime.timedelta(days=1)
    if not EARLIEST_DATE <= day <= tomorrow:
        return f"{field}: {text} is not a plausible run date (expected {EARLIEST_DATE} to {tomorrow})"
    return None


def record_problems(record: dict) -> list[str]:
    """What makes one (schema-valid) record unfit for Table 4, as 'field: problem' strings."""
    problems = []
    env = record["env"]
    for field in ("gpu_name", "torch", "git_sha"):
        if not env.get(field):
            problems.append(f"env.{field}: missing (the environment block must name it)")
    if env.get("gpu_name") and not gpu_slug(env["gpu_name"]):
        problems.append(
            f"env.gpu_name: {env['gpu_name'][:80]!r} has no letter or digit to name its folder by"
        )
    if record["status"] != "measured":
        problems.append(f"status: {record['status']!r}: submit measured records only")
    date_problem = _date_problem(record)
    if date_problem:
        problems.append(date_problem)
    for name, value in record["metrics"].items():
        if value is None:
            continue
        if name == "tpf":
            problems += [tpf_problem(value)] if tpf_problem(value) else []  # the rule validate applies too
        elif name.startswith("latency_") and value <= 0:
            problems.append(f"metrics.{name}: {value} is not a positive time")
        elif name.startswith("latency_") and value > MAX_LATENCY_S:
            problems.append(f"metrics.{name}: {value} is not a plausible time (at most {MAX_LATENCY_S:g} s)")
        elif re.fullmatch(r"pass_at_\d+", name) and not 0 <= value <= 1:
            problems.append(f"metrics.{name}: {value} is not in [0, 1]")
        elif name in ("tokens_per_s", "peak_tokens_per_s") and value <= 0:
            problems.append(f"metrics.{name}: {value} is not positive")
        elif name in ("tokens_per_s", "peak_tokens_per_s") and value > MAX_TOKENS_PER_S:
            problems.append(f"metrics.{name}: {value} is not a plausible rate (at most {MAX_TOKENS_PER_S:g})")
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
        problems.append(f"records from {len(gpus)} different GPUs ({', '.join(g[:80] for g, _ in gpus)}): "
                        "submit one file per GPU")  # fmt: skip
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
    date = max(record_date(r) for r in records)
    return (
        Path(root)
        / gpu_slug(first["env"]["gpu_name"], gpu_count(first))
        / f"{date}-{first['env']['git_sha'][:12]}.jsonl"
    )


def _open_folder(root: Path, name: str) -> int:
    """An fd of the real folder root/name (created 0755 when missing); a symlink there is refused."""
    root.mkdir(parents=True, exist_ok=True)
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            os.mkdir(name, 0o755, dir_fd=root_fd)
            created = True
        except FileExistsError:
            created = False
        try:
            fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=root_fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise InputError(
                    f"{root / name}: is a symbolic link or not a folder; submissions are filed only "
                    f"in real folders under {root} (nothing written)"
                ) from None
            raise
        if created:
            os.fchmod(fd, 0o755)
        return fd
    finally:
        os.close(root_fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.fchmod(fd, 0o644)
    os.fsync(fd)


def _link_new(folder_fd: int, name: str, data: bytes) -> None:
    """Create `name` in the folder with `data`, all at once and only if it does not exist yet."""
    try:
        fd = os.open(".", os.O_TMPFILE | os.O_WRONLY, 0o644, dir_fd=folder_fd)
    except OSError:  # a filesystem without O_TMPFILE: a named temporary file, linked the same way
        fd = None
    if fd is not None:
        try:
            _write_all(fd, data)
            os.link(f"/proc/self/fd/{fd}", name, dst_dir_fd=folder_fd, follow_symlinks=True)
        finally:
            os.close(fd)
    else:
        temporary = f".{name}.{secrets.token_hex(4)}.tmp"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=folder_fd)
        try:
            _write_all(fd, data)
            os.link(temporary, name, src_dir_fd=folder_fd, dst_dir_fd=folder_fd, follow_symlinks=False)
        finally:
            os.close(fd)
            os.unlink(temporary, dir_fd=folder_fd)
    os.fsync(folder_fd)


def submit(path: str | Path, root: str | Path = DEFAULT_HARDWARE_ROOT) -> Path:
    """Check `path` and file it under `root`; returns where it was filed."""
    records = check_submission(path)
    target = submission_path(records, root)
    data = "".join(json.dumps(record, sort_keys=True) + "\n" for record in records).encode("utf-8")
    folder_fd = _open_folder(Path(root), target.parent.name)
    try:
        _link_new(folder_fd, target.name, data)
    except FileExistsError:
        raise InputError(
            f"{path}: not submitted, nothing written: {target} already exists "
            "(submissions are never overwritten; a new run has a new date or commit)"
        ) from None
    finally:
        os.close(folder_fd)
    return target
