"""A newcomer's bad inputs: each is one line on stderr and exit 2 before any work starts, or the corrected
behaviour (issue 27). Every case decodes nothing: the checks run on arguments and config.json only."""

from __future__ import annotations

import json

import pytest
import torch
import yaml

from orl.cli import main
from orl.commands.checks import sweep_values
from orl.errors import ConfigError, InputError
from orl.records import make_record
from orl.records.rules import tpf_problem
from orl.records.submit import record_problems
from orl.workflow_config import config_problem, profile_of, sweep_grid, table5_suites

from .test_dag import REPO, snakemake


def one_line_error(capsys, argv: list[str], *expected: str) -> str:
    """Run `orl argv`: it must exit 2 with one line on stderr holding every `expected` piece."""
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own checks
        code = exc.code
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert "\n" not in err and err.startswith("orl "), err
    for piece in expected:
        assert piece in err, err
    return err


@pytest.fixture
def no_decoding(monkeypatch):
    """Any decoding or training reached by a case fails the test: the checks must come first."""

    def refuse(*args, **kwargs):
        raise AssertionError("work started before the arguments were checked")

    # eval-quality reaches the evaluation through orl.eval.quality_record, which holds its own name for it
    # (patched first, so that importing it here binds the real function, restored after the test).
    monkeypatch.setattr("orl.eval.quality_record.evaluate_quality", refuse)
    monkeypatch.setattr("orl.eval.quality.evaluate_quality", refuse)
    monkeypatch.setattr("orl.eval.sweep.run_sweep", refuse)
    monkeypatch.setattr("orl.train.pretrain.train_ar", refuse)
    monkeypatch.setattr("orl.train.orl.train_orl", refuse)


@pytest.mark.parametrize("limit", ["0", "-3", "x"])
def test_eval_quality_limit_must_be_positive(capsys, tmp_path, ar_ckpt_dir, no_decoding, limit):
    one_line_error(
        capsys,
        ["eval-quality", "--ckpt", str(ar_ckpt_dir), "--limit", limit, "--out", str(tmp_path / "q.jsonl")],
        "--limit",
        "positive integer",
    )


def test_eval_quality_unknown_difficulty(capsys, tmp_path, ar_ckpt_dir, no_decoding):
    one_line_error(
        capsys,
        [
            "eval-quality",
            "--ckpt",
            str(ar_ckpt_dir),
            "--difficulty",
            "medum",
            "--out",
            str(tmp_path / "q.jsonl"),
        ],
        "--difficulty",
        "medum",
    )


def test_eval_quality_out_directory(capsys, tmp_path, ar_ckpt_dir, no_decoding):
    one_line_error(
        capsys,
        ["eval-quality", "--ckpt", str(ar_ckpt_dir), "--out", str(tmp_path)],
        "--out",
        "is a directory",
    )


def test_hf_assisted_needs_a_draft(capsys, tmp_path, ar_ckpt_dir, no_decoding):
    one_line_error(
        capsys,
        [
            "eval-quality",
            "--ckpt",
            str(ar_ckpt_dir),
            "--engine",
            "hf-assisted",
            "--limit",
            "1",
            "--out",
            str(tmp_path / "q.jsonl"),
        ],
        "hf-assisted",
        "--draft",
    )
    assert not (tmp_path / "q.jsonl").exists()


def test_a_draft_an_engine_ignores_is_refused(capsys, ar_ckpt_dir, no_decoding):
    one_line_error(
        capsys,
        [
            "generate",
            "--ckpt",
            str(ar_ckpt_dir),
            "--engine",
            "hf",
            "--draft",
            str(ar_ckpt_dir),
            "--prompt",
            "x",
        ],
        "--draft",
        "hf",
    )


@pytest.mark.parametrize("engine", ["reference", "hf"])
def test_a_commit_policy_on_an_ar_checkpoint_is_refused(capsys, ar_ckpt_dir, no_decoding, engine):
    one_line_error(
        capsys,
        [
            "generate",
            "--ckpt",
            str(ar_ckpt_dir),
            "--engine",
            engine,
            "--policy",
            "threshold:0.5",
            "--prompt",
            "x",
        ],
        "--policy threshold:0.5",
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="the case is a CPU machine")
def test_generate_on_a_serving_engine_without_cuda(capsys, ar_ckpt_dir):
    one_line_error(
        capsys,
        ["generate", "--ckpt", str(ar_ckpt_dir), "--engine", "vllm", "--prompt", "x"],
        "--engine vllm: cannot run here",
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [("", "got none"), ("0.5,2", "(0, 1]"), ("abc", "not a number"), ("0.5,0.5", "twice")],
)
def test_sweep_thresholds_checked_before_decoding(capsys, tmp_path, ar_ckpt_dir, no_decoding, value, message):
    one_line_error(
        capsys,
        ["sweep", "--ckpt", str(ar_ckpt_dir), "--thresholds", value, "--out", str(tmp_path / "s.jsonl")],
        "--thresholds",
        message,
    )


def test_sweep_values_parse():
    assert sweep_values("0.3, 0.9") == [0.3, 0.9]


@pytest.mark.parametrize(("section", "text"), [("ar", "ar: {steps: 0}"), ("ar", "ar: {steps: -5}")])
def test_training_steps_must_be_positive(capsys, tmp_path, no_decoding, section, text):
    config = tmp_path / "bad.yaml"
    config.write_text(text + "\n")
    one_line_error(
        capsys,
        ["train-ar", "--preset", "smoke", "--config", str(config), "--out", str(tmp_path / "o")],
        f"{section}.steps",
        "positive integer",
    )
    assert not (tmp_path / "o").exists()


def test_orl_steps_must_be_positive(capsys, tmp_path, no_decoding):
    config = tmp_path / "bad.yaml"
    config.write_text("orl: {iterations_steps: 0}\n")
    one_line_error(
        capsys,
        [
            "train-orl",
            "--preset",
            "smoke",
            "--config",
            str(config),
            "--init",
            str(tmp_path),
            "--out",
            str(tmp_path / "o"),
        ],
        "orl.iterations_steps",
    )


@pytest.mark.parametrize(
    "text, field",
    [
        ("orl: {rollouts_per_prompt: 0}", "orl.rollouts_per_prompt"),
        ("orl: {batch_size: -1}", "orl.batch_size"),
    ],
)
def test_orl_counts_are_checked_but_batch_size_zero_means_all(capsys, tmp_path, no_decoding, text, field):
    config = tmp_path / "bad.yaml"
    config.write_text(text + "\n")
    one_line_error(
        capsys,
        [
            "train-orl",
            "--preset",
            "smoke",
            "--config",
            str(config),
            "--init",
            str(tmp_path),
            "--out",
            str(tmp_path / "o"),
        ],
        field,
    )


def test_convert_steps_must_be_positive(capsys, tmp_path, no_decoding):
    config = tmp_path / "bad.yaml"
    config.write_text("convert: {steps: 0}\n")
    one_line_error(
        capsys,
        [
            "convert",
            "--preset",
            "smoke",
            "--config",
            str(config),
            "--init",
            str(tmp_path),
            "--out",
            str(tmp_path / "o"),
        ],
        "convert.steps",
    )


def test_train_orl_warns_when_nothing_was_retained(capsys, tmp_path, monkeypatch):
    summary = {
        "steps": 10,
        "refreshes": 2,
        "self_generated_tokens": 0,
        "wall_s": 1.0,
        "reference_targets": 16,
    }
    monkeypatch.setattr("orl.train.orl.check_init", lambda *a, **k: None)
    monkeypatch.setattr("orl.train.orl.train_orl", lambda *a, **k: summary)
    monkeypatch.setattr("orl.engines.registry.rollout_decoder", lambda *a, **k: None)
    assert (
        main(["train-orl", "--preset", "smoke", "--init", str(tmp_path), "--out", str(tmp_path / "o")]) == 0
    )
    err = capsys.readouterr().err
    assert (
        "warning:" in err and "no self-generated token was retained" in err and "reference solutions" in err
    )


def test_generate_help_says_what_it_prints(capsys):
    with pytest.raises(SystemExit):
        main(["generate", "--help"])
    out = "".join(capsys.readouterr().out.split())  # argparse wraps lines, at hyphens too
    assert "promptfollowedbyitscompletion" in out and "dlmrt-eagerontheCPU" in out


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out.startswith("orl ")


def test_rows_lists_every_table(capsys):
    from orl import rows

    assert main(["rows"]) == 0
    out = capsys.readouterr().out
    for table in rows.TABLES:
        assert f"Table {table}" in out
    assert all(repr(row.system) in out for row in rows.ROWS if row.tables)


def test_records_show(capsys, tmp_path):
    record = make_record(
        "quality",
        system="dLLM + ORL",
        engine="dlmrt",
        model={"name": "m", "precision": "float32"},
        metrics={"pass_at_1": 0.5, "tpf": 0.959},
        suite="tinycode",
        split="test",
        n_problems=2,
    )
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(record) + "\n")
    assert main(["records", "show", str(path)]) == 0
    assert (
        "1: quality | dLLM + ORL | dlmrt | tinycode | measured | pass_at_1=0.5 tpf=0.959"
        in capsys.readouterr().out
    )


# --- One TPF rule for `orl records validate` and `orl submit` (orl/records/rules.py, docs/metrics.md) ---


def test_tpf_below_one_is_one_rule_for_validate_and_submit(capsys, tmp_path):
    record = make_record(
        "latency",
        system="dLLM + ORL",
        engine="dlmrt",
        model={"name": "m", "precision": "float32"},
        metrics={"tpf": 0.959, "tokens_per_s": 10.0, "latency_median_s": 0.1},
        suite="tinycode",
        n_problems=2,
    )
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(record) + "\n")
    assert main(["records", "validate", str(path)]) == 0
    assert not [p for p in record_problems(record) if "tpf" in p]
    record["metrics"]["tpf"] = 2000.0
    path.write_text(json.dumps(record) + "\n")
    one_line_error(capsys, ["records", "validate", str(path)], "metrics.tpf: 2000.0 is above 1024")
    assert [p for p in record_problems(record) if "tpf" in p] == [tpf_problem(2000.0)]


# --- The DAG's configuration ---


def test_a_configfile_must_name_its_profile(tmp_path):
    with pytest.raises(ValueError, match="profile: missing"):
        profile_of({"max_new_tokens": 17}, ["mine.yaml"])
    assert profile_of({}, []) == "tiny" and profile_of({"profile": "smoke"}, ["mine.yaml"]) == "smoke"


def test_a_config_typo_is_one_line():
    problem = config_problem(
        {"profile": "smoke", "colour": "blue"}, REPO / "workflows" / "config" / "schema.yaml"
    )
    assert problem.startswith("unknown key 'colour' (known keys: ") and "\n" not in problem


@pytest.mark.slow
def test_snakemake_refuses_a_configfile_without_profile(tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text("max_new_tokens: 17\n")
    run = snakemake("-n", "reproduce_table2", "--configfile", str(mine), cwd=tmp_path, timeout=300)
    assert run.returncode != 0 and "profile: missing" in run.stdout + run.stderr


def test_render_warns_about_systems_no_row_reads(capsys, tmp_path):
    record = make_record(
        "quality",
        system="my system",
        engine="dlmrt",
        model={"name": "m", "precision": "float32"},
        metrics={"pass_at_1": 0.5, "tpf": 2.0},
        suite="tinycode",
        split="test",
        n_problems=2,
    )
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "q.jsonl").write_text(json.dumps(record) + "\n")
    assert (
        main(
            [
                "render",
                "--profile",
                "smoke",
                "--results",
                str(tmp_path / "results"),
                "--out",
                str(tmp_path / "reports"),
                "--tables",
                "2",
                "--no-index",
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert "'my system'" in err and "orl rows" in err


# --- Tables read at a glance ---


@pytest.fixture(scope="module")
def tiny_table2():
    from orl.records import load_record_tree
    from orl.report.claims import DEFAULT_CLAIMS_PATH, load_claims
    from orl.report.tables import build_table2

    claims = load_claims(DEFAULT_CLAIMS_PATH)
    return build_table2(load_record_tree(REPO / "results" / "tiny"), claims), claims


def test_table2_opens_on_a_compact_headline(tiny_table2, tmp_path):
    import re

    from orl.report.render import table_paths, write_table

    frame, claims = tiny_table2
    write_table(frame, tmp_path, claims)
    paths = table_paths(tmp_path, 2)
    md = paths["md"].read_text()
    head = md.split("**Caveats**")[0]
    assert "single GPU" not in head and "Measured on: CPU" in head
    assert "| system | verification | TPF | tokens/s | pass@1 | matched | speedup vs AR |" in head
    assert re.search(r"\| dLLM \+ ORL \| none \(dLLM commits\) \| [0-9.]+ \[[0-9.]+, [0-9.]+\] \|", head)
    assert "**Not run**" in head and "- AR (SGLang) (sglang): needs CUDA and sglang (tinycode" in head
    assert "not run" not in head.split("**Not run**")[0].lower().replace(
        "lines measured", ""
    )  # none in the tables
    assert (
        "## All columns" in md and "| system | engine | verification | suite |" in md
    )  # the full table, after
    tex = paths["tex"].read_text()
    assert all(line.count("&") <= 6 for line in tex.splitlines())  # 7 columns: fits a page
    html = paths["html"].read_text()
    assert "<table>" in html and "Not run" in html and "AR (hf)" in html


def test_reproduce_summary_names_table2_and_what_ran(tmp_path):
    import os

    from orl.report.summary import summary

    (tmp_path / "results" / "tiny" / "quality").mkdir(parents=True)
    (tmp_path / "reports" / "tiny").mkdir(parents=True)
    record = tmp_path / "results" / "tiny" / "quality" / "q.jsonl"
    record.write_text("{}\n")
    os.utime(record, (1000, 1000))
    (tmp_path / "reports" / "tiny" / "table2.csv").write_text("system,status\na,measured\nb,not run: x\n")
    lines = summary("tiny", "2", since=2000, root=tmp_path)
    assert "reports/tiny/table2.md" in lines[0] and "1 of 2 lines measured" in lines[0]
    assert "wrote no record" in lines[1] and "1 record files" in lines[1]
    assert "wrote 1 of the 1" in summary("tiny", "2", since=500, root=tmp_path)[1]


def test_every_option_shows_its_default():
    """Help is formatted one way everywhere: an option with a default says it (orl.cli.DefaultsFormatter)."""
    import argparse

    from orl.cli import build_parser

    def walk(parser, name):
        formatter = parser._get_formatter()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub, subparser in action.choices.items():
                    yield from walk(subparser, f"{name} {sub}")
            elif action.option_strings and not isinstance(
                action, (argparse._HelpAction, argparse._VersionAction)
            ):
                assert action.help, f"{name} {action.option_strings[0]}: no help text"
                if action.default not in (None, False):
                    assert "default" in formatter._get_help_string(action), (
                        f"{name} {action.option_strings[0]}"
                    )
                yield action

    assert len(list(walk(build_parser(), "orl"))) > 100


def test_the_command_line_and_the_renderer_start_without_torch(tmp_path):
    """`orl --help` builds every subcommand's parser, and `orl render` only reads records: neither imports
    torch (its import is most of a small DAG job's start, 2 s of the 3 a render job took)."""
    import subprocess
    import sys

    code = (
        "import sys; from orl.cli import build_parser, main; build_parser(); "
        "assert 'torch' not in sys.modules, 'the parser imported torch'; "
        f"main(['render', '--profile', 'tiny', '--results', 'results/tiny', '--out', {str(tmp_path)!r}, "
        "'--tables', '4', '--no-index']); "
        "assert 'torch' not in sys.modules, 'render imported torch'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
    assert (tmp_path / "table4.md").is_file()  # from the committed records


def test_quantize_takes_ckpt_like_every_command(capsys, tmp_path):
    one_line_error(capsys, ["quantize", "--out", str(tmp_path / "q")], "CKPT: required")
    one_line_error(
        capsys,
        ["quantize", str(tmp_path / "a"), "--ckpt", str(tmp_path / "b"), "--out", str(tmp_path / "q")],
        "checkpoint given twice",
    )


def test_accuracy_figure_averages_seeds_per_threshold():
    from orl.report.figure_accuracy import mean_curves

    curves = {
        ("ORL", "dlmrt", "tinycode", "a"): [(4.0, 0.8, 0.9, None), (6.0, 0.6, 0.5, None)],
        ("ORL", "dlmrt", "tinycode", "b"): [(5.0, 0.7, 0.9, None), (8.0, 0.5, 0.5, None)],
    }
    assert mean_curves(curves) == {
        ("ORL", "dlmrt", "tinycode"): [(0.9, 4.5, 0.75, 0.7, 0.8), (0.5, 7.0, 0.55, 0.5, 0.6)]
    }


def test_the_report_page_shows_every_table():
    from orl.report.tables import TABLE_IDS

    page = (REPO / "workflows" / "report" / "workflow.rst").read_text()
    shown = [line.split("/")[-1] for line in page.splitlines() if line.strip().startswith(":file:")]
    assert shown[0] == "table2.html" and sorted(shown) == sorted(f"table{t}.html" for t in TABLE_IDS)
    assert all((REPO / "reports" / "tiny" / name).is_file() for name in shown)  # committed with the records


def test_the_sweep_grid_is_checked_against_its_policy():
    """Every value of config sweep_values is a valid value of sweep_policy's parameter, or the run stops
    before planning with the config files, the key and the policy's requirement."""
    assert sweep_grid({"sweep_values": [0.3, 0.9]}, "tiny.yaml") == ("threshold", [0.3, 0.9])
    assert sweep_grid({"sweep_policy": "fixed", "sweep_values": [1, 2]}, "f.yaml") == ("fixed", [1, 2])
    expected = r"tiny.yaml: sweep_values \(policy threshold\): .*\(0, 1\], got 1.5"
    with pytest.raises(InputError, match=expected):
        sweep_grid({"sweep_values": [0.5, 1.5]}, "tiny.yaml")
    with pytest.raises(InputError, match="unknown policy 'greedy'"):
        sweep_grid({"sweep_policy": "greedy", "sweep_values": [0.5]}, "tiny.yaml")


def test_table5_suites_are_suites_of_the_profile():
    """config table5_suites: default the main suite; each named suite one of `suites` (an extra suite has no
    sweeps of its own), or the run stops naming the config files, the key and what was expected."""
    config = {"suites": ["tinycode", "tinymath"]}
    assert table5_suites(config, "tiny.yaml") == ["tinycode"]
    both = ["tinymath", "tinycode"]
    assert table5_suites({**config, "table5_suites": both}, "t.yaml") == both
    expected = r"tiny.yaml, mine.yaml: table5_suites: 'humaneval' is not one of this profile's suites \(exp"
    with pytest.raises(ConfigError, match=expected):
        table5_suites({**config, "table5_suites": ["tinycode", "humaneval"]}, "tiny.yaml, mine.yaml")
    with pytest.raises(ConfigError, match="table5_suites: expected a non-empty list"):
        table5_suites({**config, "table5_suites": []}, "tiny.yaml")
    folder = REPO / "workflows" / "config"
    smoke = yaml.safe_load((folder / "smoke.yaml").read_text())
    problem = config_problem({**smoke, "table5_suites": "tinycode"}, folder / "schema.yaml")
    assert problem.startswith("table5_suites: ") and "\n" not in problem
