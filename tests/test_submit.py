"""`orl submit`: bad submissions are refused without writing anything; a good one shows in Table 4."""

from __future__ import annotations

import json
import re
import signal
import stat
import subprocess
import sys
import time

import pytest

from orl.cli import main
from orl.errors import InputError
from orl.records import load_record_tree, make_record, validate_record
from orl.records.submit import gpu_slug, submit
from orl.report.claims import DEFAULT_CLAIMS_PATH, load_claims
from orl.report.tables import build_table4

GPU = "NVIDIA GeForce RTX 5090"
SHA = "0123456789abcdef0123456789abcdef01234567"


def contribution(**metric_overrides) -> list[dict]:
    records = []
    for kind, metrics in (
        ("latency", {"tpf": 5.1, "latency_median_s": 0.09, "latency_p90_s": 0.12, "tokens_per_s": 2650.0}),
        ("quality", {"tpf": 5.1, "pass_at_1": 0.61}),
    ):
        metrics = {**metrics, **{k: v for k, v in metric_overrides.items() if k in metrics}}
        record = make_record(kind, system="dLLM + ORL", engine="dlmrt",
                             model={"name": "LLaDA-2.1-mini-ORL", "precision": "nvfp4-w4a4"},
                             metrics=metrics, suite="humaneval", split="test", n_problems=164)  # fmt: skip
        record["env"].update({"gpu_name": GPU, "git_sha": SHA, "date": "2026-11-30", "cuda": "13.0"})
        records.append(record)
    return records


def write_jsonl(path, records, *, validate=True):
    for record in records if validate else []:
        validate_record(record)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def files_under(root):
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def test_valid_submission_is_filed_and_shows_in_table4(tmp_path):
    root = tmp_path / "hardware"
    source = write_jsonl(tmp_path / "mine.jsonl", contribution())
    target = submit(source, root)
    assert target == root / "nvidia-geforce-rtx-5090" / "2026-11-30-0123456789ab.jsonl"
    assert files_under(root) == [target]
    frame = build_table4(load_record_tree(root), load_claims(DEFAULT_CLAIMS_PATH))
    line = frame[frame["claim"] == "t4-rtx5090-llada21mini-orl-nvfp4-tokens-per-s"].iloc[0]
    assert line["status"] == "measured" and line["gpu"] == GPU and line["tokens_per_s"] == 2650.0
    assert line["pass_at_1"] == 0.61 and line["git_sha"] == SHA and line["cuda"] == "13.0"
    assert line["ratio"] == pytest.approx(2650 / 2788)


def test_overwrite_is_refused_and_the_first_file_kept(tmp_path):
    root = tmp_path / "hardware"
    target = submit(write_jsonl(tmp_path / "a.jsonl", contribution()), root)
    before = target.read_bytes()
    with pytest.raises(InputError, match="already exists"):
        submit(write_jsonl(tmp_path / "b.jsonl", contribution(tokens_per_s=9999.0)), root)
    assert target.read_bytes() == before and files_under(root) == [target]


def _without_env(records):
    del records[0]["env"]
    return records


def _cpu_only(records):
    for record in records:
        record["env"]["gpu_name"] = None
    return records


def _no_sha(records):
    records[1]["env"]["git_sha"] = None
    return records


def _two_gpus(records):
    records[1]["env"]["gpu_name"] = "NVIDIA H100 80GB HBM3"
    return records


@pytest.mark.parametrize(
    ("records", "message"),
    [
        (lambda: _without_env(contribution()), "line 1: env: missing field"),
        (lambda: _cpu_only(contribution()), "env.gpu_name: missing"),
        (lambda: _no_sha(contribution()), "line 2: env.git_sha: missing"),
        (lambda: contribution(tpf=2000.0), "metrics.tpf: 2000.0 is above 1024"),
        (lambda: contribution(tokens_per_s=0.0), "metrics.tokens_per_s: 0.0 is not positive"),
        (lambda: _two_gpus(contribution()), "different GPUs"),
        (lambda: contribution()[1:], "no measured 'latency' record"),
    ],
)
def test_bad_submissions_are_refused_and_write_nothing(tmp_path, records, message):
    root = tmp_path / "hardware"
    source = write_jsonl(tmp_path / "bad.jsonl", records(), validate=False)
    with pytest.raises(InputError) as info:
        submit(source, root)
    assert message in str(info.value) and str(source) in str(info.value)
    assert files_under(root) == []


def test_schema_failures_are_refused(tmp_path):
    records = contribution()
    records[1]["metrics"]["tpf"] = "fast"
    source = write_jsonl(tmp_path / "bad.jsonl", records, validate=False)
    with pytest.raises(InputError, match=r"line 2: metrics\.tpf: expected a number"):
        submit(source, tmp_path / "hardware")
    records = contribution()
    records[0]["metrics"]["pass_at_1"] = 1.7  # the schema bounds pass@k to [0, 1]
    with pytest.raises(InputError, match="pass_at_1"):
        submit(write_jsonl(tmp_path / "bad2.jsonl", records, validate=False), tmp_path / "hardware")
    assert files_under(tmp_path / "hardware") == []


def test_cli_exit_codes(tmp_path, capsys):
    root = tmp_path / "hardware"
    good = write_jsonl(tmp_path / "good.jsonl", contribution())
    assert main(["submit", str(good), "--root", str(root)]) == 0
    assert "filed" in capsys.readouterr().out
    assert main(["submit", str(good), "--root", str(root)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert len(files_under(root)) == 1


def test_gpu_slug():
    assert gpu_slug("NVIDIA GeForce RTX 5090") == "nvidia-geforce-rtx-5090"
    assert gpu_slug("NVIDIA B200", 8) == "8x-nvidia-b200"


# ------------------------------------------------------------------------------------------
# Names, folders, dates and values that must not be filed; races and kills
# ------------------------------------------------------------------------------------------


def _with_gpu(name):
    records = contribution()
    for record in records:
        record["env"]["gpu_name"] = name
    return records


def test_gpu_names_fold_to_bounded_ascii_slugs():
    assert gpu_slug("ＮＶＩＤＩＡ ＲＴＸ ５０９０") == "nvidia-rtx-5090"  # full-width letters (NFKC)
    assert gpu_slug("..") == gpu_slug("../..") == gpu_slug("日本") == ""
    long = gpu_slug("NVIDIA " + "X" * 300)
    assert len(long) == 64 and re.fullmatch(r"[a-z0-9-]+", long)
    assert gpu_slug("NVIDIA " + "X" * 300) != gpu_slug(
        "NVIDIA " + "X" * 299 + "Y"
    )  # the hash tells them apart


@pytest.mark.parametrize("name", ["..", "/", "../..", "日本"])
def test_names_without_a_slug_are_refused_and_nothing_is_filed(tmp_path, name):
    root = tmp_path / "hardware"
    source = write_jsonl(tmp_path / "bad.jsonl", _with_gpu(name))
    with pytest.raises(InputError, match="env.gpu_name: .* has no letter or digit"):
        submit(source, root)
    assert files_under(tmp_path / "hardware") == [] and sorted(p.name for p in tmp_path.iterdir()) == [
        "bad.jsonl"
    ]


def test_full_width_and_300_character_names_are_filed_inside_the_tree(tmp_path):
    root = tmp_path / "hardware"
    wide = submit(write_jsonl(tmp_path / "a.jsonl", _with_gpu("ＮＶＩＤＩＡ ＲＴＸ ５０９０")), root)
    assert wide.parent == root / "nvidia-rtx-5090"
    long = submit(write_jsonl(tmp_path / "b.jsonl", _with_gpu("NVIDIA " + "H" * 300)), root)
    assert long.parent.parent == root and len(long.parent.name) == 64
    dots = submit(write_jsonl(tmp_path / "c.jsonl", _with_gpu("../../etc")), root)
    assert dots.parent == root / "etc"
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o644 for p in (wide, long, dots))


def test_a_symlinked_gpu_folder_is_not_followed(tmp_path):
    root = tmp_path / "hardware"
    outside = tmp_path / "outside"
    outside.mkdir()
    root.mkdir()
    (root / "nvidia-geforce-rtx-5090").symlink_to(outside)
    with pytest.raises(InputError, match="is a symbolic link or not a folder"):
        submit(write_jsonl(tmp_path / "mine.jsonl", contribution()), root)
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize(("date", "message"), [
    ("9999-99-99", "env.date: '9999-99-99' is not a calendar date"),
    ("2026-02-30", "env.date: '2026-02-30' is not a calendar date"),
    ("9999-12-31", "env.date: 9999-12-31 is not a plausible run date"),
    ("1999-01-01", "env.date: 1999-01-01 is not a plausible run date"),
])  # fmt: skip
def test_implausible_dates_are_refused_with_the_field(tmp_path, date, message, monkeypatch):
    records = contribution()
    records[0]["env"]["date"] = date
    with pytest.raises(InputError, match=re.escape(message)):
        submit(write_jsonl(tmp_path / "bad.jsonl", records), tmp_path / "hardware")
    assert files_under(tmp_path / "hardware") == []


@pytest.mark.parametrize(("overrides", "message"), [
    ({"tokens_per_s": 1e308}, "metrics.tokens_per_s: 1e+308 is not a plausible rate"),
    ({"tpf": 5000.0}, "metrics.tpf: 5000.0 is above 1024"),
    ({"latency_median_s": 1e9, "latency_p90_s": 2e9}, "metrics.latency_median_s: 1000000000.0 is not a "
                                                      "plausible time"),
])  # fmt: skip
def test_implausible_values_are_refused_with_the_field(tmp_path, overrides, message):
    with pytest.raises(InputError, match=re.escape(message)):
        submit(write_jsonl(tmp_path / "bad.jsonl", contribution(**overrides)), tmp_path / "hardware")
    assert files_under(tmp_path / "hardware") == []


def _submit_process(source, root):
    return subprocess.Popen([sys.executable, "-m", "orl.cli", "submit", str(source), "--root", str(root)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


def test_concurrent_submissions_of_one_file_are_filed_exactly_once(tmp_path):
    records = contribution()  # once: a second call may fall in the next second (the records' `created`)
    source = write_jsonl(tmp_path / "mine.jsonl", records)
    expected = "".join(json.dumps(r, sort_keys=True) + "\n" for r in records)
    for attempt in range(6):
        root = tmp_path / f"hardware{attempt}"
        racers = [_submit_process(source, root) for _ in range(2)]
        outcomes = [(p.wait(timeout=120), *p.communicate()) for p in racers]
        assert sorted(code for code, _, _ in outcomes) == [0, 2], outcomes
        assert sum("filed" in out for _, out, _ in outcomes) == 1
        assert any("already exists" in err for _, _, err in outcomes)
        (target,) = files_under(root)
        assert target.read_text() == expected and stat.S_IMODE(target.stat().st_mode) == 0o644


def test_a_submission_killed_at_any_moment_files_nothing_partial(tmp_path):
    records = contribution()  # once: a second call may fall in the next second (the records' `created`)
    source = write_jsonl(tmp_path / "mine.jsonl", records)
    expected = "".join(json.dumps(r, sort_keys=True) + "\n" for r in records)
    for attempt, delay in enumerate((0.5, 1.5, 2.5, 3.5)):  # before, around and after its filing
        root = tmp_path / f"hardware{attempt}"
        killed, survivor = _submit_process(source, root), _submit_process(source, root)
        time.sleep(delay)
        killed.send_signal(signal.SIGKILL)
        killed.wait()
        assert survivor.wait(timeout=120) in (0, 2)
        survivor.communicate()
        (target,) = files_under(root)  # exactly one, whoever filed it, and nothing else (no temporary file)
        assert target.read_text() == expected
