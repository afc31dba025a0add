"""Intervals, training seeds, matched accuracy and Table 3b in the rendered tables."""

from __future__ import annotations

import csv
import hashlib
from pathlib import Path

import pandas as pd
import pytest

from orl.cli import main
from orl.records import make_record, write_records
from orl.records.schema import SPLIT_KINDS
from orl.report.claims import DEFAULT_CLAIMS_PATH, load_claims
from orl.report.render import table_paths, write_table
from orl.report.tables import build_table1, build_table2, build_table3b, build_table5

REPO = Path(__file__).resolve().parents[1]
N = 40  # problems of the synthetic suite
AR_HF, BASE, ORL, NO_AEC = "AR (hf)", "dLLM base", "dLLM + ORL", "ORL: no AEC"


@pytest.fixture(scope="module")
def claims():
    return load_claims(DEFAULT_CLAIMS_PATH)


def problems(passed: int, tokens: int = 20, nfe: int = 4, suite: str = "tinycode") -> list[dict]:
    prefix = "TinyCode" if suite == "tinycode" else "TinyCodeLong"
    return [{"task_id": f"{prefix}/{i}", "passed": i < passed, "result": "passed" if i < passed else "failed",
             "tokens": tokens, "nfe": nfe} for i in range(N)]  # fmt: skip


def requests(tokens: int, nfe: int, wall: float) -> dict:
    return {
        "per_request": [
            {"tokens": tokens, "nfe": nfe, "wall_s": wall * (1 + 0.1 * (i % 3))} for i in range(N)
        ]
    }


def record(kind, system, engine, *, sha=None, suite="tinycode", tau=None, metrics=None, **fields):
    policy = {"name": "threshold", "params": {"tau": tau}} if tau is not None else None
    return make_record(
        kind,
        system=system,
        engine=engine,
        model={"name": "tiny-qwendlm", "precision": "float32", "ckpt_sha256": sha},
        metrics=metrics or {},
        suite=suite,
        policy=policy,
        n_problems=None if kind == "train" else N,
        split="test" if kind in SPLIT_KINDS else None,
        **fields,
    )


def quality(
    system, engine, passed, *, tokens=20, nfe=4, sha=None, tau=None, kind="quality", suite="tinycode"
):
    return record(
        kind,
        system,
        engine,
        sha=sha,
        tau=tau,
        suite=suite,
        metrics={"pass_at_1": passed / N, "tpf": tokens / nfe},
        per_problem=problems(passed, tokens, nfe, suite),
    )


def latency(system, engine, tokens, nfe, wall, *, sha=None, suite="tinycode"):
    return record("latency", system, engine, sha=sha, suite=suite,
                  metrics={"tpf": tokens / nfe, "tokens_per_s": tokens / wall, "latency_median_s": wall},
                  extra=requests(tokens, nfe, wall))  # fmt: skip


def sha(name: str, seed: int) -> str:
    return hashlib.sha256(f"{name}/{seed}".encode()).hexdigest()


def trained_line(system, seed, passed, tpf_nfe, *, suite="tinycode"):
    """A seed's train record, its sweep (τ 0.5, 0.9) and its operating point (τ 0.5, the grid's lowest)."""
    digest = sha(system, seed)
    per_step = {"gated_share": [0.2, 0.4], "aec_active_share": [0.0, 0.01], "retained_fraction": [0.5, 0.7]}
    out = [record("train", system, "dlmrt", sha=digest, suite=None, extra={"seed": seed, **per_step},
                  metrics={"self_generated_tokens": 1000 + seed, "train_wall_s": 10.0})]  # fmt: skip
    out += [quality(system, "dlmrt", passed, nfe=tpf_nfe, sha=digest, tau=0.5, kind="sweep", suite=suite),
            quality(system, "dlmrt", passed + 2, nfe=10, sha=digest, tau=0.9, kind="sweep", suite=suite),
            quality(system, "dlmrt", passed, nfe=tpf_nfe, sha=digest, tau=0.5, suite=suite)]  # fmt: skip
    return out


@pytest.fixture(scope="module")
def records():
    out = [quality(AR_HF, "hf", 30, nfe=20), latency(AR_HF, "hf", 20, 20, 0.2)]
    out += [quality(BASE, "dlmrt", 24, nfe=8, tau=0.9), latency(BASE, "dlmrt", 20, 8, 0.05),
            quality(BASE, "dlmrt", 24, nfe=8, tau=0.9, kind="sweep"),
            quality(BASE, "dlmrt", 20, nfe=5, tau=0.5, kind="sweep")]  # fmt: skip
    for seed, passed in enumerate((30, 31, 29)):
        out += trained_line(ORL, seed, passed, 2)
        out.append(latency(ORL, "dlmrt", 20, 2, 0.01 + 0.001 * seed, sha=sha(ORL, seed)))
    for seed, passed in enumerate((29, 30, 28)):
        out += trained_line(NO_AEC, seed, passed, 3)
    # The long suite: only the AR target and ORL's first seed, enough for a second Table 2 block.
    out += [quality(AR_HF, "hf", 25, tokens=60, nfe=60, suite="tinycode-long"),
            latency(AR_HF, "hf", 60, 60, 0.6, suite="tinycode-long"),
            quality(ORL, "dlmrt", 26, tokens=60, nfe=6, sha=sha(ORL, 0), tau=0.5, suite="tinycode-long"),
            latency(ORL, "dlmrt", 60, 6, 0.03, sha=sha(ORL, 0), suite="tinycode-long")]  # fmt: skip
    return out


def line(frame, **where):
    selected = frame
    for column, value in where.items():
        selected = selected[selected[column] == value]
    assert len(selected) >= 1, where
    return selected.iloc[0]


def test_table1_orl_is_a_mean_over_seeds_with_paired_gains(records, claims):
    frame = build_table1(records, claims)
    orl = line(frame, variant="+ORL", suite="tinycode", model="tiny QwenDLM")
    assert orl["seeds"] == 3 and orl["n_problems"] == N
    assert orl["pass_at_1"] == pytest.approx(30 / N) and orl["pass_at_1_sd"] == pytest.approx(1 / N)
    assert orl["pass_at_1_per_seed"] == "s0: 0.75; s1: 0.775; s2: 0.725"
    assert orl["pass_at_1_lo"] < orl["pass_at_1"] < orl["pass_at_1_hi"]
    assert orl["tpf"] == pytest.approx(10.0) and orl["tpf_sd"] == pytest.approx(0.0)
    # TPF 10 over 2.5 and tokens/s over the base's: paired over the same problems / requests.
    assert orl["tpf_gain"] == pytest.approx(4.0) and orl["tpf_gain_test"] == "resolved"
    assert orl["throughput_gain_lo"] < orl["throughput_gain"] < orl["throughput_gain_hi"]
    assert orl["pass_at_1_diff"] == pytest.approx(6 / N) and orl["pass_at_1_diff_test"] in (
        "resolved",
        "unresolved",
    )
    assert (
        "lowest τ of the grid 0.5-0.9" in orl["operating_point"]
        and "AR target: yes" in orl["operating_point"]
    )
    assert orl["aup"] is not None and orl["aup_lo"] <= orl["aup"] <= orl["aup_hi"]
    base = line(frame, variant="base", suite="tinycode", model="tiny QwenDLM")
    assert pd.isna(base["seeds"]) and "no: 0.600 < reference 0.750" in base["operating_point"]


def test_table2_matches_every_line_to_the_ar_target_on_each_suite(records, claims):
    frame = build_table2(records, claims)
    assert list(dict.fromkeys(frame["suite"].dropna())) == ["tinycode", "tinycode-long"]
    short = frame[frame["suite"] == "tinycode"]
    assert line(short, system=BASE)["matched"].startswith("no: 0.600 < reference 0.750")
    orl = line(short, system=ORL)
    # Table 2 decodes the lowest seed: seed 0's pass@1 (30 of 40), its latency record.
    assert orl["pass_at_1"] == pytest.approx(30 / N) and orl["matched"] == "yes"
    assert orl["pass_at_1_diff"] == 0 and orl["pass_at_1_diff_test"] == "unresolved"
    assert orl["speedup_vs_ar_hf"] == pytest.approx((20 / 0.01) / (20 / 0.2), rel=0.01)
    assert orl["speedup_vs_ar_hf_test"] == "resolved" and orl["tpf_lo"] <= orl["tpf"] <= orl["tpf_hi"]
    long = line(frame[frame["suite"] == "tinycode-long"], system=ORL)
    assert long["pass_at_1"] == pytest.approx(26 / N) and long["matched"] == "yes"
    assert any(
        "Prompt set, tinycode:" in note and "one set per table" in note for note in frame.attrs["notes"]
    )
    # Each suite's caption names its lines' median completion length (what the long suite asks for).
    lengths = {
        note.split(" (")[0]: note for note in frame.attrs["notes"] if note.startswith("Median completion")
    }
    assert f"{AR_HF} 60; {ORL} 60." in lengths["Median completion, tinycode-long"]
    assert f"{ORL} 20" in lengths["Median completion, tinycode"]


def test_table5_seeds_and_effects_against_orl(records, claims):
    frame = build_table5(records, claims)
    no_aec = line(frame, system=NO_AEC)
    assert no_aec["seeds"] == 3 and no_aec["pass_at_1"] == pytest.approx(29 / N)
    assert no_aec["pass_at_1_diff"] == pytest.approx(-1 / N)
    # One problem of forty, one seed in three: not resolved, and still in the table.
    assert no_aec["pass_at_1_diff_test"] == "unresolved" and no_aec["pass_at_1_diff_p"] > 0.05
    assert no_aec["tpf_diff"] == pytest.approx(20 / 3 - 10) and no_aec["tpf_diff_test"] == "resolved"
    assert (
        no_aec["aup_diff"] is not None
        and no_aec["aup_diff_lo"] <= no_aec["aup_diff"] <= no_aec["aup_diff_hi"]
    )
    assert no_aec["gated_share"] == pytest.approx(0.3) and no_aec["self_generated_tokens"] == 1001
    assert no_aec["aec_active_share"] == pytest.approx(0.005) and no_aec[
        "retained_fraction"
    ] == pytest.approx(0.6)
    orl = line(frame, system=ORL)
    assert orl["seeds"] == 3 and pd.isna(orl["pass_at_1_diff"])


def test_csv_has_interval_columns_and_markdown_folds_them(records, claims, tmp_path):
    for table, frame in ((1, build_table1(records, claims)), (5, build_table5(records, claims))):
        write_table(frame, tmp_path, claims)
        with table_paths(tmp_path, table)["csv"].open(newline="") as handle:
            header = next(csv.reader(handle))
        for column in (
            "pass_at_1_lo",
            "pass_at_1_hi",
            "tpf_lo",
            "tpf_hi",
            "pass_at_1_sd",
            "pass_at_1_per_seed",
        ):
            assert column in header, (table, column)
    assert {"tpf_gain_lo", "tpf_gain_hi", "throughput_gain_lo", "throughput_gain_hi"} <= set(
        pd.read_csv(table_paths(tmp_path, 1)["csv"]).columns
    )
    assert "seeds" in pd.read_csv(table_paths(tmp_path, 5)["csv"]).columns
    md = table_paths(tmp_path, 5)["md"].read_text()
    assert "pass_at_1_lo" not in md and "0.725 ± 0.025 [" in md and "(s0: 0.725; s1: 0.75; s2: 0.7)" in md
    assert "unresolved (p=" in md and "Residual Context Diffusion" not in md  # ledger notes need the ledger
    tex = table_paths(tmp_path, 5)[
        "tex"
    ].read_text()  # the headline: value [interval], every column in the CSV
    assert "\\begin{tabular}" in tex and "0.725 [" in tex and "table5.csv" in tex


def scale(engine, arch, time_per_forward, floor, *, kernels=None, linear=None, cpu=None, isa=None):
    extra = {"arch": arch, "block": 16, "prompt_len": 128, "random_weights": True,
             "per_request": [{"tokens": 256, "nfe": 256, "wall_s": 1.0}]}  # fmt: skip
    if kernels is not None:
        extra["kernels_per_step"] = kernels
    if linear is not None:
        extra["cpu_linear"] = {"backend": linear, "requested": "auto"}
    record = make_record("scale_bench", system=f"{arch} (random weights: speed only)", engine=engine,
                       model={"name": arch, "precision": "float32"}, suite=None, n_problems=1, extra=extra,
                       metrics={"time_per_forward_s": time_per_forward, "floor_s": floor,
                                "floor_ratio": time_per_forward / floor, "tokens_per_s": 100.0,
                                "weight_bytes_read": 2.4e9})  # fmt: skip
    if cpu is not None:
        record["env"] = {**record["env"], "gpu_name": None, "cpu_model": cpu, "cpu_capability": isa}
    return record


def test_table3b_lines_from_scale_bench_records():
    frame = build_table3b(
        [scale("reference", "qwen3-0.6b", 0.2, 0.05), scale("dlmrt", "qwen3-0.6b", 0.06, 0.05, kernels=368.0)]
    )
    assert list(frame["engine"]) == ["dlmrt", "reference"]
    dlmrt = line(frame, engine="dlmrt")
    assert dlmrt["floor_ratio"] == pytest.approx(1.2) and dlmrt["kernels_per_step"] == 368.0
    assert dlmrt["max_new_tokens"] == 256 and "pass_at_1" not in frame.columns
    empty = build_table3b([])
    assert empty["status"].iloc[0].startswith("not run: no scale_bench records")


def test_table3b_keeps_processors_and_cpu_linears_apart():
    frame = build_table3b([scale("dlmrt", "qwen3-0.6b", 0.24, 0.1, cpu="Intel(R) Xeon(R) Processor"),
                           scale("dlmrt", "qwen3-0.6b", 0.42, 0.08, cpu="AMD EPYC", isa="AVX2"),
                           scale("dlmrt", "qwen3-0.6b", 0.18, 0.08, cpu="AMD EPYC", linear="onednn"),
                           scale("reference", "qwen3-0.6b", 0.9, 0.08, cpu="AMD EPYC")])  # fmt: skip
    lines = {
        (d, e, lin if isinstance(lin, str) else None)
        for d, e, lin in zip(frame["device"], frame["engine"], frame["cpu_linear"], strict=True)
    }
    assert lines == {
        ("cpu (Intel(R) Xeon(R) Processor)", "dlmrt", "aten"),
        ("cpu (AMD EPYC, AVX2)", "dlmrt", "aten"),  # records from before cpu_capability: the model only
        ("cpu (AMD EPYC)", "dlmrt", "onednn"),
        ("cpu (AMD EPYC)", "reference", None),
    }


def test_the_committed_tiny_records_still_render(tmp_path):
    out = tmp_path / "tiny"
    code = main(
        [
            "render",
            "--profile",
            "tiny",
            "--results",
            str(REPO / "results" / "tiny"),
            "--out",
            str(out),
            "--hardware",
            str(tmp_path / "none"),
        ]
    )
    assert code == 0
    table2 = pd.read_csv(table_paths(out, 2)["csv"])
    orl = table2[(table2["system"] == ORL) & (table2["suite"] == "tinycode")].iloc[0]
    assert orl["pass_at_1_lo"] < orl["pass_at_1"] < orl["pass_at_1_hi"]
    # The matched column agrees with the line's own pass@1 (the AR reference's, less the 0.01 tolerance).
    assert orl["matched"] == "yes" or orl["matched"].startswith(f"no: {orl['pass_at_1']:.3f} < reference ")
    assert "Residual Context Diffusion" in table_paths(out, 5)["md"].read_text()
    write_records(
        tmp_path / "x.jsonl", [scale("dlmrt", "tiny", 0.001, 0.0005)]
    )  # a folder with only Table 3b data
    assert (
        main(
            [
                "render",
                "--profile",
                "x",
                "--results",
                str(tmp_path),
                "--out",
                str(tmp_path / "r"),
                "--tables",
                "3b",
                "--no-index",
            ]
        )
        == 0
    )
    assert "| tiny | 16 |" in table_paths(tmp_path / "r", "3b")["md"].read_text()


def test_table5_has_lines_per_suite_each_computed_within_its_suite(claims, tmp_path):
    """Records of ORL and an ablation on two suites (config table5_suites): a block of lines per suite, each
    effect (ablation − ORL), interval and p-value and each AUP (at that suite's y_max) computed from that
    suite's records alone; the training cost shared; the suites named in the CSV, the markdown and the
    caption."""
    per_suite = {"tinycode": [quality(AR_HF, "hf", 30, nfe=20)],
                 "tinymath": [quality(AR_HF, "hf", 20, tokens=60, nfe=60, suite="tinymath")]}  # fmt: skip
    train = []
    for system, passed, nfe in ((ORL, (30, 31, 29), 2), (NO_AEC, (29, 30, 28), 3)):
        for seed, count in enumerate(passed):
            first, *rest = trained_line(system, seed, count, nfe)
            train.append(first)
            per_suite["tinycode"] += rest
    # On tinymath the ablation is slower and more accurate than ORL: the other sign from tinycode's pass@1.
    for system, passed, nfe in ((ORL, (20, 22, 21), 4), (NO_AEC, (25, 27, 26), 6)):
        for seed, count in enumerate(passed):
            per_suite["tinymath"] += [
                r for r in trained_line(system, seed, count, nfe, suite="tinymath") if r["kind"] != "train"
            ]
    results = tmp_path / "results"
    write_records(results / "train.jsonl", train)
    for suite, records in per_suite.items():
        write_records(results / f"{suite}.jsonl", records)
    frame = build_table5(train + per_suite["tinycode"] + per_suite["tinymath"], claims)
    assert list(dict.fromkeys(frame["suite"].dropna())) == ["tinycode", "tinymath"]
    math_no_aec = line(frame, system=NO_AEC, suite="tinymath")
    assert math_no_aec["pass_at_1"] == pytest.approx(26 / N) and math_no_aec["seeds"] == 3
    assert math_no_aec["pass_at_1_diff"] == pytest.approx(5 / N)  # 26 − 21 of 40, paired within tinymath
    assert math_no_aec["tpf_diff"] == pytest.approx(20 / 6 - 20 / 4)
    assert line(frame, system=NO_AEC, suite="tinycode")["pass_at_1_diff"] == pytest.approx(-1 / N)
    # Each block equals the table of its suite's records alone: every value, interval and p-value.
    columns = ["tpf", "tpf_lo", "tpf_hi", "pass_at_1", "pass_at_1_lo", "aup", "aup_lo", "aup_hi", "tpf_diff",
               "tpf_diff_p", "pass_at_1_diff_lo", "pass_at_1_diff_p", "aup_diff", "aup_diff_hi",
               "operating_point", "self_generated_tokens"]  # fmt: skip
    for suite in per_suite:
        alone = build_table5(train + per_suite[suite], claims)
        assert list(dict.fromkeys(alone["suite"].dropna())) == [suite]
        for system in (ORL, NO_AEC):
            both, one = line(frame, system=system, suite=suite), line(alone, system=system, suite=suite)
            for column in columns:
                assert both[column] == one[column] or (pd.isna(both[column]) and pd.isna(one[column])), (
                    suite, system, column)  # fmt: skip
    # AUP's y_max per suite: the best point of every seed's sweep there (31 + 2 and 27 + 2 of 40).
    (aup_note,) = [note for note in frame.attrs["notes"] if note.startswith("AUP:")]
    assert "tinycode 82.5%; tinymath 72.5%" in aup_note
    # The paper's claims (about the training runs) are compared once, on the first suite's ORL line.
    placed = frame[frame["claim"].notna() & (frame["system"] == ORL)]
    assert len(placed) >= 1 and set(placed["suite"]) == {"tinycode"}
    code = main(["render", "--profile", "x", "--results", str(results), "--out", str(tmp_path / "r"),
                 "--hardware", str(tmp_path / "none"), "--tables", "5", "--no-index"])  # fmt: skip
    assert code == 0
    csv_lines = pd.read_csv(table_paths(tmp_path / "r", 5)["csv"])
    assert set(csv_lines[csv_lines["system"] == NO_AEC]["suite"]) == {"tinycode", "tinymath"}
    md = table_paths(tmp_path / "r", 5)["md"].read_text()
    assert "**tinycode**" in md and "**tinymath**" in md and "Lines per suite (tinycode, tinymath)" in md
