"""Atomic writes (orl/io.py): the file a reader finds is whole, with the mode a plain write gives it."""

from __future__ import annotations

import stat

from orl.io import atomic_write_text


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_file_gets_a_plain_writes_mode_and_a_rewrite_keeps_the_files_own(tmp_path):
    plain = tmp_path / "plain.txt"
    plain.write_text("")  # open(): 0666 less the umask
    record = tmp_path / "record.jsonl"
    atomic_write_text(record, "{}\n")
    assert _mode(record) == _mode(plain) and record.read_text() == "{}\n"
    record.chmod(0o600)
    atomic_write_text(record, '{"a": 1}\n')
    assert _mode(record) == 0o600 and record.read_text() == '{"a": 1}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "plain.txt",
        "record.jsonl",
    ]  # no temporary file left
