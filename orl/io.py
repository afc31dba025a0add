"""Atomic file writes: nothing already computed is lost when a run is killed.

Every file the harness produces is written to a temporary file in the same
folder and then renamed over the target, so a reader sees either the old
complete file or the new complete file, never a truncated one.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from orl.errors import CheckpointError, InputError

# The process's umask, read once: a record written by an atomic write gets the mode a plain open()
# would have given it (mkstemp creates its temporary file readable by its owner only).
_UMASK = os.umask(0)
os.umask(_UMASK)

# The checkout this package runs from (an editable install): results/, reports/ and the claims ledger.
REPO_ROOT = Path(__file__).resolve().parent.parent


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to `path` via a temp file and rename (same filesystem).

    The file keeps the mode of the one it replaces; a new file gets 0666 less the umask, as open() gives.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = stat.S_IMODE(path.stat().st_mode) if path.exists() else 0o666 & ~_UMASK
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def atomic_write_jsonl(path: str | os.PathLike, rows: Iterable[dict]) -> None:
    atomic_write_text(path, "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows))


def read_json_object(path: Path) -> dict:
    """A checkpoint's JSON file (config.json, tokenizer_config.json, ...) as a dict, or a
    CheckpointError naming the file when it is not valid JSON or not an object."""
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a JSON object")
    return data


def read_regular_file(path: str | os.PathLike, what: str, max_bytes: int) -> bytes:
    """The bytes of a regular file of at most `max_bytes`; InputError naming the file otherwise.

    Devices, pipes, FIFOs, sockets and folders are refused before the file is opened (stat), and
    again by fstat on what was opened, which is opened non-blocking (should the path have become a
    FIFO in between, opening it would otherwise wait for a writer forever), before the first read
    (/dev/zero never ends). At most max_bytes + 1 bytes are read (a file may grow while it is read).
    """
    path = Path(path)

    def check(mode: int) -> None:
        if stat.S_ISDIR(mode):
            raise InputError(f"{path}: is a folder; expected a {what} file")
        if not stat.S_ISREG(mode):
            raise InputError(f"{path}: not a regular file; expected a {what} file")

    try:
        check(os.stat(path).st_mode)  # before opening: opening a device may itself do something
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise InputError(f"{path}: no such {what} file") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read {what} file: {exc.strerror or exc}") from None
    try:
        check(os.fstat(fd).st_mode)  # what was opened, if the path changed in between
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(max_bytes + 1)
    except OSError as exc:
        raise InputError(f"{path}: cannot read {what} file: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise InputError(f"{path}: larger than {max_bytes >> 20} MiB; not a {what} file this harness reads")
    return data
