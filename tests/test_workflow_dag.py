"""orl/workflow_dag.py: the DAG's functions, called without Snakemake (the DAG itself: test_dag.py)."""

import re

from orl.engines.serving import VLLM_ENV_MISSING
from orl.records import load_records
from orl.rows import ROW
from orl.workflow_dag import Jobs, Plan, Seeds, one_of, run_id, runnable, write_not_run
from orl.workflow_vllm import VllmPlan

DERIVED = frozenset({"orl-nvfp4", "orl-sdar"})


def tiny_plan(**fields) -> Plan:
    """A CPU profile that trains everything, ORL on seeds 0 and 1."""
    trained = frozenset({"orl", "orl-no_gate"})
    values = dict(profile="tiny", results="results/tiny", ckpt_dir="results/tiny/ckpt", device="cpu",
                  vllm_python="", seeds=Seeds(trains=True, seeds=[0, 1]), suites=["tinycode", "humaneval"],
                  given={}, trained_keys=trained, derived=DERIVED,
                  built_here=DERIVED | trained | {"ar", "draft", "dlm", "eagle3"})  # fmt: skip
    return Plan(**{**values, **fields})


def paper_plan(given: dict) -> Plan:
    """The paper profile without a preset: it trains nothing and reads its checkpoints from `given`."""
    return Plan(profile="paper", results="results/paper", ckpt_dir="results/paper/ckpt", device="cuda",
                vllm_python=None, seeds=Seeds(trains=False, seeds=[None]), suites=["humaneval"], given=given,
                trained_keys=frozenset(), derived=DERIVED, built_here=DERIVED)  # fmt: skip


def test_run_ids_and_wildcard_constraints():
    assert run_id(ROW["orl"], None) == "orl" and run_id(ROW["orl"], 1) == "orl_seed1"
    pattern = one_of(["a.b", "c"])
    assert re.fullmatch(pattern, "a.b") and re.fullmatch(pattern, "c") and not re.fullmatch(pattern, "axb")
    assert not re.fullmatch(one_of([]), "") and not re.fullmatch(one_of([]), "anything")


def test_operating_points_are_chosen_on_the_choose_split_and_the_rows_read_test():
    dev, test = tiny_plan(choose_split="dev"), tiny_plan(choose_split="test")
    # On dev: the AR reference and the chosen point's record lie apart from the test records the tables read.
    assert (
        dev.choose_file(ROW["ar_hf"], None, "tinycode") == "results/tiny/quality/tinycode/dev/row_ar_hf.jsonl"
    )
    assert (
        dev.choose_file(ROW["orl"], 1, "tinycode") == "results/tiny/quality/tinycode/dev/op_orl_seed1.jsonl"
    )
    assert dev.quality_file(ROW["orl"], 1, "tinycode") == "results/tiny/quality/tinycode/op_orl_seed1.jsonl"
    # On test (records made before the dev splits) the row's own record is the choosing one.
    assert test.choose_file(ROW["orl"], 1, "tinycode") == test.quality_file(ROW["orl"], 1, "tinycode")


def test_trained_rows_run_once_per_seed_and_decode_their_own_seed():
    plan = tiny_plan()
    assert plan.seeds.seeds_of(ROW["orl"]) == [0, 1] and plan.seeds.seeds_of(ROW["ar_hf"]) == [None]
    runs = plan.seeds.runs_of([ROW["orl"], ROW["ar_hf"]], primary_only=True)
    assert runs == [(ROW["orl"], 0), (ROW["ar_hf"], None)]
    assert plan.ckpt("orl", 1) == "results/tiny/ckpt/orl_seed1"
    assert plan.ckpt("orl") == "results/tiny/ckpt/orl_seed0"
    assert plan.ckpt_done("ar") == "results/tiny/ckpt/ar/config.json"
    # NVFP4 is quantized from the primary seed's ORL and decodes at ORL's operating point of that seed.
    assert plan.ckpt_of(ROW["orl_nvfp4"], None) == ("orl-nvfp4", None)
    assert plan.point_file(ROW["orl_nvfp4"], None, "tinycode", strict=True) == (
        "results/tiny/oppoint/strict/tinycode/orl_seed0.json"
    )
    assert plan.quality_file(ROW["orl"], 1, "humaneval") == (
        "results/tiny/quality/humaneval/op_orl_seed1.jsonl"
    )
    assert plan.train_file(ROW["orl"], 1) == "results/tiny/train/orl_seed1.jsonl"
    flags = plan.row_flags(ROW["orl"], 1, "tinycode")
    assert "--ckpt results/tiny/ckpt/orl_seed1" in flags
    assert "--policy @results/tiny/oppoint/tinycode/orl_seed1.json" in flags
    assert plan.row_inputs(ROW["orl"], 1, "tinycode") == [
        "results/tiny/ckpt/orl_seed1/config.json",
        "results/tiny/oppoint/tinycode/orl_seed1.json",
    ]
    assert plan.sweep_suites(ROW["orl"]) == ["tinycode", "humaneval"]


def test_missing_says_why_a_row_cannot_run(tmp_path):
    given_ar = tmp_path / "Qwen3-4B"
    given_ar.mkdir()
    (given_ar / "config.json").write_text("{}")
    plan = paper_plan({"ar": str(given_ar), "dlm": str(tmp_path / "absent")})
    assert plan.ckpt("ar") == str(given_ar) and plan.ckpt_missing("ar") is None
    assert plan.ckpt_missing("dlm") == (
        f"checkpoint not found at {tmp_path / 'absent'} (checkpoints.dlm: a local folder with config.json)"
    )
    assert plan.ckpt_missing("draft") == (
        "no draft checkpoint on the paper profile (checkpoints.draft: a local directory; "
        "nothing is downloaded)"
    )
    # Quantized from orl, which the paper profile neither trains (no preset) nor is given.
    assert plan.ckpt_missing("orl-nvfp4") == plan.ckpt_missing("orl") and plan.ckpt("orl") is None
    assert plan.missing(ROW["ar_hf"]) is None
    assert plan.missing(ROW["ar_hf_assisted"]) == plan.ckpt_missing("draft")
    # A serving stack on a CPU profile: SGLang says what it needs, vLLM needs its CPU environment.
    cpu = tiny_plan()
    assert cpu.missing(ROW["ar_sglang"]) == ROW["ar_sglang"].needs
    assert cpu.missing(ROW["ar_vllm"]) == VLLM_ENV_MISSING
    assert cpu.missing(ROW["orl"]) is None


def test_table_inputs_and_not_run_records(tmp_path):
    plan = tiny_plan()
    latency = [(ROW["orl"], 0, "tinycode"), (ROW["ar_hf"], None, "tinycode")]
    jobs = Jobs(run={"orl": ROW["orl"], "ar_hf": ROW["ar_hf"]}, latency=latency, quality_rows=[ROW["ar_hf"]],
                quality=[], sweep_rows=[ROW["orl"]], sweep=[(ROW["orl"], 0, "tinycode")], extra=[],
                extra_missing=[], serving_bench_rows=[],
                packing_file="results/tiny/train/packing.jsonl")  # fmt: skip
    assert plan.table_inputs(2, jobs) == sorted(
        {
            "results/tiny/latency/tinycode/orl_seed0.jsonl",
            "results/tiny/latency/tinycode/ar_hf.jsonl",
            "results/tiny/quality/tinycode/op_orl_seed0.jsonl",
            "results/tiny/quality/tinycode/row_ar_hf.jsonl",
            "results/tiny/quality/humaneval/row_ar_hf.jsonl",
            "results/tiny/sweep/tinycode/orl_seed0.jsonl",
        }
    )
    assert plan.table_inputs(3, jobs) == [
        "results/tiny/engine/tinycode/bench.jsonl",
        "results/tiny/engine/humaneval/bench.jsonl",
    ]
    out = str(tmp_path / "row_ar_hf.jsonl")
    not_run_files = {out: ("quality", ROW["ar_hf"], "no ar checkpoint", "tinycode")}
    assert runnable(latency, lambda row, seed, suite: out if row.key == "ar_hf" else "x", not_run_files) == [
        "orl_seed0"
    ]
    write_not_run(out, not_run_files, {"ar": "/models/Qwen3-4B/"})
    (record,) = load_records(out)
    assert record["status"] == "not run: no ar checkpoint" and record["model"]["name"] == "Qwen3-4B"
    assert record["system"] == ROW["ar_hf"].system and record["suite"] == "tinycode"


def test_vllm_serves_our_checkpoints_from_their_qwen3_export():
    vllm = VllmPlan(plan=tiny_plan(), exported=frozenset({"ar", "draft"}))
    row = ROW["ar_vllm_draft"]
    assert vllm.inputs(row, "tinycode") == [
        "results/tiny/ckpt/ar-qwen3/config.json",
        "results/tiny/ckpt/draft-qwen3/config.json",
        "results/tiny/oppoint/tinycode/spec_ar_vllm_draft.json",
    ]
    assert vllm.flags(row, "tinycode", sweep=False) == (
        f"--engine vllm --method draft_model --ckpt results/tiny/ckpt/ar-qwen3 --system '{row.system}' "
        "--draft results/tiny/ckpt/draft-qwen3"
    )


def test_the_eagle3_head_trained_here_is_served_as_written(tmp_path):
    """The AR target's EAGLE-3 head (rule train_eagle3) is written in vLLM's layout: served from its own
    folder beside the target's Qwen3 export; the row runs where vLLM's environment is, else says why."""
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    row = ROW["ar_vllm_eagle3"]
    plan = tiny_plan(vllm_python=str(python))
    assert plan.missing(row) is None and plan.ckpt("eagle3") == "results/tiny/ckpt/eagle3"
    vllm = VllmPlan(plan=plan, exported=frozenset({"ar"}))
    assert vllm.inputs(row, "tinycode") == [
        "results/tiny/ckpt/ar-qwen3/config.json",
        "results/tiny/ckpt/eagle3/config.json",
        "results/tiny/oppoint/tinycode/spec_ar_vllm_eagle3.json",
    ]
    assert vllm.flags(row, "tinycode") == (
        f"--engine vllm --method eagle3 --ckpt results/tiny/ckpt/ar-qwen3 --system '{row.system}' "
        "--draft results/tiny/ckpt/eagle3 --num-speculative-tokens @results/tiny/oppoint/tinycode/"
        "spec_ar_vllm_eagle3.json"
    )
    assert tiny_plan().missing(row) == VLLM_ENV_MISSING  # vllm_python ""
    # The paper profile trains no head: it reads checkpoints.eagle3, and says so where that is absent.
    paper = paper_plan({"ar": "/nowhere"})
    assert "no eagle3 checkpoint on the paper profile" in paper.ckpt_missing("eagle3")
