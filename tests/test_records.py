"""Result records: round trip, every kind of bad input with its message, and a fuzz test of the loader."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orl.errors import InputError
from orl.records import (
    capture_environment,
    config_hash,
    load_records,
    make_record,
    not_run,
    validate_record,
    write_records,
)
from orl.records.environment import ENV_KEYS
from orl.records.schema import load_schema


def _latency_record(**overrides) -> dict:
    fields = dict(
        system="dLLM + ORL",
        engine="dlmrt",
        model={"name": "tiny-dlm", "ckpt": "ckpt/dlm", "ckpt_sha256": "ab" * 32, "precision": "float32"},
        metrics={"latency_median_s": 0.5, "latency_p90_s": 0.7, "tokens_per_s": 120.0, "tpf": 2.5},
        policy={"name": "threshold", "params": {"tau": 0.9}},
        suite="tinycode",
        n_problems=2,
        per_problem=[
            {"task_id": "TinyCode/0", "passed": True, "result": "passed"},
            {"task_id": "TinyCode/1", "passed": False, "result": "failed: AssertionError"},
        ],
        config={"preset": "tiny", "seed": 0},
    )
    fields.update(overrides)
    return make_record("latency", **fields)


def test_round_trip(tmp_path):
    records = [
        _latency_record(),
        not_run("latency", system="vLLM AR", engine="vllm", reason="no CUDA device"),
    ]
    path = tmp_path / "r.jsonl"
    write_records(path, records)
    assert load_records(path) == records
    write_records(path, [*load_records(path), _latency_record(system="AR (hf)", engine="hf")])
    loaded = load_records(path)
    assert [r["system"] for r in loaded] == ["dLLM + ORL", "vLLM AR", "AR (hf)"]
    assert loaded[1]["status"] == "not run: no CUDA device"
    assert path.read_text().count("\n") == 3


def test_environment_block_has_every_key():
    env = capture_environment({"b": 1, "a": [1, 2]})
    assert tuple(env) == ENV_KEYS
    assert env["cpu_count"] >= 1
    assert env["cpu_capability"] == torch.backends.cpu.get_cpu_capability()  # "AVX2", "AVX512", ...
    assert env["config_hash"] == config_hash({"a": [1, 2], "b": 1})  # key order does not matter
    assert env["config_hash"] != config_hash({"a": [1, 2], "b": 2})
    assert env["vllm"] is None or isinstance(env["vllm"], str)
    assert len(env["date"]) == 10
    assert capture_environment()["config_hash"] is None


def _write_lines(path, lines: list[str], final_newline: bool = True) -> None:
    path.write_text("\n".join(lines) + ("\n" if final_newline else ""))


def _mutated(mutate) -> str:
    record = _latency_record()
    mutate(record)
    return json.dumps(record)


def _drop(key):
    return lambda r: r.pop(key)


def _set(path, value):
    def mutate(record):
        target = record
        for part in path[:-1]:
            target = target[part]
        target[path[-1]] = value

    return mutate


BAD_RECORDS = [
    ("missing field", _drop("engine"), "line 2: engine: missing field"),
    ("missing nested field", lambda r: r["model"].pop("precision"), "line 2: model.precision: missing field"),
    ("wrong type", _set(["metrics", "tpf"], "abc"), "line 2: metrics.tpf: expected a number or null, got "
                                                    "'abc'"),
    ("negative latency", _set(["metrics", "latency_median_s"], -0.1), "line 2: metrics.latency_median_s: "
                                                                      "must be > 0"),
    ("unknown metric", _set(["metrics", "tfp"], 2.0), "line 2: metrics.tfp: unknown metric 'tfp'"),
    ("unknown field", _set(["colour"], "red"), "line 2: colour: unknown field"),
    ("bad kind", _set(["kind"], "speed"), "line 2: kind: expected one of 'quality'"),
    ("bad status", _set(["status"], "skipped"), "line 2: status: expected 'measured' or 'not run: <reason>'"),
    ("pass@1 above 1", _set(["metrics", "pass_at_1"], 1.5), "line 2: metrics.pass_at_1: must be <= 1"),
    ("bool as number", _set(["metrics", "tokens"], True), "line 2: metrics.tokens: expected an integer "
                                                          "or null"),
    ("bad per-problem", _set(["per_problem", 1, "passed"], "no"), "line 2: per_problem[1].passed: "
                                                                  "expected a boolean"),
    ("env key missing", lambda r: r["env"].pop("git_sha"), "line 2: env.git_sha: missing field"),
    ("p90 below median", _set(["metrics", "latency_p90_s"], 0.1), "line 2: metrics.latency_p90_s: must "
                                                                  "be >= latency_median_s"),
    ("bad sha", _set(["model", "ckpt_sha256"], "xyz"), "line 2: model.ckpt_sha256: expected 64 lowercase "
                                                       "hex digits"),
]  # fmt: skip


@pytest.mark.parametrize(
    "mutate, expected", [case[1:] for case in BAD_RECORDS], ids=[c[0] for c in BAD_RECORDS]
)
def test_invalid_record_is_rejected_with_line_and_field(tmp_path, mutate, expected):
    path = tmp_path / "x.jsonl"
    _write_lines(path, [json.dumps(_latency_record()), _mutated(mutate)])
    with pytest.raises(InputError) as info:
        load_records(path)
    assert str(info.value).startswith(f"{path} line 2: ")
    assert expected in str(info.value)


@pytest.mark.parametrize(
    "lines, final_newline, expected",
    [
        (["{not json"], True, "line 2: invalid JSON"),
        (["[1, 2]"], True, "line 2: expected a JSON object per line, got array"),
        (["42"], True, "line 2: expected a JSON object per line, got number"),
        (['{"metrics": NaN}'], True, "line 2: invalid JSON: NaN is not valid JSON"),
        (["{}"], True, "line 2: schema_version: missing field"),
    ],
)
def test_malformed_lines(tmp_path, lines, final_newline, expected):
    path = tmp_path / "x.jsonl"
    _write_lines(path, [json.dumps(_latency_record()), *lines], final_newline)
    with pytest.raises(InputError, match=r"line 2: ") as info:
        load_records(path)
    assert expected in str(info.value)


def test_truncated_last_line(tmp_path):
    full = json.dumps(_latency_record())
    path = tmp_path / "x.jsonl"
    path.write_text(full + "\n" + full[: len(full) // 2])
    with pytest.raises(InputError, match=r"x\.jsonl line 2: truncated last line"):
        load_records(path)


def test_missing_file_and_non_utf8(tmp_path):
    with pytest.raises(InputError, match="no such record file"):
        load_records(tmp_path / "absent.jsonl")
    path = tmp_path / "bin.jsonl"
    path.write_bytes(b'{"a": "\xff"}\n')
    with pytest.raises(InputError, match="line 1: not valid UTF-8"):
        load_records(path)


def test_blank_lines_are_skipped_and_line_numbers_stay_true(tmp_path):
    good = json.dumps(_latency_record())
    path = tmp_path / "x.jsonl"
    _write_lines(path, [good, "", good, "   ", "[]"])
    with pytest.raises(InputError, match="line 5: "):
        load_records(path)


def test_write_refuses_invalid_records_and_leaves_file_untouched(tmp_path):
    path = tmp_path / "x.jsonl"
    write_records(path, [_latency_record()])
    before = path.read_bytes()
    bad = copy.deepcopy(_latency_record())
    bad["metrics"]["tpf"] = -1
    with pytest.raises(InputError, match=r"record 2 \(not written\): metrics.tpf: must be >= 0"):
        write_records(path, [_latency_record(), bad])
    assert path.read_bytes() == before


def test_make_record_validates_its_arguments():
    with pytest.raises(InputError, match="metrics.speed: unknown metric"):
        _latency_record(metrics={"speed": 1.0})
    with pytest.raises(InputError, match="metrics.tpf: expected a finite number"):
        _latency_record(metrics={"tpf": float("inf")})
    with pytest.raises(InputError, match="per_problem: 2 distinct task_ids but n_problems is 1"):
        _latency_record(n_problems=1)
    assert validate_record(_latency_record()) is None


def test_schema_file_is_package_data_and_self_consistent():
    import jsonschema

    schema = load_schema()
    jsonschema.validators.validator_for(schema).check_schema(schema)
    env = schema["properties"]["env"]
    # Every key a record writes is described; only keys added after records were committed are optional.
    assert set(env["properties"]) == set(ENV_KEYS)
    assert set(ENV_KEYS) - set(env["required"]) == {"cpu_capability"}


# --------------------------------------------------------------------------------------
# Fuzz: whatever the file holds, the loader returns records or raises InputError.
# --------------------------------------------------------------------------------------

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)


def _record_like(draw_value):
    # Start from a valid record and replace one field (possibly nested) with a random value,
    # so the fuzzer also explores records that are almost right.
    return st.builds(
        lambda path, value: _mutated(_set(path, value)),
        st.sampled_from([["metrics", "tpf"], ["model"], ["env", "cpu_count"], ["per_problem"], ["kind"],
                         ["metrics", "pass_at_3"], ["policy"], ["created"], ["n_problems"], ["extra"]]),
        draw_value,
    )  # fmt: skip


_lines = st.lists(
    st.one_of(
        _json_values.map(json.dumps),
        _record_like(_json_values),
        st.text(max_size=40),
        st.binary(max_size=40).map(lambda b: b.decode("latin-1")),
    ),
    max_size=5,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=_lines, final_newline=st.booleans())
def test_fuzz_loader_only_raises_input_error(tmp_path, lines, final_newline):
    path = tmp_path / "fuzz.jsonl"
    path.write_bytes(("\n".join(lines) + ("\n" if final_newline else "")).encode("utf-8", "surrogatepass"))
    try:
        records = load_records(path)
    except InputError as exc:
        assert str(exc).startswith(str(path))
    else:
        for record in records:
            validate_record(record)


def test_deeply_nested_json_is_an_input_error(tmp_path):
    path = tmp_path / "deep.jsonl"
    path.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(InputError, match="line 1: "):
        load_records(path)
