"""Tables, formats, figures and AUP from synthetic records built with orl.records.make_record."""

from __future__ import annotations

import csv
import math

import pandas as pd
import pytest

from orl.cli import main
from orl.decoding import Policy
from orl.errors import InputError
from orl.records import load_record_tree, make_record, not_run, validate_record, write_records
from orl.records.schema import SPLIT_KINDS
from orl.report.claims import DEFAULT_CLAIMS_PATH, load_claims
from orl.report.figures import figure_paths, write_figures
from orl.report.measure import y_max_of
from orl.report.render import table_paths, write_table
from orl.report.select import Want
from orl.report.tables import build_table1, build_table2, build_table3, build_table4, build_table5

H100 = "NVIDIA H100 80GB HBM3"


def rec(
    kind,
    system,
    engine,
    metrics,
    *,
    model="tiny-qwendlm",
    precision="float32",
    suite="tinycode",
    gpu=None,
    created=None,
    policy=None,
    extra=None,
    per_problem=None,
    sha=None,
    n_problems=None,
):
    record = make_record(kind, system=system, engine=engine, model={"name": model, "precision": precision,
                         "ckpt_sha256": sha}, metrics=metrics, suite=suite, policy=policy, extra=extra,
                         per_problem=per_problem, n_problems=n_problems,
                         split="test" if kind in SPLIT_KINDS else None)  # fmt: skip
    record["env"]["gpu_name"] = gpu
    if created:
        record["created"] = created
    validate_record(record)
    return record


@pytest.fixture(scope="module")
def claims():
    return load_claims(DEFAULT_CLAIMS_PATH)


def row(frame, claim=None, **where):
    selected = frame
    for column, value in where.items():
        selected = selected[selected[column] == value]
    if claim is not None:
        selected = selected[selected["claim"] == claim]
    assert len(selected) >= 1, f"no row {where} {claim}"
    return selected.iloc[0]


# ------------------------------------------------------------------------------------ Table 2


def table2_records(gpu=None, model="tiny-qwendlm"):
    ar_model = "tiny-ar"
    return [
        rec(
            "latency",
            "AR (ours: static cache, compiled)",
            "ar-compiled",
            {"tpf": 1.0, "latency_median_s": 1.0, "latency_p90_s": 1.2, "tokens_per_s": 80.0},
            model=ar_model,
            gpu=gpu,
        ),
        rec(
            "latency",
            "AR (hf)",
            "hf",
            {"tpf": 1.0, "latency_median_s": 2.0, "latency_p90_s": 2.5, "tokens_per_s": 50.0},
            model=ar_model,
            gpu=gpu,
        ),
        rec("quality", "AR (hf)", "hf", {"pass_at_1": 0.40, "tpf": 1.0}, model=ar_model, gpu=gpu),
        rec(
            "latency",
            "AR + DFlash (vLLM)",
            "vllm",
            {"tpf": 2.5, "latency_median_s": 1.0, "latency_p90_s": 1.2, "tokens_per_s": 100.0},
            model=ar_model,
            gpu=gpu,
        ),
        rec(
            "latency",
            "AR + block-diffusion drafter (ours, DFlash-style)",
            "dflash",
            {"tpf": 2.0, "latency_median_s": 1.5, "latency_p90_s": 1.7, "tokens_per_s": 80.0},
            model=ar_model,
            gpu=gpu,
        ),
        rec(
            "latency",
            "dLLM + ORL",
            "dlmrt",
            {"tpf": 4.0, "latency_median_s": 0.5, "latency_p90_s": 0.6, "tokens_per_s": 200.0},
            model=model,
            gpu=gpu,
        ),
        rec("quality", "dLLM + ORL", "dlmrt", {"pass_at_1": 0.39, "tpf": 4.0}, model=model, gpu=gpu),
        not_run("latency", system="AR (vLLM)", engine="vllm", reason="needs CUDA and vllm", suite="tinycode"),
    ]


def test_table2_measured_missing_and_not_run_rows(claims):
    frame = build_table2(table2_records(), claims)
    assert list(dict.fromkeys(frame["system"])) == [
        "AR (ours: static cache, compiled)", "AR (hf)", "AR (vLLM)", "AR (SGLang)", "AR + draft (hf "
        "assisted)",
        "AR + draft (hf assisted, relaxed)", "AR + draft (vLLM)", "AR + draft (SGLang STANDALONE)",
        "AR + EAGLE3 (vLLM)", "AR + EAGLE3 (vLLM, relaxed)", "AR + EAGLE3 (SGLang)",
        "AR + EAGLE3 (SGLang, relaxed)", "AR + DFlash (vLLM)", "AR + DFlash (vLLM, relaxed)",
        "AR + DFlash (SGLang)", "AR + DFlash (SGLang, relaxed)",
        "AR + block-diffusion drafter (ours, DFlash-style)",
        "AR + block-diffusion drafter (ours, DFlash-style, relaxed)",
        "dLLM base", "TraDo base", "dLLM + ORL", "dLLM + ORL NVFP4",
    ]  # fmt: skip
    ar = row(frame, system="AR (hf)")
    assert ar["status"] == "measured" and ar["pass_at_1"] == 0.40 and ar["speedup_vs_ar_hf"] == 1.0
    assert ar["speedup_vs_ar"] == pytest.approx(50 / 80) and ar["matched"].startswith("the reference")
    assert row(frame, system="AR (ours: static cache, compiled)")["speedup_vs_ar"] == 1.0
    orl = row(frame, system="dLLM + ORL")
    assert orl["status"] == "measured" and orl["tpf"] == 4.0 and orl["speedup_vs_ar"] == 200 / 80
    assert orl["speedup_vs_ar_hf"] == 4.0 and orl["suite"] == "tinycode"
    # A "not run" record keeps its reason; a missing record says what was expected.
    assert row(frame, system="AR (vLLM)")["status"] == "not run: needs CUDA and vllm"
    eagle = row(frame, system="AR + EAGLE3 (vLLM)")
    assert eagle["status"].startswith("not run: no record (expected a record of kind 'latency'")
    assert "needs vllm: on a CPU its CPU build" in eagle["status"] and pd.isna(eagle["tokens_per_s"])
    assert row(frame, system="dLLM + ORL NVFP4")["status"].startswith("not run: no record")
    assert set(frame["status"]) <= {"measured"} | {s for s in frame["status"] if s.startswith("not run: ")}


def test_table2_shows_a_speculative_lines_acceptance_length_beside_its_tpf(claims):
    """TPF counts decode forwards one way for every line; a speculative line also shows its engine's mean
    acceptance length (they differ by undrafted forwards and a cut-short last step), a line that drafts
    nothing shows none."""
    spec = {"tpf": 2.5, "nfe_prefill_mean": 1.0, "acceptance_length": 2.4, "latency_median_s": 1.0,
            "latency_p90_s": 1.2, "tokens_per_s": 100.0}  # fmt: skip
    records = [
        *[r for r in table2_records() if r["system"] != "AR + DFlash (vLLM)"],
        rec("latency", "AR + DFlash (vLLM)", "vllm", spec, model="tiny-ar"),
    ]
    frame = build_table2(records, claims)
    dflash = row(frame, system="AR + DFlash (vLLM)")
    assert dflash["verification"] == "strict" and dflash["tpf"] == 2.5 and dflash["acceptance_length"] == 2.4
    assert pd.isna(row(frame, system="AR (hf)")["acceptance_length"])
    assert pd.isna(row(frame, system="dLLM + ORL")["acceptance_length"])


def test_table2_ratio_rules_across_hardware(claims):
    orl_claim = "t2-qwendlm4b-orl-dlmrt-tokens-per-s"
    # CPU: raw tokens/s is never set against the H100's; the ratio ORL/DFlash is set against the paper's
    # ORL/DFlash-strict (our speculative rows verify strictly): (200/100)/(1298/573) for the seeds' figure,
    # (200/100)/(933/573) for the page's.
    cpu = build_table2(table2_records(), claims)
    orl = row(cpu, claim=orl_claim, system="dLLM + ORL")
    assert orl["paper"] == 1298
    assert orl["ratio"] == pytest.approx((200 / 100) / (1298 / 573))
    page = row(cpu, claim="t2-qwendlm4b-orl-dlmrt-tokens-per-s-page", system="dLLM + ORL")
    assert page["paper"] == 933 and page["ratio"] == pytest.approx((200 / 100) / (933 / 573))
    assert (
        "relative to AR + DFlash (vLLM)" in orl["compared"]
        and "raw tokens_per_s not compared" in orl["compared"]
    )
    # Our DFlash-style drafter is a CPU baseline: DFlash's figure is never set against it.
    ours = row(cpu, system="AR + block-diffusion drafter (ours, DFlash-style)")
    assert ours["status"] == "measured" and pd.isna(ours["paper"])
    dflash = row(cpu, claim="t2-dflash-vllm-strict-tokens-per-s")
    assert dflash["ratio"] == pytest.approx((100 / 200) / (573 / 933))
    # The paper's relaxed figures stand on vLLM's relaxed lines, not run: vLLM has no relaxed acceptance rule.
    relaxed = row(cpu, claim="t2-dflash-vllm-tokens-per-s")
    assert relaxed["system"] == "AR + DFlash (vLLM, relaxed)" and relaxed["verification"] == "relaxed"
    assert relaxed["status"].startswith("not run: ") and "no relaxed acceptance rule" in relaxed["status"]
    assert pd.isna(relaxed["ratio"]) and relaxed["paper"] == 746

    # Same GPU and same model as the claim: raw tokens/s is compared.
    same = build_table2(table2_records(gpu=H100, model="QwenDLM-4B-ORL"), claims)
    orl = row(same, claim=orl_claim)
    assert orl["ratio"] == pytest.approx(200 / 1298) and "same GPU" in orl["compared"]

    # Same GPU, different model: not raw; another GPU (H200 is not an H100): not raw either.
    for gpu, model in ((H100, "tiny-qwendlm"), ("NVIDIA H200", "QwenDLM-4B")):
        frame = build_table2(table2_records(gpu=gpu, model=model), claims)
        orl = row(frame, claim=orl_claim)
        assert orl["ratio"] == pytest.approx((200 / 100) / (1298 / 573))
        assert "relative to" in orl["compared"]


def test_table2_latest_record_wins_and_is_noted(claims):
    records = table2_records() + [
        rec("latency", "dLLM + ORL", "dlmrt", {"tpf": 5.0, "tokens_per_s": 300.0, "latency_median_s": 0.4},
            created="2999-01-01T00:00:00Z"),
    ]  # fmt: skip
    orl = row(build_table2(records, claims), system="dLLM + ORL")
    assert orl["tokens_per_s"] == 300.0 and "latest is shown" in orl["note"]


def test_a_dev_record_chooses_a_point_but_never_fills_a_table_line(claims):
    """The operating point's dev record (docs/metrics.md "Splits") is newer than the test one, yet the line
    shows the test record: a point chosen on dev is reported on test."""
    dev = rec(
        "quality", "dLLM + ORL", "dlmrt", {"pass_at_1": 0.99, "tpf": 9.0}, created="2999-01-01T00:00:00Z"
    )
    dev["split"] = "dev"
    test = rec("quality", "dLLM + ORL", "dlmrt", {"pass_at_1": 0.52, "tpf": 4.5})
    frame = build_table1([test, dev], claims)
    assert row(frame, model="tiny QwenDLM", variant="+ORL", suite="tinycode")["tpf"] == pytest.approx(4.5)
    only_dev = row(build_table1([dev], claims), model="tiny QwenDLM", variant="+ORL", suite="tinycode")
    assert only_dev["status"].startswith("not run: no record")
    # The caption says where the points were chosen: on the sweeps' split.
    sweep = rec("sweep", "dLLM + ORL", "dlmrt", {"pass_at_1": 0.5, "tpf": 4.0},
                policy=Policy("threshold", 0.5).to_record())  # fmt: skip
    sweep["split"] = "dev"
    assert any(
        "chosen on each suite's dev split" in note
        for note in build_table1([test, sweep], claims).attrs["notes"]
    )
    sweep["split"] = "test"
    assert any(
        "chosen on the test problems" in note for note in build_table1([test, sweep], claims).attrs["notes"]
    )


# ------------------------------------------------------------------------------------ Tables 1, 3, 4, 5


def test_table1_gains_and_shape_comparison(claims):
    records = [
        rec("quality", "dLLM base", "dlmrt", {"pass_at_1": 0.50, "tpf": 1.5}),
        rec("latency", "dLLM base", "dlmrt", {"tokens_per_s": 40.0, "latency_median_s": 1.0}),
        rec("quality", "dLLM + ORL", "dlmrt", {"pass_at_1": 0.52, "tpf": 4.5}),
        rec("latency", "dLLM + ORL", "dlmrt", {"tokens_per_s": 100.0, "latency_median_s": 0.4}),
        rec("quality", "dLLM + ORL", "dlmrt", {"pass_at_1": 0.01, "tpf": 3.0}, suite="humaneval"),
    ]
    frame = build_table1(records, claims)
    orl = row(frame, claim="t1-qwendlm4b-tpf-gain", model="tiny QwenDLM", variant="+ORL", suite="tinycode")
    assert orl["tpf_gain"] == pytest.approx(3.0) and orl["throughput_gain"] == pytest.approx(2.5)
    assert orl["ratio"] == pytest.approx(3.0 / 6.2)
    assert row(frame, claim="t1-qwendlm4b-throughput-gain", model="tiny QwenDLM")["ratio"] == pytest.approx(
        2.5 / 6.9
    )
    # HumanEval +ORL measured but its base is missing: no gain, and the base row says what is missing.
    he = frame[(frame["model"] == "tiny QwenDLM") & (frame["suite"] == "humaneval")]
    assert he[he["variant"] == "+ORL"].iloc[0]["pass_at_1"] == 0.01
    assert pd.isna(he[he["variant"] == "+ORL"].iloc[0]["tpf_gain"])
    assert he[he["variant"] == "base"].iloc[0]["status"].startswith("not run: no record")
    assert "no measured 'latency' record" in he[he["variant"] == "+ORL"].iloc[0]["note"]
    # Paper families are expected rows; pass@1 of another model is never compared.
    qwen = row(frame, claim="t1-qwendlm4b-humaneval-orl", model="QwenDLM-4B")
    assert qwen["status"].startswith("not run: no record") and "paper profile" in qwen["status"]


def test_table3_speedups_and_setting_check(claims):
    bench = "engine_bench"
    records = [
        rec(bench, "dLLM + ORL", "dlmrt", {"tokens_per_s": 300.0, "tpf": 3.2, "latency_median_s": 0.2}),
        rec(bench, "dLLM + ORL", "dlmrt-eager", {"tokens_per_s": 150.0, "tpf": 3.2, "latency_median_s": 0.4}),
        rec(bench, "dLLM + ORL", "reference", {"tokens_per_s": 50.0, "tpf": 3.0, "latency_median_s": 1.2}),
        rec(
            bench,
            "dLLM + ORL",
            "sglang",
            {"tokens_per_s": 200.0, "tpf": 3.2, "latency_median_s": 0.3},
            gpu=H100,
        ),
    ]
    frame = build_table3(records, claims)
    dlmrt = row(frame, setup="dlmrt (graph-captured)")
    assert dlmrt["speedup_vs_reference"] == 6.0 and dlmrt["speedup_vs_serving"] == 1.5
    assert dlmrt["same_tpf"] == "yes" and dlmrt["ratio"] == pytest.approx(1.5 / 1.2)
    assert "within the paper's range" in dlmrt["compared"]
    assert row(frame, setup="reference decoder")["same_tpf"].startswith("no (3 vs dlmrt 3.2)")
    assert row(frame, setup="vLLM")["status"].startswith("not run: no record")
    # Without a serving stack measured, the claim has no ratio and the note says why.
    cpu = build_table3(records[:3], claims)
    dlmrt = row(cpu, setup="dlmrt (graph-captured)")
    assert pd.isna(dlmrt["ratio"]) and "needs CUDA" in dlmrt["note"]


def hardware_record(
    tokens_per_s,
    *,
    gpu="NVIDIA GeForce RTX 5090",
    model="LLaDA-2.1-mini-ORL",
    precision="nvfp4-w4a4",
    gpu_count=1,
):
    extra = {"gpu_count": gpu_count} if gpu_count > 1 else None
    return rec(
        "latency",
        "dLLM + ORL",
        "dlmrt",
        {"tokens_per_s": tokens_per_s, "tpf": 5.0, "latency_median_s": 0.1},
        model=model,
        precision=precision,
        gpu=gpu,
        suite="humaneval",
        extra=extra,
    )


def test_table4_peaks_and_raw_comparison_on_the_claimed_gpu(claims):
    records = [hardware_record(2500.0), hardware_record(2600.0), hardware_record(900.0, gpu=H100)]
    frame = build_table4(records, claims)
    rtx = row(frame, claim="t4-rtx5090-llada21mini-orl-nvfp4-tokens-per-s")
    assert rtx["tokens_per_s"] == 2600.0 and rtx["submissions"] == 2
    assert rtx["ratio"] == pytest.approx(2600 / 2788)
    h100 = row(frame, gpu=H100)
    assert h100["status"] == "measured" and pd.isna(h100["claim"])
    b200 = row(frame, claim="t4-8xb200-diffusiongemma26b-orl-nvfp4-tokens-per-s")
    assert b200["status"].startswith("not run: no record") and "8x B200" in b200["status"]
    # 8 B200s match the 8x B200 claim; one B200 does not.
    one = build_table4([hardware_record(7000.0, gpu="NVIDIA B200", model="DiffusionGemma-26B-MoE")], claims)
    assert row(one, claim="t4-8xb200-diffusiongemma26b-orl-nvfp4-tokens-per-s")["status"].startswith(
        "not run"
    )
    eight = build_table4(
        [hardware_record(7000.0, gpu="NVIDIA B200", model="DiffusionGemma-26B-MoE", gpu_count=8)], claims
    )
    assert row(eight, claim="t4-8xb200-diffusiongemma26b-orl-nvfp4-tokens-per-s")["ratio"] == pytest.approx(
        7000 / 7708
    )


def test_table5_aup_training_speed_and_missing_ablations(claims):
    sweep = [
        rec(
            "sweep",
            "dLLM + ORL",
            "dlmrt",
            {"tpf": tpf, "pass_at_1": acc},
            policy={"name": "threshold", "params": {"tau": tau}},
        )
        for tau, tpf, acc in ((0.9, 2.0, 0.6), (0.7, 4.0, 0.56))
    ]
    records = sweep + [
        rec("quality", "dLLM + ORL", "dlmrt", {"tpf": 4.0, "pass_at_1": 0.5}),
        rec(
            "train",
            "dLLM + ORL",
            "torch",
            {"self_generated_tokens": 120000, "train_wall_s": 900.0, "step_tokens_per_s": 8000.0},
            suite=None,
            extra={"packing": True},
        ),
        rec(
            "train",
            "dLLM + ORL",
            "torch",
            {"step_tokens_per_s": 2000.0},
            suite=None,
            extra={"packing": False},
        ),
        rec("quality", "ORL: no AEC", "dlmrt", {"tpf": 2.0, "pass_at_1": 0.45}),
    ]
    frame = build_table5(records, claims)
    orl = row(frame, claim="t5-train-step-speedup", system="dLLM + ORL")
    # d3LLM's AUP with y_max = 60 (the table's best point): 2 * 60 + 0.5 * (4 - 2) * (56 W(56) + 60 W(60)),
    # W(56) = exp(-3 (1 - 56/60)) = exp(-0.2), W(60) = 1.
    assert orl["aup"] == pytest.approx(120 + 56 * math.exp(-0.2) + 60) and orl["aup_dropped"] == 0
    assert orl["train_step_speedup"] == 4.0 and orl["ratio"] == pytest.approx(4.0 / 5.2)
    assert pd.isna(orl["train_gpu_hours"])  # trained on the CPU: no GPU-hours to set against 36 H100-hours
    tokens = row(frame, claim="t5-llada21mini-self-generated-tokens")
    assert (
        tokens["self_generated_tokens"] == 120000
        and pd.isna(tokens["ratio"])
        and "model differs" in tokens["compared"]
    )
    no_aec = row(frame, system="ORL: no AEC")
    assert pd.isna(no_aec["aup"]) and "no sweep records" in no_aec["note"]
    assert "no measured 'train' record" in no_aec["note"]
    assert row(frame, system="dParallel (certainty forcing)")["status"].startswith("not run: no record")


def test_aup_y_max_reads_every_sweep_point_of_every_seed():
    """Two runs (seeds) swept at the same τ: the older holds the best accuracy; y_max is still its 62%."""

    def point(tau, acc, created):
        return rec(
            "sweep",
            "dLLM + ORL",
            "dlmrt",
            {"tpf": 2.0, "pass_at_1": acc},
            created=created,
            policy={"name": "threshold", "params": {"tau": tau}},
        )

    records = [
        point(0.9, 0.62, "2026-01-01T00:00:00Z"),
        point(0.9, 0.60, "2026-01-02T00:00:00Z"),
        point(0.7, 0.55, "2026-01-02T00:00:00Z"),
    ]
    want = Want("dLLM + ORL", "dlmrt", ("sweep",))
    assert y_max_of(records, [want], "tinycode") == pytest.approx(62.0)
    assert y_max_of(records[1:], [want], "tinycode") == pytest.approx(60.0)
    assert y_max_of([], [want], "tinycode") is None


def test_table5_training_cost_per_device(claims):
    """World size, device-hours, tokens/s and peak memory per device from the train records (issue: training
    at scale); GPU-hours only where the devices are GPUs, and those are what the 36 H100-hours claim reads."""
    quality = rec("quality", "dLLM + ORL", "dlmrt", {"tpf": 4.0, "pass_at_1": 0.5})
    cpu = rec("train", "dLLM + ORL", "dlmrt", {"self_generated_tokens": 5000, "train_wall_s": 1800.0,
              "train_tokens_per_s": 250.0, "peak_memory_bytes": 1_500_000_000}, suite=None,
              extra={"world_size": 2, "device": "cpu", "device_hours": 1.0})  # fmt: skip
    frame = build_table5([quality, cpu], claims)
    orl = row(frame, claim="t5-llada21mini-train-gpu-hours", system="dLLM + ORL")
    assert orl["world_size"] == 2 and orl["device_hours"] == pytest.approx(1.0)
    assert orl["train_tokens_per_s"] == 250.0 and orl["peak_memory_gb"] == pytest.approx(1.5)
    assert pd.isna(orl["train_gpu_hours"]) and pd.isna(orl["ratio"])
    gpu = rec(
        "train",
        "dLLM + ORL",
        "dlmrt",
        {
            "self_generated_tokens": 4_000_000,
            "train_wall_s": 3600.0 * 4.5,
            "train_gpu_hours": 36.0,
            "train_tokens_per_s": 900.0,
            "peak_memory_bytes": 60_000_000_000,
        },
        suite=None,
        gpu="NVIDIA H100 80GB HBM3",
        extra={"world_size": 8, "device": "cuda"},
    )
    frame = build_table5([quality, gpu], claims)
    orl = row(frame, claim="t5-llada21mini-train-gpu-hours", system="dLLM + ORL")
    # No extra.device_hours: world size x wall.
    assert orl["world_size"] == 8 and orl["device_hours"] == pytest.approx(36.0)
    assert orl["train_gpu_hours"] == pytest.approx(36.0) and orl["peak_memory_gb"] == pytest.approx(60.0)


# ------------------------------------------------------------------------------------ files


def test_three_formats_written(claims, tmp_path):
    frame = build_table2(table2_records(), claims)
    written = write_table(frame, tmp_path, claims)
    paths = table_paths(tmp_path, 2)
    assert sorted(written) == sorted(paths.values())
    with paths["csv"].open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert "status" in rows[0] and len(rows) == len(frame)
    assert {r["status"] for r in rows if r["system"] == "AR (vLLM)"} == {"not run: needs CUDA and vllm"}
    md = paths["md"].read_text()
    assert "| system | engine |" in md and "single-request (batch size 1) peaks" in md
    assert "t2-dflash-vllm-tokens-per-s" in md and '"DFlash reaches 746 tokens/s"' in md
    tex = paths["tex"].read_text()
    assert "\\begin{tabular}" in tex and "AR + draft (hf assisted)" in tex
    assert "t2\\_dflash" not in tex and "tokens\\_per\\_s" in tex  # underscores escaped


def test_figures_png_and_pdf(claims, tmp_path):
    records = (
        table2_records()
        + [
            rec(
                "sweep",
                system,
                "dlmrt",
                {"tpf": tpf, "pass_at_1": acc},
                policy={"name": "threshold", "params": {"tau": tau}},
            )
            for system, points in (
                ("dLLM base", ((0.9, 1.2, 0.5), (0.5, 2.0, 0.3))),
                ("dLLM + ORL", ((0.9, 2.5, 0.5), (0.5, 5.0, 0.45))),
            )
            for tau, tpf, acc in points
        ]
        + [
            rec("entropy", "dLLM base", "dlmrt", {}, extra={"mean_entropy_per_step": [2.0, 1.8, 1.5, 1.1]}),
            rec("entropy", "dLLM + ORL", "dlmrt", {}, extra={"mean_entropy_per_step": [2.0, 1.0, 0.4]}),
        ]
    )
    written = write_figures(records, build_table2(records, claims), tmp_path)
    expected = [p for pair in figure_paths(tmp_path).values() for p in pair]
    assert sorted(written) == sorted(expected)
    for path in expected:
        data = path.read_bytes()
        assert data.startswith(b"\x89PNG" if path.suffix == ".png" else b"%PDF") and len(data) > 1000
    # No records at all: the figures still exist and say so.
    empty = write_figures([], build_table2([], claims), tmp_path / "empty")
    assert all(path.is_file() for path in empty)


def test_render_command_writes_tables_figures_and_index(tmp_path, capsys):
    results, out = tmp_path / "results", tmp_path / "reports"
    write_records(results / "bench" / "table2.jsonl", table2_records())
    (results / "ckpt" / "tiny").mkdir(parents=True)
    (results / "ckpt" / "tiny" / "train_log.jsonl").write_text('{"step": 1, "loss": 2.3}\n')  # not a record
    code = main(["render", "--profile", "smoke", "--results", str(results), "--out", str(out), "--figures",
                 "--hardware", str(tmp_path / "no-hardware")])  # fmt: skip
    assert code == 0
    for table in (1, 2, 3, "3b", 4, 5):
        assert all(path.is_file() for path in table_paths(out, table).values())
    index = (out / "index.md").read_text()
    assert "[md](table2.md)" in index and "figures/tokens_per_s.png" in index and "not rendered" not in index
    assert (
        main(["render", "--profile", "smoke", "--results", str(tmp_path / "absent"), "--out", str(out)]) == 2
    )
    assert main(["render", "--profile", "smoke", "--results", str(results), "--tables", "2,9"]) == 2
    assert (
        main(
            [
                "render",
                "--profile",
                "smoke",
                "--results",
                str(results),
                "--out",
                str(out),
                "--tables",
                "3b",
                "--no-index",
                "--hardware",
                str(tmp_path / "no-hardware"),
            ]
        )
        == 0
    )
    # Records no table row reads, or none at all: the render says so (records loaded once, both uses).
    stray = tmp_path / "stray"
    write_records(stray / "r.jsonl", [{**table2_records()[0], "system": "Nobody's system"}])
    (tmp_path / "empty").mkdir()
    capsys.readouterr()
    fixed = ["--out", str(tmp_path / "o"), "--tables", "2", "--no-index", "--hardware", str(tmp_path / "x")]
    for folder, warning in ((stray, "Nobody's system"), (tmp_path / "empty", "no records; every table line")):
        assert main(["render", "--profile", "smoke", "--results", str(folder), *fixed]) == 0
        assert warning in capsys.readouterr().err
    # A broken record file stops the render, naming the file and line.
    (results / "bench" / "broken.jsonl").write_text('{"kind": "latency"}\n')
    with pytest.raises(InputError, match=r"broken\.jsonl line 1"):
        load_record_tree(results)


def test_index_names_what_is_not_rendered(tmp_path):
    from orl.report.index import write_index

    index = write_index(tmp_path, "tiny").read_text()
    assert "Table 3: dlmrt against general serving stacks" in index
    assert "not rendered yet (`orl render --profile tiny --tables 3`)" in index
    assert "not rendered yet (`orl render --profile tiny --figures`)" in index
