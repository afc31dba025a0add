"""Same-sitting timing (orl/eval/latency.py measure_sitting, `orl bench-sitting`): requests interleaved
across engines, one record per row naming the sitting, the rows' shared settings enforced."""

from __future__ import annotations

import re
import shlex
from collections import Counter

import pandas as pd
import pytest

from orl.cli import main
from orl.engines.base import EngineInfo, Generation
from orl.errors import InputError
from orl.eval.latency import balanced_orders, measure_latency, measure_sitting
from orl.records import load_records
from orl.report.cells import display_frame
from orl.report.claims import DEFAULT_CLAIMS_PATH, load_claims
from orl.report.table2 import build_table2
from tests.test_report import row, table2_records


class Logged:
    """An engine that logs which prompt it decodes, in one shared log."""

    device = "cpu"

    def __init__(self, name: str, log: list):
        self.name, self.log = name, log

    def compile_key(self, prompt: str, max_new_tokens: int):
        return None

    def generate(self, prompt: str, max_new_tokens: int) -> Generation:
        self.log.append((self.name, prompt))
        length = {"p1": 1, "p4": 1}.get(prompt, 2)  # p1 and p4 have the shortest completions
        return Generation(token_ids=[1] * length, text="a" * length, nfe=1, nfe_prefill=1, wall_time_s=0.0)

    def describe(self) -> EngineInfo:
        return EngineInfo(self.name, "m", None, "float32", "cpu")

    def close(self) -> None:
        pass


def test_a_sitting_interleaves_blocks_of_prompts_in_balanced_orders():
    log: list = []
    engines = [Logged(name, log) for name in "abcd"]
    prompts = [f"p{i}" for i in range(10)]
    runs = measure_sitting(engines, prompts, 4, warmup=1, progress=False, block=3)
    assert log[:4] == [(name, "p0") for name in "abcd"]  # every engine warms up first
    turns = [log[i : i + 4] for i in range(4, 4 * 4 + 4 * 4 * 3, 4)]  # (re-warm + 3 timed) per engine
    # Blocks p0-p2, p3-p5, p6-p8, p9: each engine re-warmed on the prompt it decoded the shortest completion
    # for so far (the latest of equals; the first block: p0, decoded in its warm-up), then the block.
    assert turns[0] == [("a", "p0"), ("a", "p0"), ("a", "p1"), ("a", "p2")]
    assert turns[4] == [("b", "p1"), ("b", "p3"), ("b", "p4"), ("b", "p5")]
    assert turns[8] == [("c", "p4"), ("c", "p6"), ("c", "p7"), ("c", "p8")]
    order = ["".join(turn[0][0] for turn in turns[b : b + 4]) for b in range(0, 12, 4)]
    assert order == ["abdc", "bcad", "cdba"]  # balanced_orders(4), one order per block
    assert log[4 + 48 :] == [(e, p) for e in "dacb" for p in ("p4", "p9")]  # the last block: one prompt
    assert [len(run.timings) for run in runs] == [10] * 4 and [run.warmup for run in runs] == [1] * 4
    alone = measure_latency(Logged("a", []), prompts, 4, warmup=1, progress=False)
    assert [t.tokens for t in alone.timings] == [t.tokens for t in runs[0].timings]
    with pytest.raises(InputError, match="at least 1 prompt"):
        measure_sitting(engines, prompts, 4, progress=False, block=0)
    with pytest.raises(InputError, match="at least one engine"):
        measure_sitting([], ["p0"], 4, progress=False)


@pytest.mark.parametrize("n", range(1, 13))
def test_balanced_orders_put_every_engine_everywhere_and_after_every_other_equally_often(n):
    orders = balanced_orders(n)
    assert len(orders) == (n if n % 2 == 0 else 2 * n)
    assert all(sorted(order) == list(range(n)) for order in orders)
    positions = Counter((position, k) for order in orders for position, k in enumerate(order))
    assert len(positions) == n * n and len(set(positions.values())) == 1
    neighbours = Counter(pair for order in orders for pair in zip(order[:-1], order[1:], strict=True))
    assert len(neighbours) == n * (n - 1) and len(set(neighbours.values())) <= 1


def _row(ckpt, *flags) -> str:
    common = ["--ckpt", str(ckpt), "--suite", "tinycode", "--limit", "3", "--warmup", "1"]
    return shlex.join([*common, "--max-new-tokens", "8", *flags])


def _sitting(*rows) -> list[str]:
    """`orl bench-sitting` arguments for rows (record file, that row's flags)."""
    return [
        "bench-sitting",
        "--no-progress",
        *(arg for out, flags in rows for arg in ("--row", str(out), flags)),
    ]


def test_bench_sitting_writes_one_record_per_row_naming_the_sitting(ar_ckpt_dir, tmp_path, capsys):
    hf, compiled = tmp_path / "hf.jsonl", tmp_path / "ar.jsonl"
    argv = _sitting(
        (hf, _row(ar_ckpt_dir, "--engine", "hf")),
        (compiled, _row(ar_ckpt_dir, "--engine", "ar-compiled", "--system", "AR mine")),
    )
    assert main(argv) == 0
    (a,), (b,) = load_records(hf), load_records(compiled)
    assert a["kind"] == b["kind"] == "latency" and b["system"] == "AR mine"
    assert a["extra"]["sitting"] == b["extra"]["sitting"]
    assert a["extra"]["sitting"]["systems"] == [a["system"], "AR mine"]
    assert a["extra"]["sitting"]["id"].startswith("tinycode/test@")
    assert len(a["extra"]["per_request"]) == len(b["extra"]["per_request"]) == 3
    # Both decode the same greedy tokens of the same target: the same counts per request.
    assert [r["tokens"] for r in a["extra"]["per_request"]] == [
        r["tokens"] for r in b["extra"]["per_request"]
    ]
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("sitting=tinycode/test@")


def test_bench_sitting_refuses_rows_that_would_time_different_requests(ar_ckpt_dir, tmp_path, capsys):
    argv = _sitting(
        (tmp_path / "a.jsonl", _row(ar_ckpt_dir, "--engine", "hf")),
        (tmp_path / "b.jsonl", _row(ar_ckpt_dir, "--engine", "hf", "--split", "dev")),
    )
    assert main(argv) == 2
    assert re.search(r"b.jsonl: --split 'dev' differs from row .*a.jsonl's 'test'", capsys.readouterr().err)
    assert not (tmp_path / "a.jsonl").exists()


def test_a_row_that_cannot_run_says_why_and_the_others_are_timed(ar_ckpt_dir, tmp_path):
    argv = _sitting(
        (tmp_path / "a.jsonl", _row(ar_ckpt_dir, "--engine", "hf")),
        (tmp_path / "v.jsonl", _row(ar_ckpt_dir, "--engine", "sglang")),
    )
    assert main(argv) == 0
    (timed,), (skipped,) = load_records(tmp_path / "a.jsonl"), load_records(tmp_path / "v.jsonl")
    assert timed["status"] == "measured" and skipped["status"].startswith("not run")
    assert timed["extra"]["sitting"]["systems"] == [timed["system"]]


DECODED = ("pass_at_1", "tpf", "tpf_prefill", "nfe_mean", "tokens")


def _same_decode(scored: dict, evaluated: dict) -> None:
    """A quality record scored from a timed run against `orl eval-quality`'s of the same flags: the same
    decoded figures and per-problem verdicts; only the wall time differs."""
    assert scored["kind"] == evaluated["kind"] == "quality" and scored["status"] == "measured"
    for field in ("system", "engine", "model", "policy", "suite", "split", "n_problems"):
        assert scored[field] == evaluated[field], field
    assert {k: scored["metrics"][k] for k in DECODED} == {k: evaluated["metrics"][k] for k in DECODED}
    assert scored["per_problem"] == evaluated["per_problem"]
    assert {k: v for k, v in scored["extra"].items() if k != "completions_from"} == evaluated["extra"]


def test_a_sitting_scores_the_completions_it_timed_as_eval_quality_would(ar_ckpt_dir, tmp_path, capsys):
    rows = {
        "hf": _row(ar_ckpt_dir, "--engine", "hf"),
        "compiled": _row(ar_ckpt_dir, "--engine", "ar-compiled"),
    }
    argv = _sitting(*((tmp_path / f"{k}.jsonl", f"{flags} --quality-out {tmp_path / k}_q.jsonl")
                      for k, flags in rows.items()))  # fmt: skip
    assert main(argv) == 0
    sitting = load_records(tmp_path / "hf.jsonl")[0]["extra"]["sitting"]
    for key, flags in rows.items():
        (scored,) = load_records(tmp_path / f"{key}_q.jsonl")
        out = tmp_path / f"{key}_eval.jsonl"
        eval_flags = [f for f in shlex.split(flags) if f not in ("--warmup", "1")]
        assert main(["eval-quality", *eval_flags, "--out", str(out), "--no-progress"]) == 0
        _same_decode(scored, load_records(out)[0])
        assert scored["extra"]["completions_from"] == f"the timed requests of the sitting {sitting['id']}"
    assert "passed" in capsys.readouterr().out


def test_a_sitting_runs_a_program_its_rows_share_in_the_sandbox_once(ar_ckpt_dir, tmp_path, monkeypatch):
    from orl.sandbox import batch

    programs = []
    check = batch.check_completion

    def counted(problem, completion, *args, **kwargs):
        programs.append((problem["task_id"], completion))
        return check(problem, completion, *args, **kwargs)

    monkeypatch.setattr(batch, "check_completion", counted)
    rows = [
        (
            tmp_path / f"{engine}.jsonl",
            _row(ar_ckpt_dir, "--engine", engine, "--quality-out", f"{tmp_path / engine}_q.jsonl"),
        )
        for engine in ("hf", "ar-compiled")
    ]
    assert main(_sitting(*rows)) == 0
    hf, compiled = (load_records(tmp_path / f"{engine}_q.jsonl")[0] for engine in ("hf", "ar-compiled"))
    # Both rows decode the target's greedy tokens: the second row's programs were all run for the first.
    assert hf["per_problem"] == compiled["per_problem"] and len(hf["per_problem"]) == 3
    assert sorted(programs) == sorted((p["task_id"], p["completion"]) for p in hf["per_problem"])


def test_bench_latency_scores_its_own_completions(ar_ckpt_dir, tmp_path):
    flags = shlex.split(_row(ar_ckpt_dir, "--engine", "hf"))
    latency, scored, evaluated = tmp_path / "l.jsonl", tmp_path / "q.jsonl", tmp_path / "e.jsonl"
    argv = ["bench-latency", *flags, "--out", str(latency), "--quality-out", str(scored), "--no-progress"]
    assert main(argv) == 0
    eval_flags = [f for f in flags if f not in ("--warmup", "1")]
    assert main(["eval-quality", *eval_flags, "--out", str(evaluated), "--no-progress"]) == 0
    (record,) = load_records(scored)
    _same_decode(record, load_records(evaluated)[0])
    assert record["extra"]["completions_from"] == "the timed requests of its bench-latency run"
    assert record["metrics"]["tokens"] == load_records(latency)[0]["metrics"]["tokens"]


@pytest.mark.parametrize("flag", ["--ignore-eos", "--kind engine_bench"])
def test_quality_out_is_refused_where_the_run_does_not_decode_a_table_line(
    ar_ckpt_dir, tmp_path, capsys, flag
):
    flags = f"{_row(ar_ckpt_dir, '--engine', 'hf')} {flag} --quality-out {tmp_path / 'q.jsonl'}"
    assert main(_sitting((tmp_path / "a.jsonl", flags))) == 2
    assert "--quality-out" in capsys.readouterr().err and not (tmp_path / "a.jsonl").exists()


def test_a_row_that_cannot_run_gets_a_not_run_quality_record_too(ar_ckpt_dir, tmp_path):
    quality = tmp_path / "q.jsonl"
    argv = _sitting(
        (tmp_path / "a.jsonl", _row(ar_ckpt_dir, "--engine", "hf")),
        (
            tmp_path / "v.jsonl",
            _row(ar_ckpt_dir, "--engine", "sglang", "--quality-out", str(tmp_path / "q.jsonl")),
        ),
    )
    assert main(argv) == 0
    (latency,), (quality,) = load_records(tmp_path / "v.jsonl"), load_records(quality)
    assert quality["kind"] == "quality" and quality["status"] == latency["status"]
    assert quality["status"].startswith("not run: ") and quality["split"] == "test"


def test_a_suite_file_that_is_absent_is_the_reason_of_both_records(tmp_path):
    missing = tmp_path / "math500.jsonl"
    flags = f"--ckpt {tmp_path / 'SDAR-4B-Chat'} --engine dlmrt --suite math500 --suite-file {missing}"
    argv = _sitting((tmp_path / "l.jsonl", f"{flags} --quality-out {tmp_path / 'q.jsonl'}"))
    assert main(argv) == 0
    (latency,), (quality,) = load_records(tmp_path / "l.jsonl"), load_records(tmp_path / "q.jsonl")
    assert latency["status"] == quality["status"] == f"not run: {missing} not found"
    assert quality["kind"] == "quality" and quality["suite"] == "math500" and quality["split"] == "test"


@pytest.fixture(scope="module")
def claims():
    return load_claims(DEFAULT_CLAIMS_PATH)


def _sat(record: dict, sitting: str | None) -> dict:
    if sitting is not None:
        record["extra"] = {**(record.get("extra") or {}), "sitting": {"id": sitting}}
    return record


def test_tables_say_which_ratios_pair_one_sitting(claims):
    """A speedup whose two lines share a sitting is "same"; one across sittings is "separate", and the
    Markdown cell and the notes say so."""
    records = table2_records()
    together = ("AR (ours: static cache, compiled)", "dLLM + ORL")
    for record in records:
        if record["kind"] == "latency" and record["system"] in together:
            _sat(record, "tinycode/test@2026-12-05T20:00:00Z/here")
        elif record["kind"] == "latency" and record["system"] == "AR (hf)":
            _sat(record, "tinycode/test@2026-12-05T09:00:00Z/here")
    frame = build_table2(records, claims)
    orl = row(frame, system="dLLM + ORL")
    assert orl["sitting"] == "tinycode/test@2026-12-05T20:00:00Z/here"
    assert orl["speedup_vs_ar_sitting"] == "same" and orl["speedup_vs_ar_hf_sitting"] == "separate"
    dflash = row(frame, system="AR + block-diffusion drafter (ours, DFlash-style)")  # timed alone
    assert pd.isna(dflash["sitting"]) and dflash["speedup_vs_ar_sitting"] == "separate"
    assert pd.isna(row(frame, system=together[0])["speedup_vs_ar_sitting"])  # the AR line itself
    note = next(n for n in frame.attrs["notes"] if "Sittings" in n)
    assert "dLLM + ORL (tinycode)" in note and "separate sittings" in note
    cells = display_frame(frame)
    orl_cell = cells[cells["system"] == "dLLM + ORL"].iloc[0]
    assert "separate sittings" in orl_cell["speedup_vs_ar_hf"] and "separate" not in orl_cell["speedup_vs_ar"]


def test_all_ratios_in_one_sitting_say_so(claims):
    records = [_sat(r, "s1") if r["kind"] == "latency" and r["status"] == "measured" else r
               for r in table2_records()]  # fmt: skip
    frame = build_table2(records, claims)
    assert set(frame["speedup_vs_ar_sitting"].dropna()) == {"same"}
    assert any(n.startswith("All speedups pair requests timed in one sitting") for n in frame.attrs["notes"])
