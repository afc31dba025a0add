"""Matched accuracy (docs/method.md §4, orl/eval/operating_point.py): tolerance and paired test, the chosen
point."""

from __future__ import annotations

import json

import numpy as np
import pytest

from orl.decoding import Policy
from orl.decoding.verify import Verification
from orl.errors import InputError
from orl.eval.operating_point import (
    Candidate,
    choose_operating_point,
    edge_note,
    extend_grid,
    match,
    next_value,
)
from orl.eval.uncertainty import Runs, stack_runs


def passes(outcomes: list[int]) -> Runs:
    return stack_runs([f"T/{i}" for i in range(len(outcomes))], [{"passed": list(outcomes)}])


def _candidate(tau, outcomes, tpf):
    runs = passes(outcomes)
    return Candidate(Policy("threshold", tau), float(np.mean(outcomes)), tpf, runs)


def _measurer(points: dict):
    """A grid extension's `measure` that hands out `points` by value, and the values it was asked for."""
    measured = []

    def measure(policy):
        measured.append(policy.value)
        return points[policy.value]

    return measure, measured


def test_match_needs_the_tolerance_and_no_paired_evidence_of_being_worse():
    reference = passes([1] * 80 + [0] * 20)
    same = passes([1] * 80 + [0] * 20)
    assert match(same, reference, 0.01).matched
    # One problem fewer: -0.01, within the tolerance; one discordant problem cannot show it worse.
    one_less = passes([1] * 79 + [0] * 21)
    assert match(one_less, reference, 0.01).matched
    # Five fewer with a tolerance of 0.05: within it, but every resample that contains any of the
    # five discordant problems (all but ~0.6% of them) sees it worse: the paired test rejects it.
    five_less = passes([1] * 75 + [0] * 25)
    result = match(five_less, reference, 0.05)
    assert result.within_tolerance and result.shown_worse and not result.matched
    assert "shown worse" in result.why
    # Below the tolerance: not matched, whatever the test says.
    assert not match(passes([1] * 70 + [0] * 30), reference, 0.05).within_tolerance


def test_a_matched_point_at_the_grids_lowest_value_extends_the_grid_until_accuracy_falls_off():
    reference = passes([1] * 80 + [0] * 20)
    grid = [_candidate(0.5, [1] * 80 + [0] * 20, 6.0), _candidate(0.7, [1] * 81 + [0] * 19, 4.0)]
    # Below the grid: 0.3 still matches (the edge moves down), 0.1 falls off 30 points.
    below = {0.3: _candidate(0.3, [1] * 80 + [0] * 20, 8.0), 0.1: _candidate(0.1, [1] * 50 + [0] * 50, 12.0)}
    measure, measured = _measurer(below)
    added = extend_grid(grid, measure, reference, 0.01)
    assert measured == [0.3, 0.1] and [c.value for c in added] == [0.3, 0.1]
    point = choose_operating_point(grid + added, reference, 0.01)
    assert (point.value, point.edge) == (0.3, None)
    # At the parameter's range the step halves (τ in (0, 1]: 0.0 is out, 0.05 is next); where it falls
    # off there, the extension stops.
    low = [_candidate(0.1, [1] * 80 + [0] * 20, 9.0), _candidate(0.2, [1] * 80 + [0] * 20, 7.0)]
    below[0.05] = _candidate(0.05, [1] * 40 + [0] * 60, 14.0)
    added = extend_grid(low, measure, reference, 0.01)
    assert [c.value for c in added] == [0.05] and measured == [0.3, 0.1, 0.05]
    measured.clear()
    # A chosen point inside the grid, or an unmatched one, measures nothing.
    assert extend_grid([below[0.1], *grid], measure, reference, 0.01) == []
    # Unmatched with the most accurate point inside the grid: nothing to measure either.
    inside = [_candidate(0.5, [1] * 50 + [0] * 50, 6.0), _candidate(0.7, [1] * 60 + [0] * 40, 4.0),
              _candidate(0.9, [1] * 55 + [0] * 45, 2.0)]  # fmt: skip
    assert extend_grid(inside, measure, reference, 0.01) == [] and measured == []


def test_next_value_halves_a_step_that_leaves_the_range():
    tau, delta, k = (
        Policy("threshold", 0.5).valid_value,
        Verification.valid_value,
        Policy("fixed", 1).valid_value,
    )
    assert next_value([0.3, 0.4, 0.5], "lowest", tau) == 0.2  # one grid step
    assert next_value([0.1, 0.3, 0.5], "lowest", delta) == 0.05  # -0.1 and 0.0 leave (0, 1]: a quarter step
    assert next_value([0.05, 0.1], "lowest", delta) == 0.025
    assert next_value([0.9, 0.95], "highest", tau) == 1.0
    assert next_value([0.95, 1.0], "highest", tau) is None  # nothing above 1 in (0, 1]
    assert next_value([1, 2], "lowest", k) is None  # fixed's k is a positive integer: no halving helps


def test_a_matched_delta_at_the_lowest_value_extends_toward_zero():
    """The relaxed δ sweep's grid (orl.rows.RELAXED_DELTAS ends at 0.1, spacing 0.2): its extension
    halves the step toward 0 and stops where accuracy falls off."""
    reference = passes([1] * 80 + [0] * 20)

    def point(delta, outcomes, speed):
        return Candidate(
            Verification.parse(f"relaxed:{delta:g}"), float(np.mean(outcomes)), speed, passes(outcomes)
        )

    grid = [point(0.3, [1] * 80 + [0] * 20, 4.0), point(0.1, [1] * 80 + [0] * 20, 4.5)]
    below = {0.05: point(0.05, [1] * 80 + [0] * 20, 4.7), 0.025: point(0.025, [1] * 60 + [0] * 40, 5.0)}
    measure, measured = _measurer(below)
    added = extend_grid(grid, measure, reference, 0.005)
    assert measured == [0.05, 0.025] and all(str(c.policy).startswith("relaxed:") for c in added)
    chosen = choose_operating_point(grid + added, reference, 0.005)
    assert (chosen.policy, chosen.edge) == ("relaxed:0.05", None)


def test_an_unmatched_sweep_whose_most_accurate_point_is_the_highest_value_extends_the_grid_above():
    reference = passes([1] * 80 + [0] * 20)
    grid = [_candidate(0.85, [1] * 60 + [0] * 40, 6.0), _candidate(0.9, [1] * 70 + [0] * 30, 4.0)]
    above = {0.95: _candidate(0.95, [1] * 75 + [0] * 25, 3.0), 1.0: _candidate(1.0, [1] * 80 + [0] * 20, 2.0)}
    measure, measured = _measurer(above)
    added = extend_grid(grid, measure, reference, 0.01)
    # 0.95 is still short of the reference, 1.0 matches; 1.05 would leave τ's range anyway.
    assert measured == [0.95, 1.0] and [c.value for c in added] == [0.95, 1.0]
    point = choose_operating_point(grid + added, reference, 0.01)
    assert (point.value, point.matched, point.edge) == (1.0, True, None)
    # Unmatched at τ = 1: the range ends the extension, the point stays marked at the grid's top.
    short = [_candidate(0.95, [1] * 60 + [0] * 40, 3.0), _candidate(1.0, [1] * 70 + [0] * 30, 2.0)]
    assert extend_grid(short, measure, reference, 0.01) == [] and len(measured) == 2
    assert choose_operating_point(short, reference, 0.01).edge == "highest"
    assert "a stricter τ might match" in edge_note("highest", [0.9, 0.95])
    assert "the strictest: no τ matches" in edge_note("highest", [0.95, 1.0])
    # The limit bounds each side: one value at most here.
    assert len(extend_grid(grid, measure, reference, 0.01, limit=1)) == 1


def test_operating_point_is_the_fastest_match_and_edges_are_marked():
    reference = passes([1] * 80 + [0] * 20)
    sweep = [
        _candidate(0.3, [1] * 60 + [0] * 40, 8.0),  # fast, far below the reference
        _candidate(0.5, [1] * 80 + [0] * 20, 6.0),  # matches
        _candidate(0.7, [1] * 81 + [0] * 19, 4.0),  # matches, slower
        _candidate(0.9, [1] * 82 + [0] * 18, 2.0),
    ]
    point = choose_operating_point(sweep, reference, 0.01)
    assert (point.policy, point.matched, point.edge) == ("threshold:0.5", True, None)
    assert point.matching == [0.5, 0.7, 0.9] and point.grid == [0.3, 0.5, 0.7, 0.9]
    # The lowest τ matching: its TPF is only a lower bound of the matched TPF.
    edge = choose_operating_point(sweep[1:], reference, 0.01)
    assert edge.value == 0.5 and edge.edge == "lowest"
    # Nothing matches: the most accurate point, at the top of the grid, marked.
    weak = choose_operating_point([_candidate(0.5, [1] * 50 + [0] * 50, 6.0),
                                   _candidate(0.9, [1] * 60 + [0] * 40, 2.0)], reference, 0.01)  # fmt: skip
    assert (weak.value, weak.matched, weak.edge) == (0.9, False, "highest") and weak.why.startswith(
        "not matched"
    )
    with pytest.raises(InputError):
        choose_operating_point([], reference)


def _record(kind, passed, *, tau=None, tpf=2.0, system="dLLM + ORL", engine="dlmrt", per_problem=True):
    from orl.records import make_record

    outcomes = [
        {
            "task_id": f"T/{i}",
            "passed": bool(p),
            "result": "passed" if p else "failed",
            "tokens": 10,
            "nfe": 2,
        }
        for i, p in enumerate(passed)
    ]
    return make_record(
        kind,
        system=system,
        engine=engine,
        model={"name": "tiny", "precision": "float32"},
        policy={"name": "threshold", "params": {"tau": tau}} if tau is not None else None,
        suite="tinycode",
        n_problems=len(passed),
        metrics={"pass_at_1": float(np.mean(passed)), "tpf": tpf},
        per_problem=outcomes if per_problem else None,
        split="test",
    )


def test_operating_point_command_writes_the_choice_and_its_record(tmp_path, capsys):
    from orl.cli import main
    from orl.commands.choice_files import policy_arg
    from orl.records import load_records, write_records

    sweep, reference = tmp_path / "sweep.jsonl", tmp_path / "ar.jsonl"
    write_records(sweep, [_record("sweep", [1] * 80 + [0] * 20, tau=0.3, tpf=9.0),
                          _record("sweep", [1] * 84 + [0] * 16, tau=0.6, tpf=5.0)])  # fmt: skip
    write_records(
        reference, [_record("quality", [1] * 82 + [0] * 18, system="AR (hf)", engine="hf", tpf=1.0)]
    )
    out, quality = tmp_path / "point.json", tmp_path / "op.jsonl"
    assert main(["operating-point", "--sweep", str(sweep), "--reference", str(reference), "--out", str(out),
                 "--quality-out", str(quality)]) == 0  # fmt: skip
    assert policy_arg(f"@{out}") == "threshold:0.6"  # 0.80 < 0.82 - 0.01: the faster point does not match
    assert json.loads(out.read_text())["tau"] == 0.6  # the swept parameter, under the policy's own name
    (record,) = load_records(quality)
    assert record["extra"]["matched"] is True and record["extra"]["edge"] is None
    assert record["extra"]["grid"] == [0.3, 0.6] and record["extra"]["reference"]["system"] == "AR (hf)"
    assert "operating point threshold:0.6" in capsys.readouterr().out
    # Matched accuracy is a paired test: a sweep without per-problem outcomes is refused, naming the field.
    write_records(sweep, [_record("sweep", [1] * 10, tau=0.5, per_problem=False)])
    assert (
        main(["operating-point", "--sweep", str(sweep), "--reference", str(reference), "--out", str(out)])
        == 2
    )
    assert "per_problem" in capsys.readouterr().err


def test_the_strict_point_is_the_policys_strict_variant(tmp_path):
    from orl.eval.operating_point import write_strict_point

    source, target = tmp_path / "point.json", tmp_path / "strict.json"
    source.write_text(json.dumps({"policy": "threshold:0.85", "tau": 0.85, "matched": True}))
    write_strict_point(source, target)
    assert json.loads(target.read_text()) == {
        "policy": "strict-threshold:0.85",
        "tau": 0.85,
        "matched": True,
        "from": str(source),
    }
    source.write_text(json.dumps({"policy": "fixed:1"}))
    with pytest.raises(InputError, match="strict variant"):
        write_strict_point(source, target)


def test_a_sweep_of_another_policy_chooses_a_point_of_that_policy():
    reference = passes([1] * 80 + [0] * 20)
    sweep = [
        Candidate(Policy("factor", f), float(np.mean(o)), tpf, passes(o))
        for f, o, tpf in ((1.0, [1] * 80 + [0] * 20, 3.0), (2.0, [1] * 60 + [0] * 40, 6.0))
    ]
    point = choose_operating_point(sweep, reference, 0.01)
    assert (point.policy, point.to_dict()["f"]) == ("factor:1", 1.0)
    with pytest.raises(InputError, match="one policy"):
        choose_operating_point([sweep[0], _candidate(0.5, [1] * 80 + [0] * 20, 2.0)], reference)
