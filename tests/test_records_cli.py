"""`orl records validate` and `orl check-samples` through the real CLI entry point."""

from __future__ import annotations

import json

import pytest

from orl import cli
from orl.records import make_record, write_records

PROBLEMS = [
    {
        "task_id": "T/0",
        "prompt": "def inc(x):\n",
        "test": "def check(f):\n    assert f(1) == 2\n",
        "entry_point": "inc",
    },
    {
        "task_id": "T/1",
        "prompt": "def dbl(x):\n",
        "test": "def check(f):\n    assert f(2) == 4\n",
        "entry_point": "dbl",
    },
]


def _main(argv: list[str]) -> int:
    return cli.main(argv)


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_validate_ok_and_bad(tmp_path, capsys):
    record = make_record(
        "quality",
        system="AR (hf)",
        engine="hf",
        model={"name": "tiny", "precision": "float32"},
        metrics={"pass_at_1": 0.5},
        split="test",
    )
    good = tmp_path / "good.jsonl"
    write_records(good, [record, record])
    assert _main(["records", "validate", str(good)]) == 0
    assert "2 valid records" in capsys.readouterr().out
    bad = _jsonl(tmp_path / "bad.jsonl", [record, {**record, "metrics": {"pass_at_1": "high"}}])
    assert _main(["records", "validate", str(bad)]) != 0
    err = capsys.readouterr().err
    assert f"{bad} line 2: metrics.pass_at_1: expected a number or null, got 'high'" in err


def test_check_samples_writes_results_and_prints_pass_at_1(tmp_path, capsys):
    problems = _jsonl(tmp_path / "problems.jsonl", PROBLEMS)
    samples = _jsonl(tmp_path / "samples.jsonl", [
        {"task_id": "T/0", "completion": "    return x + 1\n"},
        {"task_id": "T/0", "completion": "    return x\n"},
        {"task_id": "T/1", "completion": "    return x * 2\n"},
        {"task_id": "T/1", "completion": "    import sys\n    sys.exit(0)\n"},
    ])  # fmt: skip
    code = _main(["check-samples", str(samples), "--problems", str(problems), "--timeout", "3",
                  "--workers", "2", "--no-progress"])  # fmt: skip
    assert code == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1] == "pass@1=0.5"  # each problem: 1 of 2 samples correct
    out = [json.loads(line) for line in (tmp_path / "samples.jsonl_results.jsonl").read_text().splitlines()]
    assert [(r["task_id"], r["passed"]) for r in out] == [
        ("T/0", True),
        ("T/0", False),
        ("T/1", True),
        ("T/1", False),
    ]
    assert out[3]["result"] == "failed: SystemExit: 0" and out[0]["completion"] == "    return x + 1\n"


@pytest.mark.parametrize("samples, message", [
    ([{"task_id": "T/9", "completion": ""}], "samples.jsonl line 1: task_id: 'T/9' is not in"),
    ([{"task_id": "T/0"}], "samples.jsonl line 1: completion: missing field"),
    ([{"task_id": "T/0", "completion": 3}], "samples.jsonl line 1: completion: expected a string"),
])  # fmt: skip
def test_check_samples_bad_input(tmp_path, capsys, samples, message):
    problems = _jsonl(tmp_path / "problems.jsonl", PROBLEMS)
    path = _jsonl(tmp_path / "samples.jsonl", samples)
    assert _main(["check-samples", str(path), "--problems", str(problems), "--no-progress"]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "samples.jsonl_results.jsonl").exists()


@pytest.mark.parametrize("content", ["", "\n\n  \n"], ids=["empty", "blank lines"])
def test_validate_refuses_a_file_without_records(tmp_path, capsys, content):
    path = tmp_path / "empty.jsonl"
    path.write_text(content)
    assert _main(["records", "validate", str(path)]) == 2
    assert f"{path}: no records" in capsys.readouterr().err


@pytest.mark.parametrize("target", ["/dev/zero", "/dev/stdin", "folder"])
def test_validate_reads_only_regular_files(tmp_path, capsys, target):
    path = tmp_path if target == "folder" else target
    assert _main(["records", "validate", str(path)]) == 2  # at once: nothing is read from a device
    err = capsys.readouterr().err
    assert str(path) in err and ("not a regular file" in err or "is a folder" in err)


def test_validate_caps_the_size_read(tmp_path, capsys, monkeypatch):
    from orl.records import store

    monkeypatch.setattr(store, "MAX_RECORD_FILE_BYTES", 1 << 20)
    path = tmp_path / "huge.jsonl"
    path.write_bytes(b" " * (2 << 20))
    assert _main(["records", "validate", str(path)]) == 2
    assert f"{path}: larger than 1 MiB" in capsys.readouterr().err


def test_check_samples_reads_only_regular_files(tmp_path, capsys):
    problems = _jsonl(tmp_path / "problems.jsonl", PROBLEMS)
    assert _main(["check-samples", "/dev/zero", "--problems", str(problems), "--no-progress"]) == 2
    assert "/dev/zero: not a regular file; expected a samples file" in capsys.readouterr().err
