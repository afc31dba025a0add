"""`orl submit`: bad submissions are refused without writing anything; a good one shows in Table 4."""

from __future__ import annotations

import json

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
                             metrics=metrics, suite="humaneval", n_problems=164)  # fmt: skip
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
        (lambda: contribution(tpf=0.5), "metrics.tpf: 0.5 is below 1"),
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
