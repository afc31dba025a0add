"""The one builder of a record's `model` block (orl/model/provenance.py) and every path that uses it."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from orl.commands.common import model_field, suite_not_run
from orl.engines.base import EngineInfo, checkpoint_info
from orl.eval.latency_record import not_run_latency_record
from orl.model.provenance import model_block, model_name
from orl.records import load_records, make_record, not_run

REPO = Path(__file__).resolve().parents[1]
BASE_AR = REPO / "results" / "tiny" / "base" / "ar"
# A committed record of a row run on the committed base's AR model (its weights, another folder).
COMMITTED = REPO / "results" / "tiny" / "latency" / "tinycode" / "ar_compiled.jsonl"


def test_a_block_without_a_checkpoint():
    assert model_block("tiny-ar") == {
        "ckpt": None,
        "ckpt_sha256": None,
        "name": "tiny-ar",
        "precision": "unknown",
    }
    assert model_block("x", "bfloat16")["precision"] == "bfloat16"


def test_the_name_is_orl_model_name_else_the_folder():
    assert model_name({"orl_model_name": "tiny-ar"}, "/ckpts/ar") == "tiny-ar"
    assert model_name({}, Path("/ckpts/ar")) == "ar"


def test_the_committed_records_block_is_rebuilt_from_the_committed_weights():
    recorded = load_records(COMMITTED)[0]["model"]
    config = json.loads((BASE_AR / "config.json").read_text())
    rebuilt = model_block(model_name(config, BASE_AR), "float32", BASE_AR)
    assert rebuilt == {**recorded, "ckpt": str(BASE_AR)}  # same name, same weights digest, same keys


def test_every_record_path_gets_the_same_block(tmp_path):
    ckpt = SimpleNamespace(config={"orl_model_name": "m"}, path=BASE_AR, precision="float32")
    expected = model_block("m", "float32", BASE_AR)
    assert model_field(ckpt) == checkpoint_info("ar", ckpt, "cpu").model_block() == expected
    info = EngineInfo("vllm", "m", str(BASE_AR), "float32", "cpu")
    assert info.model_block() == expected
    record = not_run_latency_record(
        "latency", BASE_AR, row_engine="vllm", reason="no vllm", suite="tinycode", n_problems=1,
        system=None, extra={},
    )  # fmt: skip
    assert record["model"] == model_block("tiny-ar", ckpt=BASE_AR)
    args = SimpleNamespace(ckpt=str(BASE_AR), system=None, engine="dlmrt", suite="tinycode", split="test")
    assert suite_not_run(args, "quality", "missing")["model"] == model_block("ar")  # the folder, no ckpt


@pytest.mark.parametrize("given", [{"name": "m", "precision": "nvfp4"}, model_block("m", "nvfp4")])
def test_make_record_completes_a_partial_block_with_the_builder(given):
    record = make_record("latency", system="s", engine="e", model=given, metrics={})
    assert record["model"] == model_block("m", "nvfp4")
    assert not_run("latency", system="row", engine="e", reason="r")["model"] == model_block("row")
